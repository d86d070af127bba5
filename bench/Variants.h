//===- Variants.h - The variants both attention benchmarks time -*- C++ -*-===//
//
// The named variants (SPEC §7) of attention-bench's and
// cuda-attention-bench's variants tables, and the inputs they add to a
// layer's q, k, v: the same variants and inputs on the CPU and the GPU, so
// their ratios to plain causal attention compare.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_BENCH_VARIANTS_H
#define ATTN_BENCH_VARIANTS_H

#include "runtime/attn_runtime.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace attn::bench {

/// A variants table row: its name and the keys it adds to the layer of a
/// model description.
struct BenchVariant {
  const char *name, *keys;
  bool relativeBias = false, documents = false;
  /// Attention sinks (gpt-oss), an input after v.
  bool sinks = false;
};

constexpr int64_t kBenchBiasRadius = 64, kBenchDocuments = 8;

inline const std::vector<BenchVariant> &benchVariants() {
  static const std::vector<BenchVariant> variants = {
      {"plain causal", ""},
      {"alibi", R"(, "score_mod": "alibi")"},
      {"relative_bias R = 64", R"(, "score_mod": {"relative_bias": 64})", true},
      {"document (8 documents)", R"(, "mask_mod": "document")", false, true},
      {"attention sinks", R"(, "sinks": true)", false, false, true},
  };
  return variants;
}

/// Appends `variant`'s inputs for `batch` rows of `length` tokens and
/// `heads` query heads: sinks [H], a relative-bias table [H, 2R + 1], or
/// document ids [B, L] of kBenchDocuments equal documents.
inline void appendVariantInputs(const BenchVariant &variant, int64_t batch,
                                int64_t heads, int64_t length,
                                std::vector<attn::Tensor> &inputs) {
  if (variant.sinks) {
    attn::Tensor sinks(ATTN_F32, {heads});
    for (int64_t h = 0; h < heads; ++h)
      sinks.f32()[h] = 0.5f * static_cast<float>(h % 5) - 1.0f;
    inputs.push_back(std::move(sinks));
  }
  if (variant.relativeBias) {
    attn::Tensor table(ATTN_F32, {heads, 2 * kBenchBiasRadius + 1});
    for (int64_t i = 0; i < table.numElements(); ++i)
      table.f32()[i] = 0.01f * static_cast<float>(i % 17);
    inputs.push_back(std::move(table));
  }
  if (variant.documents) {
    attn::Tensor docs(ATTN_I32, {batch, length});
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < length; ++j)
        docs.i32()[b * length + j] =
            static_cast<int32_t>(j * kBenchDocuments / length);
    inputs.push_back(std::move(docs));
  }
}

} // namespace attn::bench

#endif // ATTN_BENCH_VARIANTS_H
