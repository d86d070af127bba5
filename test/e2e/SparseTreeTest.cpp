//===- SparseTreeTest.cpp - sparsity budgets and draft trees, end to end --===//
//
// SPEC §1.3-1.4 through the whole pipeline: model descriptions with
// "sparsity" and "tree" compiled in-process and run with the runtime,
// against the float64 reference (block metadata, the selections, attention
// over what they keep, tree attention, greedy acceptance, KV compaction).
// Selections must match the reference exactly, index for index: they are
// also compiled from attn IR whose entries return them. Every case runs on
// every backend: the CPU kernels, the CUDA kernels' bodies on the CPU, and
// the CUDA kernels on a GPU (skipped without one).
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

using namespace attn;
using namespace attn::e2e;

namespace {

ref::IntTensor toReference(const Tensor &t) {
  ref::IntTensor out(t.shape);
  for (int64_t i = 0; i < out.size(); ++i)
    out.values()[i] = reinterpret_cast<const int32_t *>(t.storage.data())[i];
  return out;
}

void expectClose(const Tensor &actual, const ref::Tensor &expected,
                 double tolerance, const char *what) {
  ASSERT_EQ(actual.shape, expected.shape()) << what;
  ref::Tensor values = fromRuntime(actual);
  for (double x : values.values())
    ASSERT_TRUE(std::isfinite(x)) << what;
  double error = ref::maxRelativeError(values, expected);
  EXPECT_LE(error, tolerance) << what;
}

void expectSame(const Tensor &actual, const ref::IntTensor &expected,
                const char *what) {
  ASSERT_EQ(actual.shape, expected.shape()) << what;
  ref::IntTensor values = toReference(actual);
  for (int64_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(values.values()[i], expected.values()[i])
        << what << ": element " << i << " differs";
}

//===----------------------------------------------------------------------===//
// Sparse attention: <layer>.meta, then <layer> with the metadata.
//===----------------------------------------------------------------------===//

struct SparseCase {
  std::string label;
  int64_t heads = 4, kvHeads = 2, headDim = 20, valueDim = 20;
  std::string mask = "\"causal\"";
  std::string gate = "none";
  double softcap = 0.0;
  int64_t batch = 2, queries = 37, keys = 203;
  /// The "sparsity" object's members (JSON).
  std::string method = "top_k";
  int64_t blockSize = 16;
  std::optional<int64_t> topK, minTokens, maxTokens;
  double topP = 0.9;
  std::string estimator = "exact";
  int64_t sinkBlocks = 0, localBlocks = 0;
  /// Compare with dense attention (the budget keeps everything).
  bool dense = false;
  /// Attention sinks (randomSinks) after the metadata; the selection
  /// ignores them.
  bool sinks = false;
  /// The storage dtype of q, k, v, the gate and o.
  std::string dtype = "f32";
};

void PrintTo(const SparseCase &c, std::ostream *os) { *os << c.label; }

std::string sparseJson(const SparseCase &c) {
  std::ostringstream json;
  json << R"({"model": "sparse", "dtype": ")" << c.dtype
       << R"(", "layers": [{"name": "layer",)"
       << R"( "type": "attention", "num_heads": )" << c.heads
       << R"(, "num_kv_heads": )" << c.kvHeads << R"(, "head_dim": )"
       << c.headDim << R"(, "value_dim": )" << c.valueDim << R"(, "mask": )"
       << c.mask << R"(, "gate": ")" << c.gate << R"(", "softcap": )"
       << c.softcap;
  if (c.sinks)
    json << R"(, "sinks": true)";
  json << R"(, "sparsity": {"method": ")" << c.method << R"(", "block_size": )"
       << c.blockSize << R"(, "sink_blocks": )" << c.sinkBlocks
       << R"(, "local_blocks": )" << c.localBlocks;
  if (c.topK)
    json << R"(, "top_k": )" << *c.topK;
  if (c.method == "top_p")
    json << R"(, "top_p": )" << c.topP << R"(, "estimator": ")" << c.estimator
         << '"';
  if (c.minTokens)
    json << R"(, "min_tokens": )" << *c.minTokens;
  if (c.maxTokens)
    json << R"(, "max_tokens": )" << *c.maxTokens;
  json << "}}]}";
  return json.str();
}

class SparseAttention
    : public testing::TestWithParam<std::tuple<SparseCase, Backend>> {};

TEST_P(SparseAttention, MatchesReference) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, sparseJson(c), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const attn_dtype dtype = storageDtype(c.dtype);
  ref::Tensor q = randomF32({c.batch, c.heads, c.queries, c.headDim}, rng, -2.0,
                            2.0, dtype);
  ref::Tensor k =
      randomF32({c.batch, c.kvHeads, c.keys, c.headDim}, rng, -2.0, 2.0, dtype);
  ref::Tensor v = randomF32({c.batch, c.kvHeads, c.keys, c.valueDim}, rng, -1.0,
                            1.0, dtype);
  std::optional<ref::Tensor> gate;
  if (c.gate != "none")
    gate = randomF32(
        {c.batch, c.heads, c.queries, c.gate == "elementwise" ? c.valueDim : 1},
        rng, -3.0, 3.0, dtype);

  // Block metadata: min and max are exact.
  std::vector<Tensor> meta =
      runEntry(*model, "layer.meta", {toRuntime(k, dtype)});
  ASSERT_EQ(meta.size(), 1u);
  ref::Tensor expectedMeta = ref::blockMeta(k, c.blockSize);
  expectClose(meta[0], expectedMeta, 0.0, "kmeta");

  std::vector<Tensor> inputs{toRuntime(q, dtype), toRuntime(k, dtype),
                             toRuntime(v, dtype)};
  if (gate)
    inputs.push_back(toRuntime(*gate, dtype));
  inputs.push_back(meta[0]);
  ref::Score score;
  if (c.sinks) {
    score.sinks = randomSinks(c.heads, rng);
    inputs.push_back(sinksToRuntime(score.sinks));
  }
  std::vector<Tensor> out = runEntry(*model, "layer", inputs);
  ASSERT_EQ(out.size(), 1u);

  ref::Mask mask = referenceMask(c.mask);
  score.softcap = c.softcap;
  const ref::Tensor *g = gate ? &*gate : nullptr;
  ref::AttentionResult expected;
  if (c.dense) {
    expected = ref::sdpa(q, k, v, mask, score, g);
  } else {
    std::optional<ref::IntTensor> blocks;
    if (c.topK)
      blocks =
          ref::selectTopK(q, expectedMeta, c.keys, mask, score,
                          {c.blockSize, *c.topK, c.sinkBlocks, c.localBlocks});
    if (c.method == "top_k") {
      expected = ref::sparseSdpa(q, k, v, *blocks, c.blockSize, mask, score, g);
    } else {
      ref::TopP topP{c.topP, c.minTokens.value_or(0), c.maxTokens,
                     c.estimator == "int4"};
      ref::IntTensor tokens = ref::selectTopP(q, k, blocks ? &*blocks : nullptr,
                                              c.blockSize, mask, score, topP);
      expected = ref::sparseSdpa(q, k, v, tokens, 1, mask, score, g);
    }
  }
  // A storage dtype adds the rounding of o (and of P, where a kernel
  // multiplies P in that dtype).
  expectClose(out[0], expected.output,
              1e-5 + (dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype)), "o");
}

