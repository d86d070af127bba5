//===- RaggedAttentionTest.cpp - SPEC §8 ragged softmax batches -----------===//
//
// A softmax layer with "layout": {"ragged": true}: sequences of 0 to 70
// query rows packed token-major with their offsets, decode rows (split-KV)
// and prefill rows (flash tiles) in one call, keys packed with their own
// offsets or in a paged cache, against the float64 reference run on each
// sequence alone, on the CPU and through the CUDA kernels (their CPU
// bodies, and a GPU when there is one).
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace attn::e2e {
namespace {

constexpr int64_t kD = 24, kDv = 20;

struct RaggedCase {
  std::string label;
  std::vector<int64_t> queries, keys;
  int64_t pageSize = 0; ///< 0: packed keys
  std::string mask = R"("causal")";
  bool gate = false, lse = false;
  /// A headwise gate [T, H, 1] instead of an elementwise one.
  bool headwise = false;
  /// SPEC §7's variants: a softcap of 20 with ALiBi, and a document
  /// mask_mod (doc_ids [B, most keys + 1]).
  bool softcapAlibi = false, documents = false;
  /// Attention sinks (randomSinks), after the gate.
  bool sinks = false;
  /// One latent cache: kv [Tk, Hkv, 24] (or kv_cache), the values its first
  /// 20 features.
  bool latent = false;
  int64_t heads = 4, kvHeads = 2;
  /// The storage dtype of q, k, v, the gate and o: f32, f16 or bf16.
  std::string dtype = "f32";
};

void PrintTo(const RaggedCase &c, std::ostream *os) { *os << c.label; }

std::string modelJson(const RaggedCase &c) {
  std::string layout = R"({"ragged": true)";
  if (c.pageSize)
    layout += R"(, "page_size": )" + std::to_string(c.pageSize);
  std::string json = R"({"model": "r", "dtype": ")" + c.dtype +
                     R"(", "layers": [{"name": "attn",
    "type": "attention", "num_heads": )" +
                     std::to_string(c.heads) + R"(, "num_kv_heads": )" +
                     std::to_string(c.kvHeads) +
                     R"(, "head_dim": 24, "value_dim": 20, "mask": )" + c.mask +
                     R"(, "layout": )" + layout + "}";
  if (c.gate)
    json +=
        c.headwise ? R"(, "gate": "headwise")" : R"(, "gate": "elementwise")";
  if (c.softcapAlibi)
    json += R"(, "softcap": 20, "score_mod": "alibi")";
  if (c.documents)
    json += R"(, "mask_mod": "document")";
  if (c.lse)
    json += R"(, "return_lse": true)";
  if (c.sinks)
    json += R"(, "sinks": true)";
  if (c.latent)
    json += R"(, "latent_kv": true)";
  return json + "}]}";
}

ref::IntTensor offsetsOf(const std::vector<int64_t> &lengths) {
  ref::IntTensor cu({static_cast<int64_t>(lengths.size()) + 1});
  cu(0) = 0;
  for (size_t b = 0; b < lengths.size(); ++b)
    cu(b + 1) = cu(b) + static_cast<int32_t>(lengths[b]);
  return cu;
}

/// Rows [first, first + n) of a packed [T, H, F] tensor as [1, H, n, F].
ref::Tensor unpack(const ref::Tensor &x, int64_t first, int64_t n) {
  ref::Tensor out({1, x.dim(1), n, x.dim(2)});
  for (int64_t h = 0; h < x.dim(1); ++h)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t f = 0; f < x.dim(2); ++f)
        out(0, h, t, f) = x(first + t, h, f);
  return out;
}

class RaggedAttention
    : public testing::TestWithParam<std::tuple<RaggedCase, Backend>> {};

TEST_P(RaggedAttention, MatchesEachSequenceAlone) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(modelJson(c)), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t B = static_cast<int64_t>(c.queries.size());
  const ref::IntTensor cuQ = offsetsOf(c.queries), cuK = offsetsOf(c.keys);
  const int64_t T = cuQ(B), Tk = cuK(B);
  const int64_t kH = c.heads, kHkv = c.kvHeads;
  // Inputs in [-1, 1] that the storage dtype holds exactly.
  const attn_dtype dtype = storageDtype(c.dtype);
  ref::Tensor q = randomF32({T, kH, kD}, rng, -1.0, 1.0, dtype);
  ref::Tensor k = randomF32({Tk, kHkv, kD}, rng, -1.0, 1.0, dtype);
  ref::Tensor v = c.latent ? leadingFeatures(k, kDv)
                           : randomF32({Tk, kHkv, kDv}, rng, -1.0, 1.0, dtype);
  ref::Tensor gate =
      randomF32({T, kH, c.headwise ? 1 : kDv}, rng, -1.0, 1.0, dtype);
  // Document ids per (sequence, position): runs of 1 .. 12 positions.
  const int64_t mostKeys = *std::max_element(c.keys.begin(), c.keys.end()) + 1;
  ref::IntTensor docs({B, mostKeys});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0, id = 0; j < mostKeys; ++j) {
      id += rng() % 6 == 0;
      docs(b, j) = static_cast<int32_t>(id);
    }

  std::vector<Tensor> inputs{toRuntime(q, dtype)};
  if (c.pageSize) {
    // Each sequence's pages at scattered places of a cache full of junk.
    const int64_t P = c.pageSize;
    int64_t pages = 1, mostPages = 1;
    for (int64_t n : c.keys) {
      pages += (n + P - 1) / P;
      mostPages = std::max(mostPages, (n + P - 1) / P);
    }
    std::vector<int32_t> order(pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    ref::Tensor kCache = ref::randomTensor({pages, P, kHkv, kD}, rng, -50, 50);
    ref::Tensor vCache = ref::randomTensor({pages, P, kHkv, kDv}, rng, -50, 50);
    ref::IntTensor table({B, mostPages});
    ref::IntTensor lengths({B});
    int64_t used = 0;
    for (int64_t b = 0; b < B; ++b) {
      lengths(b) = static_cast<int32_t>(c.keys[b]);
      for (int64_t p = 0; p < mostPages; ++p)
        table(b, p) = p * P < c.keys[b] ? order[used++] : -3;
      for (int64_t j = 0; j < c.keys[b]; ++j)
        for (int64_t h = 0; h < kHkv; ++h) {
          for (int64_t d = 0; d < kD; ++d)
            kCache(table(b, j / P), j % P, h, d) = k(cuK(b) + j, h, d);
          for (int64_t d = 0; d < kDv; ++d)
            vCache(table(b, j / P), j % P, h, d) = v(cuK(b) + j, h, d);
        }
    }
    inputs.push_back(toRuntime(kCache, dtype));
    if (!c.latent)
      inputs.push_back(toRuntime(vCache, dtype));
    inputs.push_back(intsToRuntime(table));
    inputs.push_back(intsToRuntime(lengths));
  } else {
    inputs.push_back(toRuntime(k, dtype));
    if (!c.latent)
      inputs.push_back(toRuntime(v, dtype));
  }
  if (c.gate)
    inputs.push_back(toRuntime(gate, dtype));
  const std::vector<double> sinks =
      c.sinks ? randomSinks(kH, rng) : std::vector<double>();
  if (c.sinks)
    inputs.push_back(sinksToRuntime(sinks));
  inputs.push_back(intsToRuntime(cuQ));
  if (!c.pageSize)
    inputs.push_back(intsToRuntime(cuK));
  if (c.documents)
    inputs.push_back(intsToRuntime(docs));
  std::vector<Tensor> outputs = runEntry(*model, "attn", inputs);
  ASSERT_EQ(outputs.size(), c.lse ? 2u : 1u);
  ASSERT_EQ(outputs[0].dtype, dtype);
  ref::Tensor o = fromRuntime(outputs[0]);
  ASSERT_EQ(o.shape(), (std::vector<int64_t>{T, kH, kDv}));
  // |o| <= max |v| = 1: f32's error, plus the output's rounding to a
  // storage dtype (half a unit in the last place) and P's, where a kernel
  // multiplies P in that dtype (at most as much again).
  const double tolerance =
      2e-4 + (dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype));

  const ref::Mask mask = referenceMask(c.mask);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t lq = c.queries[b], lk = c.keys[b];
    if (lq == 0)
      continue;
    ref::Tensor gb = unpack(gate, cuQ(b), lq);
    ref::Score score;
    score.sinks = sinks;
    if (c.softcapAlibi) {
      score.softcap = 20.0;
      score.scoreMod = [kH](double s, int64_t, int64_t h, int64_t qp,
                            int64_t kp) {
        return s - alibiSlope(h, kH) * static_cast<double>(qp - kp);
      };
    }
    if (c.documents)
      score.maskMod = [&docs, b](int64_t, int64_t, int64_t qp, int64_t kp) {
        return docs(b, qp) == docs(b, kp);
      };
    ref::AttentionResult expected =
        ref::sdpa(unpack(q, cuQ(b), lq), unpack(k, cuK(b), lk),
                  unpack(v, cuK(b), lk), mask, score, c.gate ? &gb : nullptr);
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        for (int64_t d = 0; d < kDv; ++d)
          EXPECT_NEAR(o(cuQ(b) + i, h, d), expected.output(0, h, i, d),
                      tolerance)
              << "o of sequence " << b << " head " << h << " row " << i;
        if (!c.lse)
          continue;
        const double lse = fromRuntime(outputs[1])(cuQ(b) + i, h),
                     want = expected.lse(0, h, i);
        if (std::isinf(want))
          EXPECT_TRUE(std::isinf(lse) && lse < 0) << "lse of an empty row";
        else
          // Relative to |lse| in a storage dtype: the CUDA kernels take q
          // scaled and rounded to it into the products.
          EXPECT_NEAR(lse, want, tolerance * std::max(1.0, std::abs(want)))
              << "lse of sequence " << b;
      }
  }
}

