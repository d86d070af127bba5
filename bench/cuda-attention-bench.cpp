//===- cuda-attention-bench.cpp - Softmax attention on a CUDA GPU ---------===//
//
// Not a test: prints a table for issue NVVM's benchmark, timed on the
// device (attn_model_last_kernel_ms: CUDA events around the launches, the
// copies of inputs and outputs left out), median of --repeat runs after
// one warm-up:
//
//  * prefill, bf16, dense and causal, in TFLOP/s of visible work (4 D per
//    visible (query, key) pair), as FlashAttention-3 reports it: D = 64,
//    128 and 256 with H = 2048 / D, L = 4K, 8K and 16K with B = 16K / L;
//    with the products on mma.sync (with --wgmma alone, the prefill table
//    on sm_90a's wgmma, one and two warpgroups per block);
//  * decode, B=1, H=32, Hkv=8, D=128, bf16, Lq=1, Lk=4K..32K, in GB/s of K
//    and V read; the same over a paged cache (pages of 16 scattered, SPEC
//    §8) against the contiguous time;
//  * DeepSeek-V3's MLA decode, B = 8, 16 heads, Lq = 1 and 2, Lk = 4K and
//    16K: the latent cache (latent_kv) against the keys and values
//    expanded per head, in GB/s of what each reads;
//  * sparse decode, the same layer with Quest top-k (64 blocks of 16
//    keys, 1 sink, 1 local), alone and followed by top-p 0.9, Lk = 8K and
//    32K, against dense decode of the same cache;
//  * tree verification, T = 8 and 64 random draft nodes over 8K and 32K
//    prefix keys, in TFLOP/s of visible work, against dense attention of
//    as many rows;
//  * variants (SPEC §7): causal prefill (H = 32, Hkv = 8, the prefill
//    sizes) with ALiBi, a relative-bias table (R = 64) and a document mask
//    of 8 documents, as ratios to plain causal timed beside them;
//  * Gated DeltaNet prefill (Qwen3-Next's linear layers: 16 k heads, 32 v
//    heads, Dk = Dv = 128, 64-step chunks, bf16), B = 1 at L = 4K, 16K and
//    64K and B = 8 at 4K, and decode steps (L = 1) of B = 1 and 32, in
//    tokens per second and GB/s of the inputs and outputs (FLA's kernels
//    at the same sizes: bench/fla-baseline.py);
//  * a 64-node draft tree through the same layer with its rmsnorm-silu
//    gate (SPEC §10) against the chunked prefill of a 64-token chain, 64
//    decode steps, and the commit of its deepest path;
//  * Kimi Delta Attention (Kimi Linear's linear layers: 32 heads, dims
//    128, a decay per key feature), B = 1 and 8 at L = 4K and decode at
//    B = 32 (FLA's chunk_kda and fused_recurrent_kda: bench/fla-baseline.py).
//
// The ceilings to divide by (PyTorch's scaled_dot_product_attention with
// the flash backend, FlexAttention, the card's copy bandwidth) come from
// bench/torch-attention-baseline.py, run in the same session:
//
//   cuda-attention-bench [--repeat N] [--sm sm_90a] [--cuda-path DIR]
//                        [--quick] [--check-on-cpu] [--wgmma]
//
// --check-on-cpu runs every table's calls, at small sizes, through the
// CUDA kernels compiled for this CPU (CompileOptions::cpuRunsCudaKernels),
// so that the bench itself is tested on machines without a GPU; its times
// are not GPU times.
//
//===----------------------------------------------------------------------===//

#include "bench/Variants.h"
#include "compiler/Compile.h"
#include "runtime/Float16.h"
#include "runtime/attn_runtime.hpp"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Options {
  int repeat = 20;
  bool quick = false, checkOnCpu = false, warpgroups = false;
  std::string sm = "sm_90a", cudaPath = "/usr/local/cuda";

  bool parse(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--repeat" && i + 1 < argc)
        repeat = std::max(1, std::atoi(argv[++i]));
      else if (arg == "--sm" && i + 1 < argc)
        sm = argv[++i];
      else if (arg == "--cuda-path" && i + 1 < argc)
        cudaPath = argv[++i];
      else if (arg == "--quick")
        quick = true;
      else if (arg == "--check-on-cpu")
        checkOnCpu = true;
      else if (arg == "--wgmma")
        warpgroups = true;
      else {
        std::fprintf(stderr,
                     "usage: %s [--repeat N] [--sm SM] [--cuda-path DIR] "
                     "[--quick] [--check-on-cpu] [--wgmma]\n",
                     argv[0]);
        return false;
      }
    }
    return true;
  }
};