std::vector<SparseCase> sparseCases() {
  std::vector<SparseCase> all;
  auto add = [&](SparseCase c) { all.push_back(std::move(c)); };
  // Storage dtypes (on AVX512-BF16 the CPU's bf16 pair products): decode
  // rows over top-k blocks, and top-p after top-k with an odd value dim.
  add({.label = "topk_decode_gate_bf16",
       .gate = "elementwise",
       .queries = 2,
       .keys = 517,
       .topK = 6,
       .sinkBlocks = 1,
       .localBlocks = 1,
       .dtype = "bf16"});
  add({.label = "topp_after_topk_bf16",
       .valueDim = 19,
       .queries = 21,
       .keys = 150,
       .method = "top_p",
       .topK = 5,
       .topP = 0.8,
       .dtype = "bf16"});
  add({.label = "topk_causal_sinks_locals",
       .topK = 5,
       .sinkBlocks = 1,
       .localBlocks = 2});
  // Chunked attention: the candidates are the blocks of each row's chunk.
  add({.label = "topk_chunked_decode",
       .heads = 4,
       .kvHeads = 2,
       .mask = R"({"chunked": 100})",
       .queries = 3,
       .keys = 517,
       .blockSize = 8,
       .topK = 4,
       .localBlocks = 1});
  add({.label = "topp_chunked_prefill",
       .mask = R"({"chunked": 20})",
       .queries = 45,
       .keys = 60,
       .method = "top_p",
       .topK = 3,
       .topP = 0.9});
  // Attention sinks join the kept keys' softmax; selection ignores them.
  add({.label = "topk_attention_sinks_decode",
       .heads = 6,
       .kvHeads = 2,
       .gate = "elementwise",
       .queries = 2,
       .keys = 400,
       .topK = 4,
       .sinkBlocks = 1,
       .localBlocks = 1,
       .sinks = true});
  add({.label = "topp_after_topk_attention_sinks",
       .method = "top_p",
       .topK = 5,
       .topP = 0.9,
       .sinks = true});
  add({.label = "topk_window_gqa4_decode",
       .heads = 8,
       .mask = R"({"sliding_window": 100})",
       .gate = "headwise",
       .queries = 3,
       .keys = 517,
       .blockSize = 8,
       .topK = 4,
       .localBlocks = 1});
  add({.label = "topk_none_lq_gt_lk_odd_block",
       .mask = "\"none\"",
       .queries = 45,
       .keys = 31,
       .blockSize = 7,
       .topK = 2});
  add({.label = "topp_only_clamped_none",
       .mask = "\"none\"",
       .gate = "elementwise",
       .queries = 29,
       .keys = 157,
       .method = "top_p",
       .minTokens = 9,
       .maxTokens = 40,
       .topP = 0.8});
  add({.label = "topp_after_topk_softcap",
       .valueDim = 12,
       .softcap = 5.0,
       .method = "top_p",
       .topK = 6,
       .topP = 0.95,
       .sinkBlocks = 1,
       .localBlocks = 1});
  // Decode with selections long enough that the CUDA kernels split them
  // over several threads (256 keys' worth of entries each).
  add({.label = "topk_decode_split_entries",
       .heads = 2,
       .kvHeads = 1,
       .headDim = 16,
       .valueDim = 24,
       .gate = "elementwise",
       .batch = 1,
       .queries = 2,
       .keys = 900,
       .blockSize = 8,
       .topK = 70,
       .sinkBlocks = 2,
       .localBlocks = 3});
  // One row and a short selection: the host splits it further than
  // split_keys asks, so that the splits fill the workers (two here).
  add({.label = "topk_decode_one_row_fills_workers",
       .heads = 1,
       .kvHeads = 1,
       .headDim = 16,
       .valueDim = 16,
       .batch = 1,
       .queries = 1,
       .keys = 300,
       .topK = 9,
       .sinkBlocks = 1,
       .localBlocks = 1});
  add({.label = "topp_decode_split_tokens",
       .heads = 2,
       .kvHeads = 2,
       .headDim = 12,
       .mask = "\"none\"",
       .queries = 1,
       .keys = 700,
       .method = "top_p",
       .topP = 0.97});
  // The int4 estimator: weights from keys rounded to 16 levels per row.
  add({.label = "topp_int4_after_topk_gqa_gate",
       .heads = 6,
       .headDim = 19,
       .gate = "headwise",
       .method = "top_p",
       .topK = 5,
       .minTokens = 4,
       .topP = 0.8,
       .estimator = "int4",
       .sinkBlocks = 1});
  add({.label = "topp_int4_decode_softcap",
       .headDim = 33,
       .softcap = 8.0,
       .queries = 2,
       .keys = 610,
       .method = "top_p",
       .topP = 0.9,
       .estimator = "int4"});
  add({.label = "topp_window_unbounded",
       .mask = R"({"sliding_window": 50})",
       .queries = 19,
       .keys = 90,
       .method = "top_p",
       .topP = 0.5});
  // The invariants of SPEC §1.3: a budget that keeps every candidate is
  // dense attention.
  add({.label = "topk_all_blocks_is_dense",
       .gate = "elementwise",
       .topK = 13,
       .dense = true});
  // The largest budget there is, over 600 rows: sized by the budget, the
  // selection alone would take B x H x Lq x top_k x 4 = 20 GB; a row keeps
  // at most its 38 blocks.
  add({.label = "topk_budget_past_the_blocks_is_dense",
       .queries = 600,
       .keys = 600,
       .topK = 1048576,
       .sinkBlocks = 1,
       .localBlocks = 1,
       .dense = true});
  add({.label = "topp_one_is_dense",
       .mask = R"({"sliding_window": 64})",
       .method = "top_p",
       .topP = 1.0,
       .dense = true});
  return all;
}

