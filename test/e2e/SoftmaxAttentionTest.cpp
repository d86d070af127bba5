//===- SoftmaxAttentionTest.cpp - attention models, end to end -----------===//
//
// Each case writes a model description (SPEC §3), compiles it with the
// library attnc uses (frontend -> pipelines -> CPU code -> .attnb bytes),
// loads the bytes with the runtime, runs the entry on random inputs and
// compares with the float64 step-by-step reference. Sizes are chosen to be
// awkward: lengths that are no multiple of any tile, head dims that are no
// multiple of the vector width, value_dim != head_dim, GQA 1/4/8, empty
// rows, and both the flash and the split-KV (decode) paths.
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

using namespace attn;
using namespace attn::e2e;

namespace {

struct AttentionCase {
  std::string label;
  int64_t heads = 8, kvHeads = 2, headDim = 64, valueDim = 64;
  std::string mask = "\"causal\""; // JSON value
  std::string gate = "none";       // none, elementwise, headwise
  double softcap = 0.0;
  std::optional<double> scale;
  int64_t batch = 1, queries = 17, keys = 17;
  /// Inputs are uniform in [-range, range].
  double range = 1.0;
  /// Of the f32 arithmetic; an f16 / bf16 output may differ by one more
  /// unit in the last place of its dtype (its rounding).
  double tolerance = 1e-5;
  /// The model's storage dtype: f32, f16 or bf16.
  std::string dtype = "f32";
  /// Threads of the CPU runtime, which host programs see as their workers
  /// (on a GPU they see 4 blocks per multiprocessor).
  int threads = 2;
  /// Attention sinks (randomSinks), the entry's input after the gate.
  bool sinks = false;
  /// One latent cache `kv` for keys and values, the values its first
  /// valueDim features (DeepSeek's MLA, absorbed).
  bool latentKv = false;
};

void PrintTo(const AttentionCase &c, std::ostream *os) { *os << c.label; }

std::string modelJson(const AttentionCase &c) {
  std::ostringstream json;
  json << R"({"model": "e2e", "dtype": ")" << c.dtype
       << R"(", "layers": [{"name": "layer",)"
       << R"( "type": "attention", "num_heads": )" << c.heads
       << R"(, "num_kv_heads": )" << c.kvHeads << R"(, "head_dim": )"
       << c.headDim << R"(, "value_dim": )" << c.valueDim << R"(, "mask": )"
       << c.mask << R"(, "gate": ")" << c.gate << R"(", "softcap": )"
       << c.softcap;
  if (c.scale)
    json << R"(, "scale": )" << *c.scale;
  if (c.sinks)
    json << R"(, "sinks": true)";
  if (c.latentKv)
    json << R"(, "latent_kv": true)";
  json << "}]}";
  return json.str();
}

/// Runs case `c` on `backend` compiled with `options` and compares with
/// the float64 reference.
void checkAttention(const AttentionCase &c, Backend backend,
                    const mlir::attn::CompileOptions &options = {}) {
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelJson(c), c.threads, skip, options);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  int32_t entry = -1;
  ASSERT_TRUE(model->findEntry("layer", entry).ok());

  const attn_dtype dtype = storageDtype(c.dtype);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  ref::Tensor q = randomF32({c.batch, c.heads, c.queries, c.headDim}, rng,
                            -c.range, c.range, dtype);
  ref::Tensor k = randomF32({c.batch, c.kvHeads, c.keys, c.headDim}, rng,
                            -c.range, c.range, dtype);
  ref::Tensor v = c.latentKv
                      ? leadingFeatures(k, c.valueDim)
                      : randomF32({c.batch, c.kvHeads, c.keys, c.valueDim}, rng,
                                  -1.0, 1.0, dtype);
  std::optional<ref::Tensor> gate;
  if (c.gate != "none")
    gate = randomF32(
        {c.batch, c.heads, c.queries, c.gate == "elementwise" ? c.valueDim : 1},
        rng, -3.0, 3.0, dtype);