std::vector<RaggedCase> cases() {
  // Decode rows (1 .. 8: split-KV) and prefill rows (flash) mixed, an
  // empty sequence, more keys than queries.
  const std::vector<int64_t> queries{1, 37, 0, 8, 9, 1, 70};
  const std::vector<int64_t> keys{600, 37, 5, 40, 100, 1, 75};
  std::vector<RaggedCase> all;
  all.push_back({"packed", queries, keys});
  all.push_back(
      {"packed_gate_lse", queries, keys, 0, R"("causal")", true, true});
  all.push_back(
      {"packed_window", queries, keys, 0, R"({"sliding_window": 16})"});
  // A window wider than the head dim (24), which dim 2 of the packed rows
  // is: the window must not be taken for one that covers every key.
  all.push_back({"packed_window_past_head_dim",
                 {1, 9, 40, 0},
                 {300, 709, 300, 40},
                 0,
                 R"({"sliding_window": 100})",
                 false,
                 true});
  all.push_back(
      {"packed_no_key", {3, 50}, {0, 60}, 0, R"("none")", false, true});
  all.push_back({"decode_only", {1, 1, 1, 1, 1}, {1, 2, 1100, 3, 64}});
  for (int64_t P : {1, 16, 5})
    all.push_back({"paged_p" + std::to_string(P), queries, keys, P});
  all.push_back(
      {"paged_gate_lse", queries, keys, 16, R"("causal")", true, true});
  // Many long decode rows: the plan makes longer key ranges, not more.
  all.push_back({"many_decode_rows", std::vector<int64_t>(40, 2),
                 std::vector<int64_t>(40, 900), 16});
  // The variants of SPEC §7, evaluated per key over ragged rows.
  RaggedCase variants{"softcap_alibi_headwise", queries, keys};
  variants.gate = variants.headwise = variants.softcapAlibi = true;
  all.push_back(variants);
  RaggedCase documents{"documents_paged_lse", queries, keys, 5};
  documents.documents = documents.lse = true;
  all.push_back(documents);
  // More sequences than the CUDA plan kernel's threads (128): each thread
  // plans a share of three, after the shares before it.
  std::vector<int64_t> manyQueries, manyKeys;
  for (int64_t seq = 0; seq < 301; ++seq) {
    manyQueries.push_back(seq % 7 == 3 ? 12 : seq % 5 == 0 ? 0 : 1 + seq % 3);
    manyKeys.push_back(manyQueries.back() + 3 * (seq % 11) + (seq % 9) * 40);
  }
  all.push_back({"many_sequences_paged", manyQueries, manyKeys, 16});
  // A kv group wider than the CUDA decode kernel's tile of 16 rows.
  RaggedCase wide{"gqa_group_20", {1, 3, 40}, {300, 20, 41}};
  wide.heads = 20;
  wide.kvHeads = 1;
  all.push_back(wide);
  // A kv group of 10 over a paged cache of 2 kv heads, whose CPU split-KV
  // workgroups serve both kv heads with the head tiles (4, 4, then 2) the
  // inner loop of their products: pages of 7, decode and extend rows.
  for (std::string dtype : {"f32", "bf16"}) {
    RaggedCase pagedGroups{
        "paged_gqa_10_by_2_" + dtype, {1, 3, 40, 1}, {300, 20, 41, 1}, 7};
    pagedGroups.heads = 20;
    pagedGroups.kvHeads = 2;
    pagedGroups.dtype = dtype;
    all.push_back(pagedGroups);
  }
  // Attention sinks over packed and paged keys, with rows that see no key
  // (o = 0, lse the sink) and the lse they change.
  RaggedCase sinks{"packed_sinks_gate_lse", queries, keys};
  sinks.gate = sinks.lse = sinks.sinks = true;
  all.push_back(sinks);
  RaggedCase sinksNoKey{
      "packed_sinks_no_key", {3, 50}, {0, 60}, 0, R"("none")"};
  sinksNoKey.lse = sinksNoKey.sinks = true;
  all.push_back(sinksNoKey);
  RaggedCase pagedSinks{"paged_sinks_window_lse", queries, keys, 5,
                        R"({"sliding_window": 16})"};
  pagedSinks.lse = pagedSinks.sinks = true;
  pagedSinks.heads = 6;
  pagedSinks.kvHeads = 3;
  all.push_back(pagedSinks);
  // Chunked attention per sequence, packed and paged.
  all.push_back(
      {"packed_chunked", queries, keys, 0, R"({"chunked": 16})", true, true});
  all.push_back({"paged_chunked_p5", queries, keys, 5, R"({"chunked": 9})"});
  // Storage dtypes (on AVX512-BF16 the CPU kernels' bf16 pair products,
  // whose pairs of keys straddle pages of 5): packed and paged keys, a
  // gate, lse.
  RaggedCase packedBf16{"packed_gate_lse_bf16", queries, keys, 0,
                        R"("causal")",          true,    true};
  packedBf16.dtype = "bf16";
  all.push_back(packedBf16);
  RaggedCase pagedBf16{"paged_p5_bf16", queries, keys, 5};
  pagedBf16.dtype = "bf16";
  all.push_back(pagedBf16);
  RaggedCase pagedF16{"paged_p16_window_f16", queries, keys, 16,
                      R"({"sliding_window": 16})"};
  pagedF16.dtype = "f16";
  all.push_back(pagedF16);
  // A latent cache (MLA): packed, and paged with one kv head and a group of
  // 16 query heads (DeepSeek's decode), decode and extend rows mixed.
  RaggedCase latent{"packed_latent_gate_lse", queries, keys};
  latent.gate = latent.lse = latent.latent = true;
  all.push_back(latent);
  RaggedCase pagedLatent{"paged_latent_mqa16_p5", queries, keys, 5};
  pagedLatent.latent = true;
  pagedLatent.heads = 16;
  pagedLatent.kvHeads = 1;
  all.push_back(pagedLatent);
  return all;
}