/// Cases drawn at random (from a fixed seed): budgets, block sizes,
/// sinks and locals, masks, gates and lengths in combinations nobody
/// picked, decode and prefill. The exact estimator only: int4's levels are
/// compared with the reference on keys built for it (IR cases below).
std::vector<SparseCase> randomSparseCases(int count) {
  CaseDraws draw;
  std::vector<SparseCase> all;
  for (int i = 0; i < count; ++i) {
    SparseCase c;
    c.label = "random" + std::to_string(i);
    c.kvHeads = draw.pick({1, 2});
    c.heads = c.kvHeads * draw.pick({1, 2, 4});
    c.headDim = draw.pick({8, 20, 64});
    c.valueDim = draw.chance(70) ? c.headDim : draw.pick({12, 32});
    c.batch = draw.pick({1, 2});
    c.queries = draw.pick({1, 2, 3, 8, 9, 37, 70});
    c.keys = draw.pick({1, 7, 16, 17, 100, 203, 517, 700});
    c.mask = draw.chance(40) ? "\"causal\""
             : draw.chance(50)
                 ? "\"none\""
                 : R"({"sliding_window": )" +
                       std::to_string(draw.pick({5, 40, 300})) + "}";
    if (c.mask != "\"none\"")
      c.keys = std::max(c.keys, c.queries);
    c.gate = draw.chance(60)   ? "none"
             : draw.chance(50) ? "elementwise"
                               : "headwise";
    if (draw.chance(25))
      c.softcap = static_cast<double>(draw.pick({5, 30}));
    c.blockSize = draw.pick({1, 5, 7, 8, 16, 32});
    c.method = draw.chance(60) ? "top_k" : "top_p";
    if (c.method == "top_k" || draw.chance(50))
      c.topK = draw.pick({1, 2, 4, 9, 64});
    if (c.method == "top_p") {
      c.topP = 0.05 * static_cast<double>(draw.pick({4, 10, 16, 19}));
      if (draw.chance(40))
        c.minTokens = draw.pick({1, 9, 30});
      if (draw.chance(40))
        c.maxTokens = draw.pick({10, 50, 200});
      if (c.minTokens && c.maxTokens && *c.minTokens > *c.maxTokens)
        std::swap(*c.minTokens, *c.maxTokens);
    }
    if (c.topK) { // sinks and locals are part of the budget
      c.sinkBlocks = std::min(*c.topK, draw.pick({0, 0, 1, 2}));
      c.localBlocks = std::min(*c.topK - c.sinkBlocks, draw.pick({0, 0, 1, 3}));
    }
    all.push_back(c);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Random, SparseAttention,
    testing::Combine(testing::ValuesIn(randomSparseCases(randomCaseCount(24))),
                     allBackends()),
    LabelAndBackend());

INSTANTIATE_TEST_SUITE_P(Sparsity, SparseAttention,
                         testing::Combine(testing::ValuesIn(sparseCases()),
                                          allBackends()),
                         LabelAndBackend());

//===----------------------------------------------------------------------===//
// Selections, index for index: attn IR whose entries return them.
//===----------------------------------------------------------------------===//

class Selections : public testing::TestWithParam<Backend> {
protected:
  /// Compiles `source` for the test's backend into `model`; leaves it null
  /// when the backend is missing (the test is skipped) or compiling failed.
  void compile(const char *source, std::unique_ptr<Model> &model,
               int threads = 2) {
    std::string skip;
    model = compileAndLoadFor(GetParam(), attnIR(source), threads, skip);
    if (!skip.empty())
      GTEST_SKIP() << skip;
    ASSERT_TRUE(model);
  }
};

TEST_P(Selections, MatchReferenceExactly) {
  // Two kv heads of 13 features, 3 query heads each; blocks of 5 keys.
  const char *source = R"mlir(
    func.func @topk(%q: tensor<?x6x?x13xf32>, %meta: tensor<?x2x?x2x13xf32>,
                    %k: tensor<?x2x?x13xf32>) -> tensor<?x6x?x?xi32> {
      %c2 = arith.constant 2 : index
      %lk = tensor.dim %k, %c2 : tensor<?x2x?x13xf32>
      %b = attn.select_topk %q, %meta, %lk {block_size = 5, top_k = 4,
          sink_blocks = 1, local_blocks = 1,
          mask = #attn.mask<sliding_window = 40>}
          : tensor<?x6x?x13xf32>, tensor<?x2x?x2x13xf32>
      return %b : tensor<?x6x?x?xi32>
    }
    func.func @topp(%q: tensor<?x6x?x13xf32>, %k: tensor<?x2x?x13xf32>,
                    %blocks: tensor<?x6x?x4xi32>) -> tensor<?x6x?x11xi32> {
      %t = attn.select_topp %q, %k blocks(%blocks) {top_p = 0.7,
          min_tokens = 3, max_tokens = 11, block_size = 5,
          mask = #attn.mask<sliding_window = 40>, softcap = 3.0}
          : tensor<?x6x?x13xf32>, tensor<?x2x?x13xf32>, tensor<?x6x?x4xi32>
      return %t : tensor<?x6x?x11xi32>
    }
    func.func @topp_dense(%q: tensor<?x6x?x13xf32>, %k: tensor<?x2x?x13xf32>)
        -> tensor<?x6x?x?xi32> {
      %t = attn.select_topp %q, %k {top_p = 0.6, mask = #attn.mask<causal>}
          : tensor<?x6x?x13xf32>, tensor<?x2x?x13xf32>
      return %t : tensor<?x6x?x?xi32>
    }
  )mlir";
  std::unique_ptr<Model> model;
  compile(source, model);
  if (!model)
    return;
  const int64_t B = 2, H = 6, Hkv = 2, D = 13, Lq = 23, Lk = 97;
  std::mt19937_64 rng(11);
  ref::Tensor q = randomF32({B, H, Lq, D}, rng, -2.0, 2.0);
  ref::Tensor k = randomF32({B, Hkv, Lk, D}, rng, -2.0, 2.0);
  ref::Tensor meta = ref::blockMeta(k, 5);
  ref::Mask window = ref::Mask::slidingWindow(40);

  std::vector<Tensor> blocks =
      runEntry(*model, "topk", {toRuntime(q), toRuntime(meta), toRuntime(k)});
  ASSERT_EQ(blocks.size(), 1u);
  ref::IntTensor expectedBlocks =
      ref::selectTopK(q, meta, Lk, window, {}, {5, 4, 1, 1});
  expectSame(blocks[0], expectedBlocks, "select_topk");

  // Decode calls (at most 8 rows) take CUDA's other path: the bounds of
  // every (row, block) first, a thread each, then the selecting threads.
  ref::Tensor qDecode = randomF32({B, H, 3, D}, rng, -2.0, 2.0);
  blocks = runEntry(*model, "topk",
                    {toRuntime(qDecode), toRuntime(meta), toRuntime(k)});
  ASSERT_EQ(blocks.size(), 1u);
  expectSame(blocks[0],
             ref::selectTopK(qDecode, meta, Lk, window, {}, {5, 4, 1, 1}),
             "select_topk of 3 rows");

  std::vector<Tensor> tokens =
      runEntry(*model, "topp",
               {toRuntime(q), toRuntime(k), intsToRuntime(expectedBlocks)});
  ASSERT_EQ(tokens.size(), 1u);
  ref::Score capped;
  capped.softcap = 3.0;
  expectSame(
      tokens[0],
      ref::selectTopP(q, k, &expectedBlocks, 5, window, capped, {0.7, 3, 11}),
      "select_topp after top-k");

  // The same blocks listed in descending order, every other row with its
  // first entry repeated in place of its second: candidates then come in
  // another order than their tokens, and the kept tokens must still be
  // written ascending.
  ref::IntTensor scrambled = expectedBlocks;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        for (int64_t n = 0; n < 2; ++n)
          std::swap(scrambled(b, h, i, n), scrambled(b, h, i, 3 - n));
        if (i % 2)
          scrambled(b, h, i, 1) = scrambled(b, h, i, 0);
      }
  tokens = runEntry(*model, "topp",
                    {toRuntime(q), toRuntime(k), intsToRuntime(scrambled)});
  ASSERT_EQ(tokens.size(), 1u);
  expectSame(tokens[0],
             ref::selectTopP(q, k, &scrambled, 5, window, capped, {0.7, 3, 11}),
             "select_topp over blocks listed out of order");

  tokens = runEntry(*model, "topp_dense", {toRuntime(q), toRuntime(k)});
  ASSERT_EQ(tokens.size(), 1u);
  expectSame(tokens[0],
             ref::selectTopP(q, k, nullptr, 1, ref::Mask::causal(), {},
                             {0.6, 0, std::nullopt}),
             "select_topp over every visible key");
}

TEST_P(Selections, TopKTiesAndBudgetsInDecode) {
  // Decode's top-k, which CUDA ranks a thread per (row, block): blocks with
  // equal bounds (copies of one block, so ties are exact) go to the lower
  // index first; a budget of sinks and locals alone (no block competes);
  // a budget above the candidates (all kept, -1 after them). 95 keys in
  // blocks of 4: the last block holds 3.
  const int64_t B = 2, H = 4, Hkv = 2, D = 6, Lk = 95, bs = 4;
  struct Case {
    const char *entry;
    ref::TopK budget;
  };
  const Case cases[] = {{"ties", {bs, 7, 2, 1}},
                        {"no_fill", {bs, 3, 1, 2}},
                        {"fits", {bs, 30, 1, 1}}};
  // One entry per case, its budget taken from the case.
  std::string source;
  for (const Case &c : cases) {
    const ref::TopK &t = c.budget;
    std::string out = "tensor<?x4x?x?xi32>";
    source += std::string("func.func @") + c.entry +
              "(%q: tensor<?x4x?x6xf32>, %meta: tensor<?x2x?x2x6xf32>, "
              "%k: tensor<?x2x?x6xf32>) -> " +
              out +
              " {\n"
              "  %c2 = arith.constant 2 : index\n"
              "  %lk = tensor.dim %k, %c2 : tensor<?x2x?x6xf32>\n"
              "  %b = attn.select_topk %q, %meta, %lk {block_size = " +
              std::to_string(t.blockSize) +
              ", top_k = " + std::to_string(t.topK) +
              ", sink_blocks = " + std::to_string(t.sinkBlocks) +
              ", local_blocks = " + std::to_string(t.localBlocks) +
              ", mask = #attn.mask<causal>} : tensor<?x4x?x6xf32>, "
              "tensor<?x2x?x2x6xf32>\n"
              "  return %b : " +
              out + "\n}\n";
  }
  std::unique_ptr<Model> model;
  compile(source.c_str(), model);
  if (!model)
    return;
  std::mt19937_64 rng(29);
  ref::Tensor k = randomF32({B, Hkv, Lk, D}, rng, -1.0, 1.0);
  // Blocks 3, 7, 11, ... are copies of block 3, scaled up so that they
  // compete for the budget among themselves.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t j = 0; j < bs; ++j)
        for (int64_t d = 0; d < D; ++d) {
          double x = 3.0 * k(b, h, 3 * bs + j, d);
          for (int64_t block = 3; block * bs + j < Lk; block += 4)
            k(b, h, block * bs + j, d) = x;
        }
  ref::Tensor meta = ref::blockMeta(k, bs);
  for (int64_t lq : {1, 2}) {
    ref::Tensor q = randomF32({B, H, lq, D}, rng, -1.0, 1.0);
    for (const Case &c : cases) {
      std::vector<Tensor> blocks = runEntry(
          *model, c.entry, {toRuntime(q), toRuntime(meta), toRuntime(k)});
      ASSERT_EQ(blocks.size(), 1u);
      std::string what =
          std::string(c.entry) + " with " + std::to_string(lq) + " rows";
      expectSame(
          blocks[0],
          ref::selectTopK(q, meta, Lk, ref::Mask::causal(), {}, c.budget),
          what.c_str());
    }
  }
}

TEST_P(Selections, TopKSortsLongRowsInDecode) {
  // Decode's top-k over rows of many blocks, which CUDA sorts a block per
  // row in shared memory: 1001 blocks (4003 keys in blocks of 4, the last
  // holding 3), whose 996 middle candidates pad to 1024 and take every
  // stage of the sort; every 7th block from block 12 is block 5 doubled,
  // so 142 exact ties compete for the budget with the row's other blocks,
  // and a zero query row makes every bound equal (the earliest blocks
  // win).
  const int64_t B = 2, H = 2, Hkv = 1, D = 5, Lk = 4003, bs = 4;
  const ref::TopK budget{bs, 40, 2, 3};
  const char *source = R"mlir(
    func.func @long(%q: tensor<?x2x?x5xf32>, %meta: tensor<?x1x?x2x5xf32>,
                    %k: tensor<?x1x?x5xf32>) -> tensor<?x2x?x?xi32> {
      %c2 = arith.constant 2 : index
      %lk = tensor.dim %k, %c2 : tensor<?x1x?x5xf32>
      %b = attn.select_topk %q, %meta, %lk {block_size = 4, top_k = 40,
          sink_blocks = 2, local_blocks = 3, mask = #attn.mask<causal>}
          : tensor<?x2x?x5xf32>, tensor<?x1x?x2x5xf32>
      return %b : tensor<?x2x?x?xi32>
    }
  )mlir";
  std::unique_ptr<Model> model;
  compile(source, model);
  if (!model)
    return;
  std::mt19937_64 rng(31);
  ref::Tensor k = randomF32({B, Hkv, Lk, D}, rng, -1.0, 1.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < bs; ++j)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t block = 12; block * bs + j < Lk; block += 7)
          k(b, 0, block * bs + j, d) = 2.0 * k(b, 0, 5 * bs + j, d);
  ref::Tensor meta = ref::blockMeta(k, bs);
  for (int64_t lq : {1, 3}) {
    ref::Tensor q = randomF32({B, H, lq, D}, rng, -1.0, 1.0);
    for (int64_t d = 0; d < D; ++d) // batch 1, head 1, row 0: all ties
      q(1, 1, 0, d) = 0.0;
    std::vector<Tensor> blocks =
        runEntry(*model, "long", {toRuntime(q), toRuntime(meta), toRuntime(k)});
    ASSERT_EQ(blocks.size(), 1u);
    std::string what = "1001 blocks with " + std::to_string(lq) + " rows";
    expectSame(blocks[0],
               ref::selectTopK(q, meta, Lk, ref::Mask::causal(), {}, budget),
               what.c_str());
  }
}

TEST_P(Selections, TopKBoundsInChunksOnManyThreads) {
  // Fewer selection workgroups (batch x kv heads x rows) than threads: the
  // CPU bounds each row's candidates in chunks of 128 blocks, a workgroup
  // each, then keeps the budget from them. A model on 8 threads, one
  // sequence of 1001 blocks (8 chunks, the last of 104 middle candidates),
  // 1 to 3 rows, ties across chunks (every 9th block from block 7 is block
  // 2 doubled) and a zero query row; a window whose 16 candidates fit the
  // budget (no bounds); and the same calls on 1 thread, which bound and
  // keep in one workgroup per selection.
  const int64_t H = 4, Hkv = 2, D = 5, Lk = 4003, bs = 4;
  const ref::TopK budget{bs, 40, 2, 3};
  const char *source = R"mlir(
    func.func @long(%q: tensor<?x4x?x5xf32>, %meta: tensor<?x2x?x2x5xf32>,
                    %k: tensor<?x2x?x5xf32>) -> tensor<?x4x?x?xi32> {
      %c2 = arith.constant 2 : index
      %lk = tensor.dim %k, %c2 : tensor<?x2x?x5xf32>
      %b = attn.select_topk %q, %meta, %lk {block_size = 4, top_k = 40,
          sink_blocks = 2, local_blocks = 3, mask = #attn.mask<causal>}
          : tensor<?x4x?x5xf32>, tensor<?x2x?x2x5xf32>
      return %b : tensor<?x4x?x?xi32>
    }
    func.func @window(%q: tensor<?x4x?x5xf32>, %meta: tensor<?x2x?x2x5xf32>,
                      %k: tensor<?x2x?x5xf32>) -> tensor<?x4x?x?xi32> {
      %c2 = arith.constant 2 : index
      %lk = tensor.dim %k, %c2 : tensor<?x2x?x5xf32>
      %b = attn.select_topk %q, %meta, %lk {block_size = 4, top_k = 40,
          sink_blocks = 2, local_blocks = 3,
          mask = #attn.mask<sliding_window = 61>}
          : tensor<?x4x?x5xf32>, tensor<?x2x?x2x5xf32>
      return %b : tensor<?x4x?x?xi32>
    }
  )mlir";
  std::unique_ptr<Model> manyThreads, oneThread;
  compile(source, manyThreads, 8);
  compile(source, oneThread, 1);
  if (!manyThreads || !oneThread)
    return;
  std::mt19937_64 rng(37);
  for (int64_t B : {1, 2}) {
    ref::Tensor k = randomF32({B, Hkv, Lk, D}, rng, -1.0, 1.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t j = 0; j < bs; ++j)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t block = 7; block * bs + j < Lk; block += 9)
              k(b, h, block * bs + j, d) = 2.0 * k(b, h, 2 * bs + j, d);
    ref::Tensor meta = ref::blockMeta(k, bs);
    for (int64_t lq : {1, 3}) {
      ref::Tensor q = randomF32({B, H, lq, D}, rng, -1.0, 1.0);
      for (int64_t d = 0; d < D; ++d) // batch 0, head 3, row 0: all ties
        q(0, 3, 0, d) = 0.0;
      for (const char *entry : {"long", "window"}) {
        const ref::Mask mask = std::string(entry) == "long"
                                   ? ref::Mask::causal()
                                   : ref::Mask::slidingWindow(61);
        ref::IntTensor expected =
            ref::selectTopK(q, meta, Lk, mask, {}, budget);
        for (Model *model : {manyThreads.get(), oneThread.get()}) {
          std::vector<Tensor> blocks = runEntry(
              *model, entry, {toRuntime(q), toRuntime(meta), toRuntime(k)});
          ASSERT_EQ(blocks.size(), 1u);
          std::string what =
              std::string(entry) + ", B = " + std::to_string(B) + ", " +
              std::to_string(lq) + " rows, " +
              (model == oneThread.get() ? "1 thread" : "8 threads");
          expectSame(blocks[0], expected, what.c_str());
        }
      }
    }
  }
}

TEST_P(Selections, ListedBlocksIgnorePaddingRepeatsAndStrays) {
  // A selection given as an input, not sorted, with -1 padding, repeats
  // and blocks past the keys: each listed block counts once (SPEC §1.3).
  const char *source = R"mlir(
    func.func @sparse(%q: tensor<?x4x?x10xf32>, %k: tensor<?x2x?x10xf32>,
                      %v: tensor<?x2x?x7xf32>, %sel: tensor<?x4x?x6xi32>)
        -> tensor<?x4x?x7xf32> {
      %o = attn.sparse_sdpa %q, %k, %v, %sel
          {block_size = 4, mask = #attn.mask<causal>, softcap = 4.0}
          : tensor<?x4x?x10xf32>, tensor<?x2x?x10xf32>, tensor<?x2x?x7xf32>,
            tensor<?x4x?x6xi32>
      return %o : tensor<?x4x?x7xf32>
    }
    func.func @tokens(%q: tensor<?x4x?x10xf32>, %k: tensor<?x2x?x10xf32>,
                      %v: tensor<?x2x?x7xf32>, %sel: tensor<?x4x?x?xi32>)
        -> tensor<?x4x?x7xf32> {
      %o = attn.sparse_sdpa %q, %k, %v, %sel
          {block_size = 1, mask = #attn.mask<sliding_window = 500>}
          : tensor<?x4x?x10xf32>, tensor<?x2x?x10xf32>, tensor<?x2x?x7xf32>,
            tensor<?x4x?x?xi32>
      return %o : tensor<?x4x?x7xf32>
    }
  )mlir";
  std::unique_ptr<Model> model;
  compile(source, model);
  if (!model)
    return;
  {
    // 700 token entries over 600 keys: a decode call splits them 256 a
    // split, so repeats, padding and strays fall in every split and a token
    // listed in one split recurs in later ones.
    const int64_t B = 1, Lq = 2, Lk = 600, N = 700;
    std::mt19937_64 rng(8);
    ref::Tensor q = randomF32({B, 4, Lq, 10}, rng, -2.0, 2.0);
    ref::Tensor k = randomF32({B, 2, Lk, 10}, rng, -2.0, 2.0);
    ref::Tensor v = randomF32({B, 2, Lk, 7}, rng, -1.0, 1.0);
    ref::IntTensor selection({B, 4, Lq, N});
    for (int32_t &token : selection.values()) {
      int64_t draw = static_cast<int64_t>(rng() % 40);
      token = draw == 0   ? -1
              : draw == 1 ? static_cast<int32_t>(Lk + rng() % 9)
                          : static_cast<int32_t>(rng() % Lk);
    }
    std::vector<Tensor> out = runEntry(
        *model, "tokens",
        {toRuntime(q), toRuntime(k), toRuntime(v), intsToRuntime(selection)});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0],
                ref::sparseSdpa(q, k, v, selection, 1,
                                ref::Mask::slidingWindow(500), {})
                    .output,
                1e-5, "o of listed tokens");
  }
  const int64_t B = 2, Lq = 5, Lk = 30; // 8 blocks, the last one partial
  std::mt19937_64 rng(5);
  ref::Tensor q = randomF32({B, 4, Lq, 10}, rng, -2.0, 2.0);
  ref::Tensor k = randomF32({B, 2, Lk, 10}, rng, -2.0, 2.0);
  ref::Tensor v = randomF32({B, 2, Lk, 7}, rng, -1.0, 1.0);
  ref::IntTensor selection({B, 4, Lq, 6});
  for (int32_t &block : selection.values()) {
    // -1, a stray past the keys (8, 9), else a block; repeats are likely.
    int64_t draw = static_cast<int64_t>(rng() % 12);
    block = draw == 0 ? -1 : draw == 1 ? 8 : draw == 2 ? 9 : draw % 8;
  }
  selection(0, 0, 0, 5) = selection(0, 0, 0, 0) = 3; // a certain repeat
  std::vector<Tensor> out = runEntry(
      *model, "sparse",
      {toRuntime(q), toRuntime(k), toRuntime(v), intsToRuntime(selection)});
  ASSERT_EQ(out.size(), 1u);
  ref::Score score;
  score.softcap = 4.0;
  expectClose(
      out[0],
      ref::sparseSdpa(q, k, v, selection, 4, ref::Mask::causal(), score).output,
      1e-5, "o");
}