  std::vector<Tensor> inputs{toRuntime(q, dtype), toRuntime(k, dtype)};
  if (!c.latentKv)
    inputs.push_back(toRuntime(v, dtype));
  if (gate)
    inputs.push_back(toRuntime(*gate, dtype));
  ref::Score score;
  if (c.sinks) {
    score.sinks = randomSinks(c.heads, rng);
    inputs.push_back(sinksToRuntime(score.sinks));
  }
  std::vector<Tensor> outputs;
  Status status = model->run(entry, inputs, outputs);
  ASSERT_TRUE(status.ok()) << status.message;
  ASSERT_EQ(outputs.size(), 1u);

  score.scale = c.scale;
  score.softcap = c.softcap;
  ref::AttentionResult expected =
      ref::sdpa(q, k, v, referenceMask(c.mask), score, gate ? &*gate : nullptr);
  ASSERT_EQ(outputs[0].shape, expected.output.shape());
  ASSERT_EQ(outputs[0].dtype, dtype);
  ref::Tensor actual = fromRuntime(outputs[0]);
  for (int64_t i = 0; i < actual.size(); ++i)
    ASSERT_TRUE(std::isfinite(actual.values()[i]))
        << "element " << i << " is " << actual.values()[i];
  double error = ref::maxRelativeError(actual, expected.output);
  char text[32];
  std::snprintf(text, sizeof(text), "%.3e", error);
  testing::Test::RecordProperty("max_relative_error", text);
  EXPECT_LE(error,
            c.tolerance + (dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype)));
}

class SoftmaxAttention
    : public testing::TestWithParam<std::tuple<AttentionCase, Backend>> {};

TEST_P(SoftmaxAttention, MatchesReference) {
  const auto &[c, backend] = GetParam();
  checkAttention(c, backend);
}

/// The CUDA prefill kernels with warpgroup products (wgmma on sm_90a,
/// CompileOptions::cudaFlashWarpgroups): core-matrix tiled q, k and v, P
/// in registers as wgmma's A, one warpgroup (64 rows) or two (128) per
/// block; with `producer` (CompileOptions::cudaFlashProducer), warp
/// specialised: a producer warpgroup more stages k and v for them through
/// mbarriers.
class SoftmaxAttentionWarpgroups
    : public testing::TestWithParam<
          std::tuple<AttentionCase, Backend, int64_t, bool>> {};

TEST_P(SoftmaxAttentionWarpgroups, MatchesReference) {
  const auto &[c, backend, warpgroups, producer] = GetParam();
  mlir::attn::CompileOptions options;
  options.cudaFlashWarpgroups = warpgroups;
  options.cudaFlashProducer = producer;
  checkAttention(c, backend, options);
}