/// Batches drawn at random (from a fixed seed): sequences of every kind
/// of row count in any mix, packed or paged keys with page sizes that
/// divide nothing, and the options in combinations nobody picked.
std::vector<RaggedCase> randomCases(int count) {
  CaseDraws draw;
  std::vector<RaggedCase> all;
  for (int i = 0; i < count; ++i) {
    RaggedCase c;
    c.label = "random" + std::to_string(i);
    const int64_t sequences = draw.pick({1, 2, 3, 5, 9});
    for (int64_t b = 0; b < sequences; ++b) {
      c.queries.push_back(draw.pick({0, 1, 1, 2, 3, 8, 9, 17, 40, 70}));
      c.keys.push_back(c.queries.back() +
                       draw.pick({0, 0, 1, 5, 40, 300, 700}));
    }
    c.pageSize = draw.pick({0, 0, 1, 5, 7, 16});
    const int64_t window = draw.pick({1, 3, 16, 100});
    c.mask = draw.chance(40) ? R"("causal")"
             : draw.chance(50)
                 ? R"("none")"
                 : R"({"sliding_window": )" + std::to_string(window) + "}";
    if (draw.chance(20))
      c.mask = R"({"chunked": )" + std::to_string(window) + "}";
    c.gate = draw.chance(40);
    c.headwise = c.gate && draw.chance(50);
    c.lse = draw.chance(40);
    c.softcapAlibi = draw.chance(20);
    c.documents = draw.chance(20);
    c.sinks = draw.chance(30);
    c.latent = draw.chance(15);
    switch (draw.rng() % 4) {
    case 0:
      c.heads = 3, c.kvHeads = 1;
      break;
    case 1:
      c.heads = 6, c.kvHeads = 3;
      break;
    case 2:
      c.heads = 20, c.kvHeads = 1;
      break;
    default:
      break; // 4 heads, 2 kv heads
    }
    all.push_back(c);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Random, RaggedAttention,
    testing::Combine(testing::ValuesIn(randomCases(randomCaseCount(24))),
                     allBackends()),
    LabelAndBackend());

INSTANTIATE_TEST_SUITE_P(Cases, RaggedAttention,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend());

/// A draft tree of T nodes per sequence over a ragged batch's packed keys
/// (no "page_size"): sequence b's keys are its prefix then its tree's T.
struct PackedTreeCase {
  std::string label;
  std::vector<int64_t> prefixes;
  int64_t nodes = 1;
  std::string mask = R"("causal")";
  bool gate = false, lse = false, sinks = false;
  /// One latent cache: kv [Tk, Hkv, 24], the values its first 20 features.
  bool latent = false;
  std::string dtype = "f32";
};

void PrintTo(const PackedTreeCase &c, std::ostream *os) { *os << c.label; }

class PackedTree
    : public testing::TestWithParam<std::tuple<PackedTreeCase, Backend>> {};

// <layer>.tree and <layer>.compact over packed keys, against the reference
// tree attention and compaction of each sequence's own keys.
TEST_P(PackedTree, MatchesEachSequencesTreeAndCompacts) {
  const auto &[c, backend] = GetParam();
  constexpr int64_t kH = 4, kHkv = 2;
  std::string json = R"({"model": "t", "dtype": ")" + c.dtype +
                     R"(", "layers": [{"name": "attn", "type": "attention",
    "num_heads": 4, "num_kv_heads": 2, "head_dim": 24, "value_dim": 20,
    "tree": true, "layout": {"ragged": true}, "mask": )" +
                     c.mask;
  if (c.gate)
    json += R"(, "gate": "elementwise")";
  if (c.lse)
    json += R"(, "return_lse": true)";
  if (c.sinks)
    json += R"(, "sinks": true)";
  if (c.latent)
    json += R"(, "latent_kv": true)";
  json += "}]}";
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(json), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t B = static_cast<int64_t>(c.prefixes.size()), T = c.nodes;
  std::vector<int64_t> lengths;
  for (int64_t prefix : c.prefixes)
    lengths.push_back(prefix + T);
  const ref::IntTensor cuK = offsetsOf(lengths);
  const int64_t Tk = cuK(B);
  const attn_dtype dtype = storageDtype(c.dtype);
  ref::Tensor q = randomF32({B, kH, T, kD}, rng, -1.0, 1.0, dtype);
  ref::Tensor k = randomF32({Tk, kHkv, kD}, rng, -1.0, 1.0, dtype);
  ref::Tensor v = c.latent ? leadingFeatures(k, kDv)
                           : randomF32({Tk, kHkv, kDv}, rng, -1.0, 1.0, dtype);
  ref::Tensor gate = randomF32({B, kH, T, kDv}, rng, -1.0, 1.0, dtype);
  ref::IntTensor parents = randomParents(B, T, rng);
  const std::vector<double> sinks =
      c.sinks ? randomSinks(kH, rng) : std::vector<double>();

  std::vector<Tensor> inputs{toRuntime(q, dtype), toRuntime(k, dtype)};
  if (!c.latent)
    inputs.push_back(toRuntime(v, dtype));
  inputs.push_back(intsToRuntime(parents));
  if (c.gate)
    inputs.push_back(toRuntime(gate, dtype));
  if (c.sinks)
    inputs.push_back(sinksToRuntime(sinks));
  inputs.push_back(intsToRuntime(cuK));
  std::vector<Tensor> outputs = runEntry(*model, "attn.tree", inputs);
  ASSERT_EQ(outputs.size(), c.lse ? 2u : 1u);
  ref::Tensor o = fromRuntime(outputs[0]);
  ASSERT_EQ(o.shape(), (std::vector<int64_t>{B, kH, T, kDv}));
  const double tolerance =
      2e-4 + (dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype));
  const ref::Mask mask = referenceMask(c.mask);
  for (int64_t b = 0; b < B; ++b) {
    const ref::Tensor gb = batchRow(gate, b);
    ref::Score score;
    score.sinks = sinks;
    ref::AttentionResult expected =
        ref::treeSdpa(batchRow(q, b), unpack(k, cuK(b), lengths[b]),
                      unpack(v, cuK(b), lengths[b]), batchRow(parents, b), mask,
                      score, c.gate ? &gb : nullptr);
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < kDv; ++d)
          EXPECT_NEAR(o(b, h, t, d), expected.output(0, h, t, d), tolerance)
              << "o of sequence " << b << " head " << h << " node " << t;
        if (!c.lse)
          continue;
        const double lse = fromRuntime(outputs[1])(b, h, t),
                     want = expected.lse(0, h, t);
        EXPECT_NEAR(lse, want, tolerance * std::max(1.0, std::abs(want)))
            << "lse of sequence " << b << " head " << h << " node " << t;
      }
  }

  // Compaction: each sequence accepts the path from its root to a random
  // node, whose rows move right after its prefix.
  ref::IntTensor path({B, T}), length({B});
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> nodes;
    for (int32_t t = static_cast<int32_t>(rng() % T); t >= 0; t = parents(b, t))
      nodes.insert(nodes.begin(), t);
    length(b) = static_cast<int32_t>(nodes.size());
    for (int64_t n = 0; n < T; ++n)
      path(b, n) = n < length(b) ? nodes[n] : -1;
  }
  std::vector<Tensor> compactInputs{toRuntime(k, dtype)};
  if (!c.latent)
    compactInputs.push_back(toRuntime(v, dtype));
  for (const ref::IntTensor *ints :
       std::initializer_list<const ref::IntTensor *>{&path, &length, &cuK})
    compactInputs.push_back(intsToRuntime(*ints));
  std::vector<Tensor> compacted =
      runEntry(*model, "attn.compact", compactInputs);
  ASSERT_EQ(compacted.size(), c.latent ? 1u : 2u);
  std::vector<std::pair<const ref::Tensor *, ref::Tensor>> checks{
      {&k, fromRuntime(compacted[0])}};
  if (!c.latent)
    checks.push_back({&v, fromRuntime(compacted[1])});
  for (const auto &[before, after] : checks)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < lengths[b]; ++j) {
        // Row P + n (n < length) takes row P + path[n]; the others stay.
        const int64_t n = j - c.prefixes[b];
        const int64_t source =
            n >= 0 && n < length(b) ? c.prefixes[b] + path(b, n) : j;
        for (int64_t h = 0; h < kHkv; ++h)
          for (int64_t d = 0; d < before->dim(2); ++d)
            ASSERT_EQ(after(cuK(b) + j, h, d), (*before)(cuK(b) + source, h, d))
                << "row " << j << " of sequence " << b;
      }
}