TEST_P(Selections, TopPTiesClampsAndLongRows) {
  // Top-p sorts only the score bucket where the kept weight crosses top_p
  // (and the one where a clamp lands). Small integer features with scale 1
  // give exact scores with many ties, so the tie rule decides inside a
  // bucket; a zero query row gives one bucket of equal scores; min_tokens
  // above the natural count and max_tokens below it move the last kept
  // token to another bucket; 5000 keys are more than the 4096 buckets.
  const char *source = R"mlir(
    func.func @ties(%q: tensor<?x2x?x4xf32>, %k: tensor<?x1x?x4xf32>)
        -> tensor<?x2x?x?xi32> {
      %t = attn.select_topp %q, %k {top_p = 0.9, scale = 1.0,
          mask = #attn.mask<none>}
          : tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>
      return %t : tensor<?x2x?x?xi32>
    }
    func.func @at_least(%q: tensor<?x2x?x4xf32>, %k: tensor<?x1x?x4xf32>)
        -> tensor<?x2x?x?xi32> {
      %t = attn.select_topp %q, %k {top_p = 0.3, min_tokens = 150,
          scale = 1.0, mask = #attn.mask<causal>}
          : tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>
      return %t : tensor<?x2x?x?xi32>
    }
    func.func @at_most(%q: tensor<?x2x?x4xf32>, %k: tensor<?x1x?x4xf32>)
        -> tensor<?x2x?x7xi32> {
      %t = attn.select_topp %q, %k {top_p = 0.95, max_tokens = 7,
          scale = 1.0, mask = #attn.mask<causal>}
          : tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>
      return %t : tensor<?x2x?x7xi32>
    }
    func.func @long(%q: tensor<?x2x?x6xf32>, %k: tensor<?x1x?x6xf32>)
        -> tensor<?x2x?x?xi32> {
      %t = attn.select_topp %q, %k {top_p = 0.95, mask = #attn.mask<causal>}
          : tensor<?x2x?x6xf32>, tensor<?x1x?x6xf32>
      return %t : tensor<?x2x?x?xi32>
    }
  )mlir";
  std::unique_ptr<Model> model;
  compile(source, model);
  if (!model)
    return;
  std::mt19937_64 rng(17);
  auto integers = [&](std::vector<int64_t> shape) {
    ref::Tensor t(shape);
    for (double &x : t.values())
      x = static_cast<double>(static_cast<int64_t>(rng() % 3) - 1);
    return t;
  };
  const int64_t B = 2, Lq = 5, Lk = 301;
  ref::Tensor q = integers({B, 2, Lq, 4}), k = integers({B, 1, Lk, 4});
  for (int64_t d = 0; d < 4; ++d)
    q(1, 1, 2, d) = 0.0; // every score of this row is 0
  ref::Score unscaled;
  unscaled.scale = 1.0;
  struct Entry {
    const char *name;
    ref::Mask mask;
    ref::TopP topP;
  };
  for (const Entry &entry :
       {Entry{"ties", ref::Mask::none(), {0.9, 0, std::nullopt}},
        Entry{"at_least", ref::Mask::causal(), {0.3, 150, std::nullopt}},
        Entry{"at_most", ref::Mask::causal(), {0.95, 0, 7}}}) {
    std::vector<Tensor> tokens =
        runEntry(*model, entry.name, {toRuntime(q), toRuntime(k)});
    ASSERT_EQ(tokens.size(), 1u);
    expectSame(
        tokens[0],
        ref::selectTopP(q, k, nullptr, 1, entry.mask, unscaled, entry.topP),
        entry.name);
  }

  const int64_t longKeys = 5000;
  ref::Tensor longQ = randomF32({1, 2, 3, 6}, rng, -3.0, 3.0);
  ref::Tensor longK = randomF32({1, 1, longKeys, 6}, rng, -3.0, 3.0);
  std::vector<Tensor> tokens =
      runEntry(*model, "long", {toRuntime(longQ), toRuntime(longK)});
  ASSERT_EQ(tokens.size(), 1u);
  expectSame(tokens[0],
             ref::selectTopP(longQ, longK, nullptr, 1, ref::Mask::causal(), {},
                             {0.95, 0, std::nullopt}),
             "long rows");
}

TEST_P(Selections, Int4EstimatorRoundsEachKeyToItsLevels) {
  // Keys whose int4 levels are exact in f32 and f64 alike: channel 0 is the
  // key's lowest (lo), channel 1 its highest (lo + 30), so a level is 2
  // apart, and every other channel is lo + 2c + 0.5 (rounds down to
  // lo + 2c) or lo + 2c + 1.5 (rounds up to lo + 2c + 2). The rounding moves
  // each key's score differently, so int4 and exact keep different tokens;
  // integer queries with scale 1 keep every score exact, ties included.
  const char *source = R"mlir(
    func.func @int4(%q: tensor<?x3x?x7xf32>, %k: tensor<?x1x?x7xf32>)
        -> tensor<?x3x?x?xi32> {
      %t = attn.select_topp %q, %k {top_p = 0.6, scale = 1.0,
          estimator = #attn.estimator<int4>, mask = #attn.mask<causal>}
          : tensor<?x3x?x7xf32>, tensor<?x1x?x7xf32>
      return %t : tensor<?x3x?x?xi32>
    }
  )mlir";
  std::unique_ptr<Model> model;
  compile(source, model);
  if (!model)
    return;
  const int64_t B = 2, Lq = 6, Lk = 83, D = 7;
  std::mt19937_64 rng(23);
  ref::Tensor q({B, 3, Lq, D}), k({B, 1, Lk, D});
  for (double &x : q.values())
    x = static_cast<double>(static_cast<int64_t>(rng() % 3) - 1) * 0.25;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Lk; ++j) {
      const double lo = static_cast<double>(rng() % 5) - 2.0;
      k(b, 0, j, 0) = lo;
      k(b, 0, j, 1) = lo + 30.0;
      for (int64_t d = 2; d < D; ++d)
        k(b, 0, j, d) = lo + 2.0 * static_cast<double>(rng() % 15) + 0.5 +
                        static_cast<double>(rng() % 2);
    }
  ref::Score unscaled;
  unscaled.scale = 1.0;
  ref::IntTensor expected =
      ref::selectTopP(q, k, nullptr, 1, ref::Mask::causal(), unscaled,
                      {0.6, 0, std::nullopt, true});
  ASSERT_NE(expected.values(),
            ref::selectTopP(q, k, nullptr, 1, ref::Mask::causal(), unscaled,
                            {0.6, 0, std::nullopt, false})
                .values())
      << "the inputs should tell int4 from exact";
  std::vector<Tensor> tokens =
      runEntry(*model, "int4", {toRuntime(q), toRuntime(k)});
  ASSERT_EQ(tokens.size(), 1u);
  expectSame(tokens[0], expected, "select_topp int4");
}

INSTANTIATE_TEST_SUITE_P(IR, Selections, allBackends(),
                         [](const testing::TestParamInfo<Backend> &info) {
                           return backendName(info.param);
                         });

//===----------------------------------------------------------------------===//
// Draft trees: <layer>.tree, verify.accept, <layer>.compact.
//===----------------------------------------------------------------------===//

struct TreeCase {
  std::string label;
  int64_t heads = 4, kvHeads = 1, headDim = 24, valueDim = 17;
  std::string mask = "\"causal\"";
  std::string gate = "none";
  int64_t batch = 2, prefix = 41, nodes = 13;
  bool chain = false;
  /// Attention sinks (randomSinks) after the gate.
  bool sinks = false;
  /// One latent cache `kv` (latent_kv): the values are its keys' first
  /// valueDim features, and .compact moves its rows alone.
  bool latent = false;
  /// The storage dtype of q, k, v, the gate and o.
  std::string dtype = "f32";
};

void PrintTo(const TreeCase &c, std::ostream *os) { *os << c.label; }

std::string treeJson(const TreeCase &c) {
  std::ostringstream json;
  json << R"({"model": "tree", "dtype": ")" << c.dtype
       << R"(", "layers": [{"name": "layer",)"
       << R"( "type": "attention", "num_heads": )" << c.heads
       << R"(, "num_kv_heads": )" << c.kvHeads << R"(, "head_dim": )"
       << c.headDim << R"(, "value_dim": )" << c.valueDim << R"(, "mask": )"
       << c.mask << R"(, "gate": ")" << c.gate << R"(", "sinks": )"
       << (c.sinks ? "true" : "false") << R"(, "latent_kv": )"
       << (c.latent ? "true" : "false")
       << R"(, "tree": true}], "speculative": {"max_tree_nodes": 64}})";
  return json.str();
}

class TreeAttention
    : public testing::TestWithParam<std::tuple<TreeCase, Backend>> {};

TEST_P(TreeAttention, MatchesReference) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, treeJson(c), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t keys = c.prefix + c.nodes;
  const attn_dtype dtype = storageDtype(c.dtype);
  ref::Tensor q =
      randomF32({c.batch, c.heads, c.nodes, c.headDim}, rng, -2, 2, dtype);
  ref::Tensor k =
      randomF32({c.batch, c.kvHeads, keys, c.headDim}, rng, -2, 2, dtype);
  ref::Tensor v = c.latent ? leadingFeatures(k, c.valueDim)
                           : randomF32({c.batch, c.kvHeads, keys, c.valueDim},
                                       rng, -1, 1, dtype);
  ref::IntTensor parents = randomParents(c.batch, c.nodes, rng, c.chain);
  std::optional<ref::Tensor> gate;
  if (c.gate != "none")
    gate = randomF32(
        {c.batch, c.heads, c.nodes, c.gate == "elementwise" ? c.valueDim : 1},
        rng, -3.0, 3.0, dtype);
  std::vector<Tensor> inputs{toRuntime(q, dtype), toRuntime(k, dtype)};
  if (!c.latent)
    inputs.push_back(toRuntime(v, dtype));
  inputs.push_back(intsToRuntime(parents));
  if (gate)
    inputs.push_back(toRuntime(*gate, dtype));
  ref::Score score;
  if (c.sinks) {
    score.sinks = randomSinks(c.heads, rng);
    inputs.push_back(sinksToRuntime(score.sinks));
  }
  std::vector<Tensor> out = runEntry(*model, "layer.tree", inputs);
  ASSERT_EQ(out.size(), 1u);
  ref::AttentionResult expected = ref::treeSdpa(
      q, k, v, parents, referenceMask(c.mask), score, gate ? &*gate : nullptr);
  expectClose(out[0], expected.output,
              1e-5 + (dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype)),
              "tree o");

  // Acceptance on drafts from a 3-token vocabulary (so paths are long and
  // siblings compete), then compaction of the accepted path.
  ref::IntTensor tokens({c.batch, c.nodes}), target({c.batch, c.nodes});
  for (int32_t &t : tokens.values())
    t = static_cast<int32_t>(rng() % 3);
  for (int32_t &t : target.values())
    t = static_cast<int32_t>(rng() % 3);
  std::vector<Tensor> accepted = runEntry(
      *model, "verify.accept",
      {intsToRuntime(tokens), intsToRuntime(target), intsToRuntime(parents)});
  ASSERT_EQ(accepted.size(), 3u);
  ref::Acceptance expectedAccept = ref::treeAccept(tokens, target, parents);
  expectSame(accepted[0], expectedAccept.path, "path");
  expectSame(accepted[1], expectedAccept.length, "length");
  expectSame(accepted[2], expectedAccept.bonus, "bonus");

  auto [expectedK, expectedV] =
      ref::kvCompact(k, v, expectedAccept.path, expectedAccept.length);
  if (c.latent) {
    std::vector<Tensor> compacted =
        runEntry(*model, "layer.compact",
                 {toRuntime(k, dtype), accepted[0], accepted[1]});
    ASSERT_EQ(compacted.size(), 1u);
    expectClose(compacted[0], expectedK, 0.0, "kv'");
    return;
  }
  std::vector<Tensor> compacted = runEntry(
      *model, "layer.compact",
      {toRuntime(k, dtype), toRuntime(v, dtype), accepted[0], accepted[1]});
  ASSERT_EQ(compacted.size(), 2u);
  expectClose(compacted[0], expectedK, 0.0, "k'");
  expectClose(compacted[1], expectedV, 0.0, "v'");
}