/// A model compiled for the GPU and loaded on it (with --check-on-cpu: its
/// CUDA kernels compiled for this CPU); null with the reason printed when
/// there is no toolkit, driver or GPU.
std::unique_ptr<attn::Model>
load(const Options &options, const std::string &json, int64_t warpgroups = 0) {
  mlir::attn::CompileOptions compile;
  compile.cudaFlashWarpgroups = warpgroups;
  if (options.checkOnCpu) {
    compile.cpuRunsCudaKernels = true;
  } else {
    llvm::Expected<mlir::attn::CudaTarget> target =
        mlir::attn::CudaTarget::get(options.sm, options.cudaPath);
    if (!target) {
      std::fprintf(stderr, "%s\n", llvm::toString(target.takeError()).c_str());
      return nullptr;
    }
    compile.targets = mlir::attn::TargetSet::Cuda;
    compile.cuda = *target;
  }
  llvm::Expected<std::string> binary = mlir::attn::compileModelDescription(
      json, mlir::attn::CpuTarget::host(), compile);
  if (!binary) {
    std::fprintf(stderr, "%s\n", llvm::toString(binary.takeError()).c_str());
    return nullptr;
  }
  std::unique_ptr<attn::Model> model;
  attn::Status status =
      attn::Model::loadMemory(binary->data(), binary->size(), 1, model);
  if (status.ok() && !options.checkOnCpu)
    status = model->setDevice(ATTN_DEVICE_CUDA);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message.c_str());
    return nullptr;
  }
  return model;
}

/// An attention layer's model description (bf16 unless `dtype` says);
/// `extra` goes into the layer, `speculative` into the model.
std::string layerJson(int heads, int kvHeads, int dim, const char *mask,
                      const std::string &extra = "",
                      const std::string &speculative = "",
                      const char *dtype = "bf16") {
  char json[768];
  std::snprintf(json, sizeof(json),
                R"({"model": "bench", "dtype": "%s", "layers": [{"name": )"
                R"("layer", "type": "attention", "num_heads": %d, )"
                R"("num_kv_heads": %d, "head_dim": %d, "mask": "%s"%s}]%s})",
                dtype, heads, kvHeads, dim, mask, extra.c_str(),
                speculative.c_str());
  return json;
}

/// A tensor of random bf16 values in [-1, 1] (stored as f32 for ATTN_F32).
attn::Tensor randomTensor(std::vector<int64_t> shape, std::mt19937 &rng,
                          attn_dtype dtype = ATTN_BF16) {
  attn::Tensor t(dtype, std::move(shape));
  std::uniform_int_distribution<int> mantissa(0, 127);
  std::bernoulli_distribution sign;
  for (int64_t i = 0; i < t.numElements(); ++i) { // exponent 2^-1: [0.5, 1)
    const auto bits = static_cast<uint16_t>((sign(rng) ? 0x8000 : 0) | 0x3f00 |
                                            mantissa(rng));
    if (dtype == ATTN_F32) {
      const uint32_t wide = static_cast<uint32_t>(bits) << 16;
      std::memcpy(&t.f32()[i], &wide, sizeof(wide));
    } else {
      t.bits16()[i] = bits;
    }
  }
  return t;
}

/// q, k, v of random bf16 values in [-1, 1] (stored as f32 for ATTN_F32).
std::vector<attn::Tensor> randomInputs(int64_t batch, int heads, int kvHeads,
                                       int64_t lq, int64_t lk, int dim,
                                       attn_dtype dtype = ATTN_BF16) {
  std::mt19937 rng(1);
  std::vector<attn::Tensor> inputs;
  inputs.push_back(randomTensor({batch, heads, lq, dim}, rng, dtype));
  inputs.push_back(randomTensor({batch, kvHeads, lk, dim}, rng, dtype));
  inputs.push_back(randomTensor({batch, kvHeads, lk, dim}, rng, dtype));
  return inputs;
}

/// The index of entry `name`; -1 (with the error printed) when missing.
int32_t entryOf(attn::Model &model, const std::string &name) {
  int32_t entry = -1;
  attn::Status status = model.findEntry(name, entry);
  if (!status.ok())
    std::fprintf(stderr, "%s\n", status.message.c_str());
  return entry;
}

/// Median device milliseconds of `repeat` runs of `entry` after a warm-up;
/// negative (with the error printed) on failure.
double deviceMs(attn::Model &model, const std::vector<attn::Tensor> &inputs,
                int repeat, int32_t entry = 0) {
  std::vector<attn::Tensor> outputs;
  std::vector<double> times;
  for (int r = 0; r <= repeat; ++r) {
    attn::Status status = model.run(entry, inputs, outputs);
    double ms = 0;
    if (status.ok())
      status = model.lastKernelMs(ms);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message.c_str());
      return -1;
    }
    if (r > 0)
      times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// The prefill table (FlashAttention-3's sizes: 16K tokens per call, B =