std::vector<AttentionCase> cases() {
  std::vector<AttentionCase> all;
  auto add = [&](AttentionCase c) { all.push_back(std::move(c)); };
  // Prefill (flash path), every mask, gate and GQA ratio.
  add({.label = "causal_gqa4_elementwise",
       .heads = 8,
       .kvHeads = 2,
       .gate = "elementwise",
       .queries = 77,
       .keys = 77});
  add({.label = "none_gqa1_headwise_dv",
       .heads = 4,
       .kvHeads = 4,
       .headDim = 80,
       .valueDim = 48,
       .mask = "\"none\"",
       .gate = "headwise",
       .batch = 2,
       .queries = 33,
       .keys = 100});
  add({.label = "window_gqa8_softcap",
       .heads = 8,
       .kvHeads = 1,
       .headDim = 128,
       .valueDim = 128,
       .mask = R"({"sliding_window": 16})",
       .softcap = 30.0,
       .queries = 130,
       .keys = 130});
  add({.label = "causal_lq_lt_lk",
       .heads = 4,
       .kvHeads = 1,
       .headDim = 64,
       .valueDim = 32,
       .gate = "elementwise",
       .batch = 3,
       .queries = 45,
       .keys = 211});
  add({.label = "odd_dims",
       .heads = 6,
       .kvHeads = 3,
       .headDim = 36,
       .valueDim = 20,
       .mask = R"({"sliding_window": 7})",
       .gate = "headwise",
       .queries = 61,
       .keys = 70});
  add({.label = "just_above_decode",
       .heads = 2,
       .kvHeads = 2,
       .queries = 9,
       .keys = 9});
  add({.label = "custom_scale",
       .heads = 4,
       .kvHeads = 2,
       .headDim = 128,
       .valueDim = 64,
       .mask = "\"none\"",
       .scale = 0.3,
       .queries = 40,
       .keys = 41});
  // Decode (split-KV path): one row over many keys, and a few rows.
  add({.label = "decode_causal_gqa4",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 128,
       .valueDim = 128,
       .gate = "elementwise",
       .batch = 2,
       .queries = 1,
       .keys = 1000});
  add({.label = "decode_window_rows3",
       .heads = 8,
       .kvHeads = 1,
       .headDim = 64,
       .valueDim = 80,
       .mask = R"({"sliding_window": 50})",
       .queries = 3,
       .keys = 300});
  add({.label = "decode_none_gqa1_softcap",
       .heads = 2,
       .kvHeads = 2,
       .headDim = 80,
       .valueDim = 80,
       .mask = "\"none\"",
       .gate = "headwise",
       .softcap = 5.0,
       .queries = 1,
       .keys = 517});
  // Group sizes that the split-KV kernel's 4-head register tiles do not
  // divide (6 = 4 + 2, 3), head and value dims that are not whole vectors
  // (the last value vector is partial), and key ranges that end mid-step.
  add({.label = "decode_gqa6_odd_dims",
       .heads = 6,
       .kvHeads = 1,
       .headDim = 36,
       .valueDim = 20,
       .gate = "headwise",
       .queries = 1,
       .keys = 1037});
  add({.label = "decode_gqa3_window_softcap",
       .heads = 6,
       .kvHeads = 2,
       .headDim = 128,
       .valueDim = 100,
       .mask = R"({"sliding_window": 400})",
       .softcap = 20.0,
       .queries = 2,
       .keys = 531});
  // A kv group of 16 heads times 5 rows is 80 of the CUDA decode kernel's
  // rows: two tiles of 64, the second starting inside head 12's rows.
  add({.label = "decode_gqa16_rows5_window",
       .heads = 16,
       .kvHeads = 1,
       .headDim = 40,
       .valueDim = 24,
       .mask = R"({"sliding_window": 290})",
       .gate = "elementwise",
       .queries = 5,
       .keys = 611});
  // Empty rows give 0, never NaN: window rows before the first key, and no
  // keys at all, on both paths.
  add({.label = "empty_rows_flash",
       .heads = 2,
       .kvHeads = 1,
       .mask = R"({"sliding_window": 4})",
       .queries = 20,
       .keys = 10});
  add({.label = "empty_rows_decode",
       .heads = 2,
       .kvHeads = 1,
       .mask = R"({"sliding_window": 2})",
       .gate = "elementwise",
       .queries = 5,
       .keys = 2});
  add({.label = "no_keys_flash",
       .heads = 2,
       .kvHeads = 2,
       .mask = "\"none\"",
       .queries = 40,
       .keys = 0});
  add({.label = "no_keys_decode",
       .heads = 2,
       .kvHeads = 2,
       .mask = "\"none\"",
       .queries = 2,
       .keys = 0});
  // Logits up to ~1e4: the online softmax must not overflow. Scores that
  // large carry f32 rounding of ~|s| * 2^-24 * sqrt(D) in the exponent, so
  // these compare at the 1e-4 of SPEC §2 rather than 1e-5.
  add({.label = "huge_logits_flash",
       .heads = 2,
       .kvHeads = 1,
       .mask = "\"causal\"",
       .scale = 1.0,
       .queries = 50,
       .keys = 50,
       .range = 12.5,
       .tolerance = 1e-4});
  add({.label = "huge_logits_decode",
       .heads = 2,
       .kvHeads = 1,
       .mask = "\"none\"",
       .scale = 1.0,
       .queries = 1,
       .keys = 700,
       .range = 12.5,
       .tolerance = 1e-4});
  // f16 / bf16 storage, f32 arithmetic: prefill and decode, gates, a
  // window, GQA, value_dim != head_dim, and logits up to 1e4 in f16 (whose
  // largest finite value is 65504).
  add({.label = "bf16_causal_gqa4_elementwise",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 80,
       .valueDim = 48,
       .gate = "elementwise",
       .queries = 45,
       .keys = 45,
       .dtype = "bf16"});
  add({.label = "bf16_decode_window_headwise",
       .heads = 4,
       .kvHeads = 1,
       .mask = R"({"sliding_window": 300})",
       .gate = "headwise",
       .queries = 1,
       .keys = 777,
       .dtype = "bf16"});
  add({.label = "f16_none_gqa1",
       .heads = 3,
       .kvHeads = 3,
       .headDim = 128,
       .valueDim = 128,
       .mask = "\"none\"",
       .batch = 2,
       .queries = 33,
       .keys = 70,
       .dtype = "f16"});
  // The CUDA flash kernel's tensor-core inputs in the storage dtype: several
  // query tiles (128 rows: 4 warps of two 16-row tiles) and key tiles (32
  // keys) so the online softmax rescales across tiles with rounded
  // probabilities, head dims padded to 16 (72 -> 80) and 8 (40), a window
  // that starts mid-tile, Lq < Lk, a causal diagonal through both row tiles
  // of every warp of three query tiles.
  add({.label = "bf16_window_tiles_odd_dims",
       .heads = 4,
       .kvHeads = 2,
       .headDim = 72,
       .valueDim = 40,
       .mask = R"({"sliding_window": 90})",
       .gate = "headwise",
       .softcap = 30.0,
       .queries = 150,
       .keys = 150,
       .dtype = "bf16"});
  add({.label = "f16_causal_lq_lt_lk_tiles",
       .heads = 2,
       .kvHeads = 1,
       .headDim = 96,
       .valueDim = 96,
       .gate = "elementwise",
       .batch = 2,
       .queries = 70,
       .keys = 201,
       .dtype = "f16"});
  add({.label = "bf16_causal_three_query_tiles",
       .heads = 4,
       .kvHeads = 2,
       .headDim = 128,
       .valueDim = 128,
       .gate = "elementwise",
       .queries = 300,
       .keys = 300,
       .dtype = "bf16"});
  // Decode on CUDA splits the keys further while the blocks would not keep
  // the workers busy: 1 kv head x 300 keys over 16 workers takes 5 splits
  // of one 64-key tile (the last partial); 2 kv heads x 1000 keys, 8 splits
  // of 128 (the last partial). On the GPU (528 workers on an H100) both
  // take a split per key tile.
  add({.label = "decode_splits_fill_workers_mqa",
       .heads = 4,
       .kvHeads = 1,
       .gate = "headwise",
       .queries = 1,
       .keys = 300,
       .threads = 16});
  add({.label = "decode_splits_fill_workers_gqa4",
       .heads = 8,
       .kvHeads = 2,
       .queries = 2,
       .keys = 1000,
       .dtype = "bf16",
       .threads = 16});
  // 13 splits of 256 keys (the last partial) over 8 workers: the CUDA
  // merge takes its splits 8 at a time, here a whole batch and a partial
  // one; the decode kernel's two k/v buffers each take several tiles.
  add({.label = "decode_thirteen_splits",
       .heads = 4,
       .kvHeads = 1,
       .gate = "elementwise",
       .queries = 1,
       .keys = 3300,
       .dtype = "bf16",
       .threads = 8});
  add({.label = "f16_huge_logits_decode",
       .heads = 2,
       .kvHeads = 1,
       .mask = "\"none\"",
       .scale = 1.0,
       .queries = 3,
       .keys = 600,
       .range = 12.5,
       .tolerance = 1e-4,
       .dtype = "f16"});
  // Attention sinks (gpt-oss): a logit per head in the denominator, on the
  // flash, split-KV and merge paths, with empty rows (o = 0), no keys, a
  // gate, logits far above and below the sinks, and storage dtypes.
  add({.label = "sinks_causal_gqa4",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 36,
       .valueDim = 20,
       .queries = 70,
       .keys = 70,
       .sinks = true});
  add({.label = "sinks_window_elementwise",
       .heads = 3,
       .kvHeads = 1,
       .headDim = 24,
       .valueDim = 24,
       .mask = R"({"sliding_window": 9})",
       .gate = "elementwise",
       .queries = 33,
       .keys = 41,
       .sinks = true});
  add({.label = "sinks_decode_gqa4",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 64,
       .valueDim = 48,
       .gate = "headwise",
       .queries = 1,
       .keys = 611,
       .sinks = true});
  add({.label = "sinks_decode_rows3_window",
       .heads = 4,
       .kvHeads = 4,
       .headDim = 16,
       .valueDim = 16,
       .mask = R"({"sliding_window": 50})",
       .batch = 2,
       .queries = 3,
       .keys = 300,
       .sinks = true});
  add({.label = "sinks_empty_rows_flash",
       .heads = 2,
       .kvHeads = 1,
       .mask = R"({"sliding_window": 4})",
       .queries = 20,
       .keys = 10,
       .sinks = true});
  add({.label = "sinks_empty_rows_decode",
       .heads = 3,
       .kvHeads = 1,
       .mask = R"({"sliding_window": 2})",
       .gate = "elementwise",
       .queries = 5,
       .keys = 2,
       .sinks = true});
  add({.label = "sinks_no_keys_decode",
       .heads = 2,
       .kvHeads = 2,
       .mask = "\"none\"",
       .queries = 2,
       .keys = 0,
       .sinks = true});
  add({.label = "sinks_huge_logits_decode",
       .heads = 4,
       .kvHeads = 1,
       .mask = "\"causal\"",
       .scale = 1.0,
       .queries = 1,
       .keys = 500,
       .range = 12.5,
       .tolerance = 1e-4,
       .sinks = true});
  add({.label = "sinks_bf16_causal_tiles",
       .heads = 4,
       .kvHeads = 2,
       .headDim = 64,
       .valueDim = 64,
       .queries = 130,
       .keys = 150,
       .dtype = "bf16",
       .sinks = true});
  // Chunked attention (Llama 4): causal within chunks of C positions, on
  // the flash path (query tiles that straddle chunks, chunks shorter and
  // longer than a tile), the split-KV path (rows of two chunks in one
  // call), with Lq < Lk, a chunk longer than the keys (causal), in bf16.
  add({.label = "chunked_flash_gqa4",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 36,
       .valueDim = 20,
       .mask = R"({"chunked": 16})",
       .queries = 130,
       .keys = 130});
  add({.label = "chunked_lq_lt_lk_elementwise",
       .heads = 4,
       .kvHeads = 4,
       .headDim = 24,
       .valueDim = 24,
       .mask = R"({"chunked": 24})",
       .gate = "elementwise",
       .batch = 2,
       .queries = 37,
       .keys = 100});
  add({.label = "chunked_decode_rows3_straddle",
       .heads = 6,
       .kvHeads = 2,
       .headDim = 64,
       .valueDim = 48,
       .mask = R"({"chunked": 7})",
       .queries = 3,
       .keys = 300});
  add({.label = "chunked_decode_long_chunk",
       .heads = 8,
       .kvHeads = 1,
       .headDim = 128,
       .valueDim = 128,
       .mask = R"({"chunked": 100})",
       .gate = "headwise",
       .queries = 1,
       .keys = 611});
  add({.label = "chunked_longer_than_keys",
       .heads = 2,
       .kvHeads = 1,
       .mask = R"({"chunked": 1000})",
       .queries = 40,
       .keys = 90});
  add({.label = "chunked_one",
       .heads = 2,
       .kvHeads = 2,
       .mask = R"({"chunked": 1})",
       .queries = 9,
       .keys = 12});
  add({.label = "chunked_bf16_tiles",
       .heads = 4,
       .kvHeads = 2,
       .headDim = 64,
       .valueDim = 64,
       .mask = R"({"chunked": 50})",
       .queries = 130,
       .keys = 150,
       .dtype = "bf16",
       .sinks = true});
  // A latent cache (DeepSeek's MLA, absorbed): one kv tensor, the values
  // its first value_dim features. DeepSeek-V3's decode shape (16 heads of
  // one tensor-parallel rank, 512 + 64 features) with 1 and 2 rows (MTP),
  // prefill on the flash path, a gate, GQA, values as wide as the keys,
  // and bf16.
  add({.label = "latent_mla_decode",
       .heads = 16,
       .kvHeads = 1,
       .headDim = 576,
       .valueDim = 512,
       .scale = 0.1352,
       .batch = 2,
       .queries = 1,
       .keys = 301,
       .latentKv = true});
  add({.label = "latent_mla_mtp_rows2",
       .heads = 16,
       .kvHeads = 1,
       .headDim = 576,
       .valueDim = 512,
       .scale = 0.1352,
       .queries = 2,
       .keys = 150,
       .latentKv = true});
  add({.label = "latent_mla_prefill_bf16",
       .heads = 4,
       .kvHeads = 1,
       .headDim = 576,
       .valueDim = 512,
       .scale = 0.1352,
       .queries = 37,
       .keys = 45,
       .dtype = "bf16",
       .latentKv = true});
  add({.label = "latent_flash_odd_dims",
       .heads = 4,
       .kvHeads = 1,
       .headDim = 40,
       .valueDim = 24,
       .gate = "elementwise",
       .queries = 70,
       .keys = 90,
       .latentKv = true});
  add({.label = "latent_gqa4_window_decode",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 72,
       .valueDim = 64,
       .mask = R"({"sliding_window": 40})",
       .queries = 3,
       .keys = 200,
       .sinks = true,
       .latentKv = true});
  add({.label = "latent_values_are_keys",
       .heads = 2,
       .kvHeads = 2,
       .headDim = 32,
       .valueDim = 32,
       .queries = 17,
       .keys = 17,
       .latentKv = true});
  add({.label = "latent_bf16_tiles",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 96,
       .valueDim = 64,
       .queries = 130,
       .keys = 150,
       .dtype = "bf16",
       .latentKv = true});
  // Every mask x gate x GQA ratio, with lengths no tile divides and both
  // paths (flash for Lq = 37, split-KV for Lq = 2).
  const std::pair<const char *, const char *> masks[] = {
      {"none", "\"none\""},
      {"causal", "\"causal\""},
      {"window", R"({"sliding_window": 11})"},
      {"chunked", R"({"chunked": 10})"}};
  for (auto [maskName, maskJson] : masks)
    for (const char *gate : {"none", "elementwise", "headwise"})
      for (int64_t ratio : {1, 4, 8})
        for (int64_t queries : {37, 2}) {
          AttentionCase c;
          c.label = std::string(maskName) + "_" + gate + "_gqa" +
                    std::to_string(ratio) + "_lq" + std::to_string(queries);
          c.heads = 8;
          c.kvHeads = 8 / ratio;
          c.headDim = 64;
          c.valueDim = 72;
          c.mask = maskJson;
          c.gate = gate;
          c.batch = 2;
          c.queries = queries;
          c.keys = 53;
          add(c);
        }
  return all;
}