std::vector<TreeCase> treeCases() {
  std::vector<TreeCase> all;
  auto add = [&](TreeCase c) { all.push_back(std::move(c)); };
  add({.label = "random_tree_mqa"});
  add({.label = "random_tree_gqa_gate_bf16",
       .heads = 6,
       .kvHeads = 2,
       .gate = "elementwise",
       .dtype = "bf16"});
  // An odd head dim: the prefix's q k^T on widened products (features
  // pair only when D is even), its P v still on pairs.
  add({.label = "tree_odd_head_dim_bf16",
       .heads = 4,
       .kvHeads = 2,
       .headDim = 23,
       .prefix = 70,
       .dtype = "bf16"});
  add({.label = "window_gqa_headwise",
       .heads = 6,
       .kvHeads = 3,
       .mask = R"({"sliding_window": 7})",
       .gate = "headwise",
       .prefix = 30,
       .nodes = 19});
  add({.label = "chain_window_deeper_than_window",
       .mask = R"({"sliding_window": 5})",
       .gate = "elementwise",
       .prefix = 3,
       .nodes = 11,
       .chain = true});
  add({.label = "no_prefix", .batch = 3, .prefix = 0, .nodes = 9});
  // Attention sinks: added once, by the merge of prefix and tree keys.
  add({.label = "sinks_window_elementwise",
       .heads = 6,
       .kvHeads = 2,
       .mask = R"({"sliding_window": 9})",
       .gate = "elementwise",
       .prefix = 50,
       .nodes = 21,
       .sinks = true});
  add({.label = "sinks_no_prefix", .prefix = 0, .nodes = 7, .sinks = true});
  // Chunked masks: nodes whose positions P + depth fall in a later chunk
  // than the prefix's end, or than their ancestors', see only their chunk.
  add({.label = "chunked_random_tree",
       .heads = 6,
       .kvHeads = 2,
       .mask = R"({"chunked": 16})",
       .gate = "elementwise",
       .prefix = 43,
       .nodes = 21});
  add({.label = "chunked_chain_across_chunks",
       .mask = R"({"chunked": 5})",
       .prefix = 8,
       .nodes = 13,
       .chain = true,
       .sinks = true});
  add({.label = "chunked_many_nodes_short_prefix",
       .heads = 3,
       .kvHeads = 1,
       .mask = R"({"chunked": 7})",
       .prefix = 3,
       .nodes = 40});
  add({.label = "sinks_many_nodes",
       .heads = 3,
       .kvHeads = 1,
       .prefix = 70,
       .nodes = 40,
       .sinks = true});
  // A latent cache (MLA): MQA with 16 heads; a small tree (CUDA's split
  // prefix) and a large one (the flash prefix).
  add({.label = "latent_mqa16_small_tree",
       .heads = 16,
       .headDim = 72,
       .valueDim = 64,
       .prefix = 300,
       .nodes = 5,
       .latent = true});
  // DeepSeek's shape: a tree large enough for the flash prefix, whose
  // CUDA kernel splits the 512 value columns over warps.
  add({.label = "latent_mla_large_tree",
       .heads = 16,
       .headDim = 576,
       .valueDim = 512,
       .batch = 1,
       .prefix = 70,
       .nodes = 21,
       .latent = true});
  add({.label = "latent_gqa_window_sinks",
       .heads = 6,
       .kvHeads = 2,
       .headDim = 40,
       .valueDim = 24,
       .mask = R"({"sliding_window": 30})",
       .prefix = 45,
       .nodes = 33,
       .sinks = true,
       .latent = true});
  add({.label = "few_nodes_no_prefix", .batch = 2, .prefix = 0, .nodes = 4});
  add({.label = "root_only", .prefix = 25, .nodes = 1});
  // Small trees (at most 8 nodes): CUDA's decode flash kernel splits the
  // prefix into 256-key ranges with the kv group's heads times the nodes as
  // its rows; a short window leaves some splits to no node and cuts others
  // at each node's own start.
  add({.label = "prefix_split",
       .heads = 2,
       .headDim = 16,
       .valueDim = 9,
       .batch = 1,
       .prefix = 700,
       .nodes = 7});
  add({.label = "small_tree_window_gqa4_splits",
       .heads = 8,
       .kvHeads = 2,
       .headDim = 24,
       .valueDim = 12,
       .mask = R"({"sliding_window": 300})",
       .gate = "elementwise",
       .batch = 2,
       .prefix = 600,
       .nodes = 6});
  add({.label = "long_window_prefix",
       .heads = 2,
       .headDim = 8,
       .valueDim = 8,
       .mask = R"({"sliding_window": 4400})",
       .batch = 1,
       .prefix = 4500,
       .nodes = 5});
  return all;
}