/// 16K / L, H = 2048 / D) for each kind of products: 0 is mma.sync, 1 and
/// 2 the warpgroups of wgmma per block (CompileOptions::cudaFlashWarpgroups),
/// and -1 mma.sync on an f32 model (three tf32 products a step: how far
/// SPEC's default dtype is from bf16, whose 16-wide steps take a sixth of
/// the tensor-core slots). A failing wgmma row prints as failed and the
/// table goes on; a failing mma.sync row fails the table.
bool prefillTable(const Options &options,
                  const std::vector<int64_t> &warpgroupChoices) {
  const bool small = options.checkOnCpu;
  const int64_t tokens = small ? 128 : 16384;
  std::vector<int64_t> lengths = small ? std::vector<int64_t>{64}
                                 : options.quick
                                     ? std::vector<int64_t>{4096}
                                     : std::vector<int64_t>{4096, 8192, 16384};
  std::vector<int> dims =
      options.quick ? std::vector<int>{128} : std::vector<int>{64, 128, 256};
  std::printf("| prefill | products | B | H | L | D | ms | TFLOP/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int dim : dims)
    for (const char *mask : {"none", "causal"})
      for (int64_t warpgroups : warpgroupChoices) {
        const bool f32 = warpgroups < 0;
        const char *products = f32               ? "mma.sync, f32 (3xTF32)"
                               : warpgroups == 0 ? "mma.sync"
                               : warpgroups == 1 ? "wgmma x1"
                                                 : "wgmma x2";
        const char *maskName = mask[0] == 'n' ? "dense" : "causal";
        const int width = 2048, heads = width / dim;
        std::unique_ptr<attn::Model> model =
            load(options,
                 layerJson(heads, heads, dim, mask, "", "",
                           f32 ? "f32" : "bf16"),
                 std::max<int64_t>(warpgroups, 0));
        for (int64_t length : lengths) {
          const int64_t batch = std::max<int64_t>(1, tokens / length);
          double ms = model ? deviceMs(*model,
                                       randomInputs(batch, heads, heads, length,
                                                    length, dim,
                                                    f32 ? ATTN_F32 : ATTN_BF16),
                                       options.repeat)
                            : -1;
          if (ms < 0 && warpgroups <= 0)
            return false;
          if (ms < 0) {
            std::printf("| %s | %s | %lld | %d | %lld | %d | failed | "
                        "failed |\n",
                        maskName, products, static_cast<long long>(batch),
                        heads, static_cast<long long>(length), dim);
            continue;
          }
          double pairs = std::string(mask) == "causal"
                             ? length * (length + 1) / 2.0
                             : static_cast<double>(length) * length;
          double flops = 4.0 * dim * pairs * batch * heads;
          std::printf("| %s | %s | %lld | %d | %lld | %d | %.3f | %.1f |\n",
                      maskName, products, static_cast<long long>(batch), heads,
                      static_cast<long long>(length), dim, ms,
                      flops / ms / 1e9);
        }
      }
  return true;
}

/// The variants table (SPEC §7): causal prefill with ALiBi, a relative-bias
/// table and a document mask of 8 documents, as ratios to plain causal
/// attention timed beside them (FlexAttention's times for the same
/// variants come from bench/torch-attention-baseline.py).
bool variantsTable(const Options &options, int64_t batch, int64_t length) {
  const int heads = 32, kvHeads = 8, dim = 128;
  std::printf("\n| causal prefill variant | B | H | L | ms | x plain causal "
              "|\n");
  std::printf("|---|---|---|---|---|---|\n");
  double plain = 0.0;
  for (const attn::bench::BenchVariant &variant :
       attn::bench::benchVariants()) {
    std::unique_ptr<attn::Model> model =
        load(options, layerJson(heads, kvHeads, dim, "causal", variant.keys));
    if (!model)
      return false;
    std::vector<attn::Tensor> inputs =
        randomInputs(batch, heads, kvHeads, length, length, dim);
    attn::bench::appendVariantInputs(variant, batch, heads, length, inputs);
    double ms = deviceMs(*model, inputs, options.repeat);
    if (ms < 0)
      return false;
    if (plain == 0.0)
      plain = ms;
    std::printf("| %s | %lld | %d | %lld | %.3f | %.3f |\n", variant.name,
                static_cast<long long>(batch), heads,
                static_cast<long long>(length), ms, ms / plain);
  }
  return true;
}

/// The paged decode table (SPEC §8): the decode rows' keys in a paged cache
/// of pages of 16, scattered at random over a cache a quarter larger than
/// needed, against the same keys stored contiguously (issue: serving
/// layouts, target at most 1.1x the contiguous time).
bool pagedDecodeTable(const Options &options, attn::Model &contiguous,
                      const std::vector<int64_t> &keyLengths) {
  const int heads = 32, kvHeads = 8, dim = 128, pageSize = 16;
  std::unique_ptr<attn::Model> model =
      load(options, layerJson(heads, kvHeads, dim, "causal",
                              R"(, "layout": {"page_size": )" +
                                  std::to_string(pageSize) + "}"));
  if (!model)
    return false;
  std::printf("\n| paged decode (pages of 16, scattered) | Lk | ms | GB/s of K "
              "and V | x contiguous time |\n");
  std::printf("|---|---|---|---|---|\n");
  std::mt19937 rng(5);
  for (int64_t keys : keyLengths) {
    std::vector<attn::Tensor> inputs =
        randomInputs(1, heads, kvHeads, 1, keys, dim);
    const int64_t pages = (keys + pageSize - 1) / pageSize;
    const int64_t cachePages = pages + pages / 4;
    std::vector<int32_t> order(cachePages);
    for (int64_t p = 0; p < cachePages; ++p)
      order[p] = static_cast<int32_t>(p);
    std::shuffle(order.begin(), order.end(), rng);
    attn::Tensor kCache(ATTN_BF16, {cachePages, pageSize, kvHeads, dim}),
        vCache(ATTN_BF16, {cachePages, pageSize, kvHeads, dim}),
        table(ATTN_I32, {1, pages}), lengths(ATTN_I32, {1});
    for (int64_t p = 0; p < pages; ++p)
      table.i32()[p] = order[p];
    lengths.i32()[0] = static_cast<int32_t>(keys);
    // Key j of kv head h: slot j % 16 of page table[j / 16].
    for (int64_t h = 0; h < kvHeads; ++h)
      for (int64_t j = 0; j < keys; ++j) {
        int64_t slot =
            (order[j / pageSize] * pageSize + j % pageSize) * kvHeads + h;
        for (int64_t d = 0; d < dim; ++d) {
          kCache.bits16()[slot * dim + d] =
              inputs[1].bits16()[(h * keys + j) * dim + d];
          vCache.bits16()[slot * dim + d] =
              inputs[2].bits16()[(h * keys + j) * dim + d];
        }
      }
    std::vector<attn::Tensor> pagedInputs{inputs[0], kCache, vCache, table,
                                          lengths};
    // The paged cache holds the same keys: the outputs agree.
    std::vector<attn::Tensor> paged, dense;
    attn::Status status = model->run(0, pagedInputs, paged);
    if (status.ok())
      status = contiguous.run(0, inputs, dense);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message.c_str());
      return false;
    }
    for (int64_t i = 0; i < dense[0].numElements(); ++i)
      if (std::abs(attn::bf16ToFloat(paged[0].bits16()[i]) -
                   attn::bf16ToFloat(dense[0].bits16()[i])) > 1e-2f) {
        std::fprintf(stderr, "paged decode differs from contiguous at %lld\n",
                     static_cast<long long>(i));
        return false;
      }
    double ms = deviceMs(*model, pagedInputs, options.repeat);
    double contiguousMs = deviceMs(contiguous, inputs, options.repeat);
    if (ms < 0 || contiguousMs < 0)
      return false;
    double bytes = 2.0 * kvHeads * keys * dim * 2; // K and V, bf16
    std::printf("| paged | %lld | %.4f | %.1f | %.2f |\n",
                static_cast<long long>(keys), ms, bytes / ms / 1e6,
                ms / contiguousMs);
  }
  return true;
}