/// Cases drawn at random (from a fixed seed) beside the chosen ones:
/// combinations of sizes, masks, gates, dtypes and thread counts nobody
/// picked, among them the edges (no queries, no keys, one of each, a
/// window of 1, lengths one off a tile).
std::vector<AttentionCase> randomCases(int count) {
  CaseDraws draw;
  std::vector<AttentionCase> all;
  for (int i = 0; i < count; ++i) {
    AttentionCase c;
    c.label = "random" + std::to_string(i);
    c.kvHeads = draw.pick({1, 2, 3});
    c.heads = c.kvHeads * draw.pick({1, 2, 4, 5, 8});
    c.headDim = draw.pick({8, 16, 24, 36, 64, 80, 96, 128});
    c.valueDim =
        draw.chance(70) ? c.headDim : draw.pick({8, 20, 32, 48, 64, 128});
    c.batch = draw.pick({1, 1, 2, 3});
    c.queries =
        draw.pick({0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 129});
    c.keys = draw.pick(
        {0, 1, 2, 5, 16, 31, 32, 33, 64, 65, 127, 128, 129, 255, 257, 300});
    switch (draw.rng() % 4) {
    case 0:
      c.mask = "\"none\"";
      break;
    case 1:
      c.mask = "\"causal\"";
      break;
    case 2:
      c.mask = "{\"chunked\": " +
               std::to_string(draw.pick({1, 3, 16, 33, 64, 100, 500})) + "}";
      break;
    default:
      c.mask = "{\"sliding_window\": " +
               std::to_string(draw.pick({1, 2, 7, 16, 40, 100})) + "}";
    }
    if (c.mask != "\"none\"")
      c.keys = std::max(c.keys, c.queries); // query i sits at Lk - Lq + i
    c.gate = draw.chance(50)   ? "none"
             : draw.chance(50) ? "elementwise"
                               : "headwise";
    if (draw.chance(25))
      c.softcap = draw.pick({5, 20, 50});
    if (draw.chance(20))
      c.scale = 0.05 * static_cast<double>(draw.pick({1, 2, 5, 9}));
    c.range = static_cast<double>(draw.pick({1, 1, 3}));
    c.dtype = draw.chance(50) ? "f32" : draw.chance(50) ? "bf16" : "f16";
    c.threads = static_cast<int>(draw.pick({1, 2, 3, 4}));
    c.sinks = draw.chance(25);
    c.latentKv = c.valueDim <= c.headDim && draw.chance(15);
    all.push_back(c);
  }
  return all;
}