/// Trees drawn at random (from a fixed seed): sizes up to max_tree_nodes,
/// prefixes from none to several splits, windows, groups and gates in
/// combinations nobody picked.
std::vector<TreeCase> randomTreeCases(int count) {
  CaseDraws draw;
  std::vector<TreeCase> all;
  for (int i = 0; i < count; ++i) {
    TreeCase c;
    c.label = "random" + std::to_string(i);
    c.kvHeads = draw.pick({1, 2, 3});
    c.heads = c.kvHeads * draw.pick({1, 2, 4});
    c.headDim = draw.pick({8, 24, 64});
    c.valueDim = draw.pick({5, 17, 64});
    c.mask = draw.rng() % 2
                 ? "\"causal\""
                 : R"({"sliding_window": )" +
                       std::to_string(draw.pick({1, 4, 30, 300})) + "}";
    c.gate = draw.rng() % 2   ? "none"
             : draw.rng() % 2 ? "elementwise"
                              : "headwise";
    c.batch = draw.pick({1, 2, 3});
    c.prefix = draw.pick({0, 1, 17, 64, 300, 700});
    c.nodes = draw.pick({1, 2, 7, 8, 9, 33, 63, 64});
    c.chain = draw.rng() % 4 == 0;
    all.push_back(c);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Random, TreeAttention,
    testing::Combine(testing::ValuesIn(randomTreeCases(randomCaseCount(12))),
                     allBackends()),
    LabelAndBackend());

INSTANTIATE_TEST_SUITE_P(Trees, TreeAttention,
                         testing::Combine(testing::ValuesIn(treeCases()),
                                          allBackends()),
                         LabelAndBackend());

//===----------------------------------------------------------------------===//
// Bad values and sizes: errors that name what is wrong.
//===----------------------------------------------------------------------===//

class TreeErrors : public testing::Test {
protected:
  void SetUp() override {
    model = compileAndLoad(treeJson({.label = "errors"}), 1);
    ASSERT_TRUE(model);
  }
  Status run(const std::string &name, const std::vector<Tensor> &inputs) {
    int32_t entry = -1;
    EXPECT_TRUE(model->findEntry(name, entry).ok());
    std::vector<Tensor> outputs;
    return model->run(entry, inputs, outputs);
  }
  std::unique_ptr<Model> model;
};

TEST_F(TreeErrors, ParentsThatAreNoTree) {
  ref::IntTensor parents({2, 4}, 0);
  parents(0, 0) = parents(1, 0) = -1;
  parents(1, 3) = 3; // not an earlier node
  Tensor q(ATTN_F32, {2, 4, 4, 24}), k(ATTN_F32, {2, 1, 10, 24}),
      v(ATTN_F32, {2, 1, 10, 17});
  Status status = run("layer.tree", {q, k, v, intsToRuntime(parents)});
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message, "input 'parents' (#3) of entry 'layer.tree': "
                            "parents[1][3] = 3 must be in [0, 3)");
  parents(1, 3) = 0;
  parents(0, 0) = 2;
  Tensor tokens(ATTN_I32, {2, 4}), target(ATTN_I32, {2, 4});
  status = run("verify.accept", {tokens, target, intsToRuntime(parents)});
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message, "input 'parents' (#2) of entry 'verify.accept': "
                            "parents[0][0] = 2 must be -1 (the root)");
}