/// DeepSeek-V3's MLA decode (one tensor-parallel rank's 16 heads, bf16, 1
/// and 2 query rows: decode and a multi-token-prediction step): the
/// absorbed form over the latent cache (one kv head of 512 + 64 features,
/// the values its first 512) against the same layer's keys and values
/// expanded per head (192 and 128 features), in GB/s of what each reads.
bool mlaDecodeTable(const Options &options,
                    const std::vector<int64_t> &keyLengths, int64_t batch) {
  const int heads = 16, latent = 512, rope = 64, nope = 128, valueDim = 128;
  const double scale = 0.1352; // DeepSeek-V3's, YaRN's mscale included
  auto layer = [&](int kvHeads, int dim, int values, const char *extra) {
    char json[512];
    std::snprintf(json, sizeof(json),
                  R"({"model": "mla", "dtype": "bf16", "layers": [{"name": )"
                  R"("layer", "type": "attention", "num_heads": %d, )"
                  R"("num_kv_heads": %d, "head_dim": %d, "value_dim": %d, )"
                  R"("scale": %g%s}]})",
                  heads, kvHeads, dim, values, scale, extra);
    return load(options, json);
  };
  std::unique_ptr<attn::Model> absorbed =
      layer(1, latent + rope, latent, R"(, "latent_kv": true)");
  std::unique_ptr<attn::Model> expanded =
      layer(heads, nope + rope, valueDim, "");
  if (!absorbed || !expanded)
    return false;
  std::printf("\n| MLA decode (16 heads, bf16) | B | Lq | Lk | latent ms | "
              "GB/s of the latent cache | expanded ms | GB/s of K and V | "
              "x expanded time |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(9);
  for (int64_t keys : keyLengths)
    for (int64_t rows : {1, 2}) {
      std::vector<attn::Tensor> latentInputs{
          randomTensor({batch, heads, rows, latent + rope}, rng),
          randomTensor({batch, 1, keys, latent + rope}, rng)};
      std::vector<attn::Tensor> expandedInputs{
          randomTensor({batch, heads, rows, nope + rope}, rng),
          randomTensor({batch, heads, keys, nope + rope}, rng),
          randomTensor({batch, heads, keys, valueDim}, rng)};
      double latentMs = deviceMs(*absorbed, latentInputs, options.repeat);
      double expandedMs = deviceMs(*expanded, expandedInputs, options.repeat);
      if (latentMs < 0 || expandedMs < 0)
        return false;
      const double latentBytes = 2.0 * batch * keys * (latent + rope);
      const double expandedBytes =
          2.0 * batch * heads * keys * (nope + rope + valueDim);
      std::printf("| latent vs expanded | %lld | %lld | %lld | %.4f | %.1f | "
                  "%.4f | %.1f | %.2f |\n",
                  static_cast<long long>(batch), static_cast<long long>(rows),
                  static_cast<long long>(keys), latentMs,
                  latentBytes / latentMs / 1e6, expandedMs,
                  expandedBytes / expandedMs / 1e6, latentMs / expandedMs);
    }
  return true;
}

/// The sparse decode table: top-k and top-k + top-p against dense decode.
bool sparseTable(const Options &options, attn::Model &dense,
                 const std::vector<int64_t> &keyLengths) {
  const int heads = 32, kvHeads = 8, dim = 128, blockSize = 16, topK = 64;
  std::printf("\n| sparse decode (H = 32, Hkv = 8) | Lk | ms | x dense speed "
              "| GB/s (meta + 32 heads x K,V of 64 blocks) |\n");
  std::printf("|---|---|---|---|---|\n");
  struct Budget {
    const char *label, *method, *topP;
  };
  for (const Budget &budget :
       {Budget{"top-k 64 x 16", "top_k", ""},
        Budget{"top-k 64 x 16, top-p 0.9", "top_p", R"("top_p": 0.9, )"}}) {
    char sparsity[256];
    std::snprintf(sparsity, sizeof(sparsity),
                  R"(, "sparsity": {"method": "%s", "block_size": %d, )"
                  R"("top_k": %d, %s"sink_blocks": 1, "local_blocks": 1})",
                  budget.method, blockSize, topK, budget.topP);
    std::unique_ptr<attn::Model> model =
        load(options, layerJson(heads, kvHeads, dim, "causal", sparsity));
    if (!model)
      return false;
    int32_t entry = entryOf(*model, "layer"),
            metaEntry = entryOf(*model, "layer.meta");
    if (entry < 0 || metaEntry < 0)
      return false;
    for (int64_t keys : keyLengths) {
      std::vector<attn::Tensor> inputs =
          randomInputs(1, heads, kvHeads, 1, keys, dim);
      // The metadata is kept next to the cache, not computed per token.
      std::vector<attn::Tensor> meta;
      attn::Status status = model->run(metaEntry, {inputs[1]}, meta);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.message.c_str());
        return false;
      }
      std::vector<attn::Tensor> denseInputs = inputs;
      inputs.push_back(meta[0]);
      double ms = deviceMs(*model, inputs, options.repeat, entry);
      double denseMs = deviceMs(dense, denseInputs, options.repeat);
      if (ms < 0 || denseMs < 0)
        return false;
      // Heads of a kv group that keep the same block read it from cache,
      // so this counts more than DRAM serves.
      double bytes = meta[0].numElements() * 2.0 +
                     heads * double(topK) * blockSize * 2.0 * dim * 2.0;
      std::printf("| %s | %lld | %.4f | %.2f | %.1f |\n", budget.label,
                  static_cast<long long>(keys), ms, denseMs / ms,
                  bytes / ms / 1e6);
    }
  }
  return true;
}