// Every case on every backend: the CPU kernels, the CUDA kernels' bodies
// run on the CPU (always), the CUDA kernels on a GPU (skipped without one).
INSTANTIATE_TEST_SUITE_P(EndToEnd, SoftmaxAttention,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend());

INSTANTIATE_TEST_SUITE_P(
    Random, SoftmaxAttention,
    testing::Combine(testing::ValuesIn(randomCases(randomCaseCount(32))),
                     allBackends()),
    LabelAndBackend());

/// The f16 and bf16 cases (the warpgroup products' dtypes), and odd head
/// dims (36 -> 48 in the products, value dims 20 -> 24: rows of k and v
/// that are no whole 16-byte pieces, staged an element at a time) and a
/// value dim of 64 beside a head dim of 128, in bf16.
std::vector<AttentionCase> warpgroupCases() {
  std::vector<AttentionCase> all;
  for (AttentionCase c : cases()) {
    if (c.dtype != "f32") {
      all.push_back(c);
    } else if (c.label == "odd_dims" || c.label == "custom_scale" ||
               c.label == "window_gqa8_softcap" ||
               c.label == "sinks_causal_gqa4" ||
               c.label == "latent_flash_odd_dims") {
      c.label += "_bf16";
      c.dtype = "bf16";
      all.push_back(c);
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    EndToEnd, SoftmaxAttentionWarpgroups,
    testing::Combine(testing::ValuesIn(warpgroupCases()),
                     testing::Values(Backend::CudaKernelsOnCpu, Backend::Cuda),
                     testing::Values(1, 2), testing::Bool()),
    [](const testing::TestParamInfo<
        std::tuple<AttentionCase, Backend, int64_t, bool>> &info) {
      return std::get<0>(info.param).label + "_warpgroups" +
             std::to_string(std::get<2>(info.param)) +
             (std::get<3>(info.param) ? "_producer" : "") + "_" +
             backendName(std::get<1>(info.param));
    });

} // namespace