TEST_F(TreeErrors, PathOutsideTheTree) {
  Tensor k(ATTN_F32, {1, 1, 10, 24}), v(ATTN_F32, {1, 1, 10, 17});
  ref::IntTensor path({1, 4}, -1), length({1}, 3);
  path(0, 0) = 0;
  path(0, 1) = 2;
  path(0, 2) = 4;
  Status status =
      run("layer.compact", {k, v, intsToRuntime(path), intsToRuntime(length)});
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'path' (#2) of entry 'layer.compact': path[0][2] = 4 must "
            "be a tree node in [0, 4) (it is within length[0] = 3)");
  length(0) = 5;
  status =
      run("layer.compact", {k, v, intsToRuntime(path), intsToRuntime(length)});
  EXPECT_EQ(status.message,
            "input 'length' (#3) of entry 'layer.compact': length[0] = 5 must "
            "be in [0, 4] (the nodes of 'path')");
}

TEST_F(TreeErrors, FewerKeysThanTreeNodes) {
  Tensor q(ATTN_F32, {1, 4, 6, 24}), k(ATTN_F32, {1, 1, 5, 24}),
      v(ATTN_F32, {1, 1, 5, 17});
  std::mt19937_64 rng(3);
  ref::IntTensor parents = randomParents(1, 6, rng);
  Status status = run("layer.tree", {q, k, v, intsToRuntime(parents)});
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "entry 'layer.tree': attn.tree_sdpa: dim 2 of 'k' (P + T) must "
            "hold at least the T tree nodes of 'q'");
}

TEST(SparseErrors, MetadataOfOtherKeys) {
  SparseCase c{.label = "meta_errors", .topK = 2};
  std::unique_ptr<Model> model = compileAndLoad(sparseJson(c), 1);
  ASSERT_TRUE(model);
  int32_t entry = -1;
  ASSERT_TRUE(model->findEntry("layer", entry).ok());
  // 40 keys are ceil(40 / 16) = 3 blocks, not 2.
  std::vector<Tensor> inputs{
      Tensor(ATTN_F32, {1, 4, 40, 20}), Tensor(ATTN_F32, {1, 2, 40, 20}),
      Tensor(ATTN_F32, {1, 2, 40, 20}), Tensor(ATTN_F32, {1, 2, 2, 2, 20})};
  std::vector<Tensor> outputs;
  Status status = model->run(entry, inputs, outputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'kmeta' (#3) of entry 'layer': expected shape [B=1, 2, "
            "ceil(Lk/16)=3, 2, 20], got [1, 2, 2, 2, 20] (dim 2 must be "
            "ceil(Lk/16) = 3)");
}

} // namespace