/// A random draft tree of `nodes`: parents [1, nodes] (node t's parent
/// drawn below t, -1 for the root) and each node's depth (the root's 0).
struct RandomTree {
  attn::Tensor parents;
  std::vector<int64_t> depth;
};
RandomTree randomTree(std::mt19937 &rng, int64_t nodes) {
  RandomTree tree{attn::Tensor(ATTN_I32, {1, nodes}),
                  std::vector<int64_t>(nodes, 0)};
  for (int64_t t = 0; t < nodes; ++t) {
    tree.parents.i32()[t] = t == 0 ? -1 : static_cast<int32_t>(rng() % t);
    if (t > 0)
      tree.depth[t] = tree.depth[tree.parents.i32()[t]] + 1;
  }
  return tree;
}

/// The tree table: verification of a random draft tree against dense
/// attention of as many rows over the same keys.
bool treeTable(const Options &options, const std::vector<int64_t> &prefixes) {
  const int heads = 32, kvHeads = 8, dim = 128;
  std::printf("\n| tree (H = 32, Hkv = 8) | T | prefix | ms | TFLOP/s | "
              "dense rows ms | x dense speed |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::unique_ptr<attn::Model> model = load(
      options, layerJson(heads, kvHeads, dim, "causal", R"(, "tree": true)",
                         R"(, "speculative": {"max_tree_nodes": 64})"));
  if (!model)
    return false;
  int32_t treeEntry = entryOf(*model, "layer.tree"),
          denseEntry = entryOf(*model, "layer");
  if (treeEntry < 0 || denseEntry < 0)
    return false;
  std::mt19937 rng(3);
  for (int64_t nodes : {8, 64})
    for (int64_t prefix : prefixes) {
      std::vector<attn::Tensor> inputs =
          randomInputs(1, heads, kvHeads, nodes, prefix + nodes, dim);
      std::vector<attn::Tensor> denseInputs = inputs;
      RandomTree tree = randomTree(rng, nodes);
      double pairs = 0; // each node sees the prefix, itself and its ancestors
      for (int64_t depth : tree.depth)
        pairs += prefix + depth + 1;
      inputs.push_back(tree.parents);
      double ms = deviceMs(*model, inputs, options.repeat, treeEntry);
      double denseMs =
          deviceMs(*model, denseInputs, options.repeat, denseEntry);
      if (ms < 0 || denseMs < 0)
        return false;
      std::printf("| tree | %lld | %lld | %.4f | %.2f | %.4f | %.2f |\n",
                  static_cast<long long>(nodes), static_cast<long long>(prefix),
                  ms, 4.0 * heads * dim * pairs / ms / 1e9, denseMs,
                  denseMs / ms);
    }
  return true;
}