std::vector<PackedTreeCase> packedTreeCases() {
  std::vector<PackedTreeCase> all;
  // A few nodes (split-KV over the prefix), an empty prefix, one node.
  all.push_back({"few_nodes", {37, 0, 100}, 6});
  all.push_back({"one_node", {5, 0}, 1});
  // More nodes than decode's rows: the flash kernel tiles the prefix.
  all.push_back({"many_nodes", {20, 70, 0}, 40});
  all.push_back({"window", {50, 3}, 12, R"({"sliding_window": 8})"});
  all.push_back({"chunked", {37, 3, 60}, 15, R"({"chunked": 16})"});
  PackedTreeCase gated{"gate_lse_sinks", {37, 0, 300}, 9};
  gated.gate = gated.lse = gated.sinks = true;
  all.push_back(gated);
  PackedTreeCase latent{"latent", {37, 0, 60}, 13};
  latent.latent = true;
  all.push_back(latent);
  PackedTreeCase bf16{"gate_bf16", {41, 2}, 7};
  bf16.gate = true;
  bf16.dtype = "bf16";
  all.push_back(bf16);
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, PackedTree,
                         testing::Combine(testing::ValuesIn(packedTreeCases()),
                                          allBackends()),
                         LabelAndBackend());

} // namespace
} // namespace attn::e2e