/// A batch of `batch` sequences of `length` tokens.
struct Sequences {
  int64_t batch, length;
};

/// Gated DeltaNet at Qwen3-Next's linear shape: 16 key heads, 32 value
/// heads, dims 128, 64-step chunks, qk_l2norm, bf16.
constexpr int kGdnKeyHeads = 16, kGdnValueHeads = 32, kGdnDim = 128;

/// The model description of one such layer; `extra` goes into the layer,
/// `speculative` into the model.
std::string gdnJson(const std::string &extra = "",
                    const std::string &speculative = "") {
  char json[768];
  std::snprintf(json, sizeof(json),
                R"({"model": "bench", "dtype": "bf16", "layers": [{"name": )"
                R"("gdn", "type": "linear_attention", "rule": "gated_delta", )"
                R"("num_k_heads": %d, "num_v_heads": %d, "k_dim": %d, )"
                R"("v_dim": %d, "chunk_size": 64, "qk_l2norm": true%s}]%s})",
                kGdnKeyHeads, kGdnValueHeads, kGdnDim, kGdnDim, extra.c_str(),
                speculative.c_str());
  return json;
}

/// Random q, k, v, g, beta and S_init of `batch` sequences of `length`
/// steps with `keyHeads` q/k heads and `valueHeads` v heads of kGdnDim: q,
/// k, v in [-1, 1]; log-decays in [-0.1, 0), per key feature when
/// `featureDecay` (kda); beta in (0, 1].
std::vector<attn::Tensor> recurrenceInputs(std::mt19937 &rng, int64_t batch,
                                           int64_t length, int64_t keyHeads,
                                           int64_t valueHeads,
                                           bool featureDecay) {
  const int64_t dim = kGdnDim;
  std::vector<int64_t> decayShape{batch, valueHeads, length};
  if (featureDecay)
    decayShape.push_back(dim);
  std::vector<attn::Tensor> inputs{
      attn::Tensor(ATTN_BF16, {batch, keyHeads, length, dim}),
      attn::Tensor(ATTN_BF16, {batch, keyHeads, length, dim}),
      attn::Tensor(ATTN_BF16, {batch, valueHeads, length, dim}),
      attn::Tensor(ATTN_BF16, decayShape),
      attn::Tensor(ATTN_BF16, {batch, valueHeads, length}),
      attn::Tensor(ATTN_F32, {batch, valueHeads, dim, dim})};
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int i = 0; i < 3; ++i)
    for (int64_t j = 0; j < inputs[i].numElements(); ++j)
      inputs[i].bits16()[j] = attn::floatToBf16(uniform(rng));
  for (int64_t j = 0; j < inputs[3].numElements(); ++j)
    inputs[3].bits16()[j] =
        attn::floatToBf16(-0.05f * (uniform(rng) + 1.0f) - 1e-3f);
  for (int64_t j = 0; j < inputs[4].numElements(); ++j)
    inputs[4].bits16()[j] = attn::floatToBf16(0.5f * (uniform(rng) + 1.0f));
  for (int64_t j = 0; j < inputs[5].numElements(); ++j)
    inputs[5].f32()[j] = 0.01f * uniform(rng);
  return inputs;
}

/// Gated DeltaNet's inputs at Qwen3-Next's shape.
std::vector<attn::Tensor> gdnInputs(std::mt19937 &rng, int64_t batch,
                                    int64_t length) {
  return recurrenceInputs(rng, batch, length, kGdnKeyHeads, kGdnValueHeads,
                          /*featureDecay=*/false);
}

/// The Gated DeltaNet table: the chunked kernel over whole sequences.
bool recurrenceTable(const Options &options,
                     const std::vector<Sequences> &sizes) {
  std::unique_ptr<attn::Model> model = load(options, gdnJson());
  if (!model)
    return false;
  std::printf("\n| Gated DeltaNet (Hk = 16, Hv = 32, D = 128, C = 64) | B | L "
              "| ms | M tokens/s | GB/s (q, k, v, g, beta, o, S) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::mt19937 rng(4);
  const double dim = kGdnDim;
  for (auto [batch, length] : sizes) {
    double ms = deviceMs(*model, gdnInputs(rng, batch, length), options.repeat);
    if (ms < 0)
      return false;
    // q, k (16 heads) and v, o (32 heads) in bf16, g and beta, S in and out.
    double bytes =
        batch * (2.0 * length * dim * (2 * kGdnKeyHeads + 2 * kGdnValueHeads) +
                 2.0 * 2 * kGdnValueHeads * length +
                 2.0 * 4 * kGdnValueHeads * dim * dim);
    std::printf("| gated delta, bf16 | %lld | %lld | %.4f | %.2f | %.1f |\n",
                static_cast<long long>(batch), static_cast<long long>(length),
                ms, batch * length / ms / 1e3, bytes / ms / 1e6);
  }
  return true;
}

/// Kimi Delta Attention at Kimi Linear's shape: 32 heads for q, k and v,
/// dims 128, a log-decay per key feature, 64-step chunks, qk_l2norm, bf16.
constexpr int kKdaHeads = 32;

/// The KDA table: prefill and decode, beside FLA's chunk_kda and
/// fused_recurrent_kda at the same sizes (bench/fla-baseline.py). The
/// chunked CUDA kernel is the block kernel without tensor cores (the
/// products on warp_mma take scalar decays only).
bool kdaTable(const Options &options, const std::vector<Sequences> &sizes) {
  char json[512];
  std::snprintf(json, sizeof(json),
                R"({"model": "bench", "dtype": "bf16", "layers": [{"name": )"
                R"("kda", "type": "linear_attention", "rule": "kda", )"
                R"("num_k_heads": %d, "k_dim": %d, "chunk_size": 64, )"
                R"("qk_l2norm": true}]})",
                kKdaHeads, kGdnDim);
  std::unique_ptr<attn::Model> model = load(options, json);
  if (!model)
    return false;
  std::printf("\n| KDA (H = 32, D = 128, C = 64) | B | L | ms | M tokens/s "
              "|\n|---|---|---|---|---|\n");
  std::mt19937 rng(5);
  for (auto [batch, length] : sizes) {
    std::vector<attn::Tensor> inputs = recurrenceInputs(
        rng, batch, length, kKdaHeads, kKdaHeads, /*featureDecay=*/true);
    double ms = deviceMs(*model, inputs, options.repeat);
    if (ms < 0)
      return false;
    std::printf("| kda, bf16 | %lld | %lld | %.4f | %.2f |\n",
                static_cast<long long>(batch), static_cast<long long>(length),
                ms, batch * length / ms / 1e3);
  }
  return true;
}

/// The tree recurrence table (SPEC §10): a random draft tree of `nodes`
/// through a Gated DeltaNet layer with the rmsnorm-silu gate, B = 1, beside
/// the chunked prefill of a chain of as many tokens (the target: at most 2x
/// its time), as many decode steps (the median L = 1 call times `nodes`:
/// what verifying node by node costs at least), and the commit of the
/// tree's deepest path.
bool treeRecurrenceTable(const Options &options, int64_t nodes) {
  std::unique_ptr<attn::Model> model =
      load(options, gdnJson(R"(, "output_gate": "rmsnorm_silu", "tree": true)",
                            R"(, "speculative": {"max_tree_nodes": )" +
                                std::to_string(nodes) + "}"));
  if (!model)
    return false;
  int32_t treeEntry = entryOf(*model, "gdn.tree"),
          chainEntry = entryOf(*model, "gdn"),
          commitEntry = entryOf(*model, "gdn.commit");
  if (treeEntry < 0 || chainEntry < 0 || commitEntry < 0)
    return false;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto randomBf16 = [&](std::vector<int64_t> shape) {
    attn::Tensor t(ATTN_BF16, shape);
    for (int64_t j = 0; j < t.numElements(); ++j)
      t.bits16()[j] = attn::floatToBf16(uniform(rng));
    return t;
  };
  // The entries' inputs: q, k, v, g, beta, [parents | path, length,]
  // S_init, then z and w but for the commit.
  std::vector<attn::Tensor> chain = gdnInputs(rng, 1, nodes);
  std::vector<attn::Tensor> step = gdnInputs(rng, 1, 1);
  attn::Tensor weight = randomBf16({kGdnDim});
  chain.push_back(randomBf16({1, kGdnValueHeads, nodes, kGdnDim}));
  chain.push_back(weight);
  step.push_back(randomBf16({1, kGdnValueHeads, 1, kGdnDim}));
  step.push_back(weight);
  RandomTree drafted = randomTree(rng, nodes);
  attn::Tensor &parents = drafted.parents;
  const std::vector<int64_t> &depth = drafted.depth;
  const int64_t deepest =
      std::max_element(depth.begin(), depth.end()) - depth.begin();
  std::vector<attn::Tensor> tree(chain.begin(), chain.begin() + 5);
  tree.push_back(parents);
  tree.insert(tree.end(), chain.begin() + 5, chain.end());
  attn::Tensor path(ATTN_I32, {1, nodes}), length(ATTN_I32, {1});
  std::fill(path.i32(), path.i32() + nodes, 0);
  length.i32()[0] = static_cast<int32_t>(depth[deepest] + 1);
  for (int64_t node = deepest; node >= 0; node = parents.i32()[node])
    path.i32()[depth[node]] = static_cast<int32_t>(node);
  std::vector<attn::Tensor> commit(chain.begin(), chain.begin() + 5);
  commit.push_back(path);
  commit.push_back(length);
  commit.push_back(chain[5]);

  double treeMs = deviceMs(*model, tree, options.repeat, treeEntry);
  double chainMs = deviceMs(*model, chain, options.repeat, chainEntry);
  double stepMs = deviceMs(*model, step, options.repeat, chainEntry);
  double commitMs = deviceMs(*model, commit, options.repeat, commitEntry);
  if (treeMs < 0 || chainMs < 0 || stepMs < 0 || commitMs < 0)
    return false;
  std::printf("\n| tree recurrence (gated delta, Hk = 16, Hv = 32, D = 128, "
              "rmsnorm-silu gate, B = 1) | nodes | ms | x chain prefill |\n");
  std::printf("|---|---|---|---|\n");
  auto row = [&](const std::string &path, double ms) {
    std::printf("| %s | %lld | %.4f | %.2f |\n", path.c_str(),
                static_cast<long long>(nodes), ms, ms / chainMs);
  };
  row(".tree, a random tree (depth " + std::to_string(depth[deepest] + 1) + ")",
      treeMs);
  row("prefill of a chain (chunked)", chainMs);
  row("decode steps (" + std::to_string(nodes) + " x one L = 1 call)",
      nodes * stepMs);
  row(".commit of the deepest path", commitMs);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (!options.parse(argc, argv))
    return 2;
  if (options.checkOnCpu)
    std::printf("CPU check: the CUDA kernels compiled for this CPU, at small "
                "sizes; the times are not GPU times.\n\n");
  const bool small = options.checkOnCpu;
  if (options.warpgroups) {
    // The prefill rows of the warpgroup products alone, in a process of
    // their own (scripts/gpu-bundle.sh's wgmma step), so that a fault of
    // theirs on the device costs none of the other tables.
    prefillTable(options, {1, 2});
    return 0;
  }
  if (!prefillTable(options, {0, -1}))
    return 1;

  const int heads = 32, dim = 128;
  const int64_t batch = small ? 1 : 4;
  const int64_t length = small ? 64 : options.quick ? 1024 : 4096;
  const int kvHeads = 8;
  std::printf("\n| decode | H | Hkv | Lk | ms | GB/s of K and V |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::unique_ptr<attn::Model> model =
      load(options, layerJson(heads, kvHeads, dim, "causal"));
  if (!model)
    return 1;
  std::vector<int64_t> decodeKeys =
      small ? std::vector<int64_t>{600}
            : std::vector<int64_t>{4096, 8192, 16384, 32768};
  for (int64_t keys : decodeKeys) {
    double ms = deviceMs(*model, randomInputs(1, heads, kvHeads, 1, keys, dim),
                         options.repeat);
    if (ms < 0)
      return 1;
    double bytes = 2.0 * kvHeads * keys * dim * 2; // K and V, bf16
    std::printf("| bf16 | %d | %d | %lld | %.4f | %.1f |\n", heads, kvHeads,
                static_cast<long long>(keys), ms, bytes / ms / 1e6);
  }

  if (!pagedDecodeTable(options, *model, decodeKeys))
    return 1;
  if (!mlaDecodeTable(options,
                      small ? std::vector<int64_t>{300}
                            : std::vector<int64_t>{4096, 16384},
                      small ? 1 : 8))
    return 1;

  // 32K keys even when quick: issue 28's sparse target is there.
  std::vector<int64_t> longKeys = small ? std::vector<int64_t>{1100}
                                        : std::vector<int64_t>{8192, 32768};
  if (!sparseTable(options, *model, longKeys) || !treeTable(options, longKeys))
    return 1;
  if (!variantsTable(options, batch, length))
    return 1;
  // FLA's chunk_gated_delta_rule is measured at the same sizes by
  // bench/fla-baseline.py. B = 8 even when quick: the chain's blocks are
  // narrow at B = 1 and wide there.
  std::vector<Sequences> sequences =
      small ? std::vector<Sequences>{{1, 200}, {2, 70}, {3, 1}}
      : options.quick
          ? std::vector<Sequences>{{1, 4096}, {8, 4096}, {32, 1}}
          : std::vector<Sequences>{{1, 4096}, {1, 16384}, {1, 65536},
                                   {8, 4096}, {1, 1},     {32, 1}};
  std::vector<Sequences> kdaSequences =
      small ? std::vector<Sequences>{{1, 100}, {2, 1}}
            : std::vector<Sequences>{{1, 4096}, {8, 4096}, {32, 1}};
  return recurrenceTable(options, sequences) &&
                 treeRecurrenceTable(options, small ? 20 : 64) &&
                 kdaTable(options, kdaSequences)
             ? 0
             : 1;
}
