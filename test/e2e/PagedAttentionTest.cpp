//===- PagedAttentionTest.cpp - SPEC §8 paged KV caches, every backend ----===//
//
// A softmax layer with "layout": {"page_size": P}: each sequence's keys and
// values in pages scattered through a cache whose other slots hold junk,
// sequences of different lengths in one batch (decode through split-KV,
// prefill through the flash kernel; an empty sequence), page sizes 1, 16
// and 5, GQA, gates, windows and lse. Checked on the CPU kernels, the CUDA
// kernels' CPU bodies and (when there is one) a GPU against the float64
// reference run on each sequence's own keys.
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>

namespace attn::e2e {
namespace {

constexpr int64_t kH = 4, kHkv = 2, kD = 24, kDv = 20;

struct PagedCase {
  std::string label;
  int64_t pageSize = 16;
  std::vector<int64_t> keys;        ///< seq_lens
  int64_t queries = 1;              ///< Lq
  std::string mask = R"("causal")"; ///< as the description writes it
  std::string gate;                 ///< "", "elementwise", "headwise"
  bool lse = false;
};

std::string modelJson(const PagedCase &c) {
  std::string json = R"({"model": "p", "layers": [{"name": "attn",
    "type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 24,
    "value_dim": 20, "mask": )" +
                     c.mask + R"(, "layout": {"page_size": )" +
                     std::to_string(c.pageSize) + "}";
  if (!c.gate.empty())
    json += R"(, "gate": ")" + c.gate + "\"";
  if (c.lse)
    json += R"(, "return_lse": true)";
  return json + "}]}";
}

class PagedAttention
    : public testing::TestWithParam<std::tuple<PagedCase, Backend>> {};

TEST_P(PagedAttention, MatchesEachSequencesKeys) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(modelJson(c)), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t B = static_cast<int64_t>(c.keys.size()), P = c.pageSize;
  const int64_t Lq = c.queries;

  // Pages in a random order, two spare ones, junk everywhere first.
  std::vector<int64_t> needed;
  int64_t mostPages = 0, pages = 2;
  for (int64_t n : c.keys) {
    needed.push_back((n + P - 1) / P);
    mostPages = std::max(mostPages, needed.back());
    pages += needed.back();
  }
  std::vector<int32_t> order(pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  ref::Tensor kCache = ref::randomTensor({pages, P, kHkv, kD}, rng, -50, 50);
  ref::Tensor vCache = ref::randomTensor({pages, P, kHkv, kDv}, rng, -50, 50);
  ref::IntTensor table({B, mostPages + 1});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p <= mostPages; ++p)
      table(b, p) = static_cast<int32_t>(1000 + p); // junk past the pages
  ref::IntTensor lengths({B});
  ref::Tensor q = ref::randomTensor({B, kH, Lq, kD}, rng);
  ref::Tensor gate = ref::randomTensor(
      {B, kH, Lq, c.gate == "headwise" ? int64_t{1} : kDv}, rng);
  std::vector<ref::Tensor> keys, values;
  int64_t used = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = c.keys[b];
    lengths(b) = static_cast<int32_t>(n);
    ref::Tensor k = ref::randomTensor({1, kHkv, n, kD}, rng);
    ref::Tensor v = ref::randomTensor({1, kHkv, n, kDv}, rng);
    for (int64_t p = 0; p < needed[b]; ++p)
      table(b, p) = order[used++];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t h = 0; h < kHkv; ++h) {
        const int64_t page = table(b, j / P), slot = j % P;
        for (int64_t d = 0; d < kD; ++d)
          kCache(page, slot, h, d) = k(0, h, j, d);
        for (int64_t d = 0; d < kDv; ++d)
          vCache(page, slot, h, d) = v(0, h, j, d);
      }
    keys.push_back(std::move(k));
    values.push_back(std::move(v));
  }

  std::vector<Tensor> inputs{toRuntime(q), toRuntime(kCache), toRuntime(vCache),
                             intsToRuntime(table), intsToRuntime(lengths)};
  if (!c.gate.empty())
    inputs.push_back(toRuntime(gate));
  std::vector<Tensor> outputs = runEntry(*model, "attn", inputs);
  ASSERT_EQ(outputs.size(), c.lse ? 2u : 1u);
  ref::Tensor o = fromRuntime(outputs[0]);

  const ref::Mask mask = referenceMask(c.mask);
  for (int64_t b = 0; b < B; ++b) {
    ref::Tensor qb({1, kH, Lq, kD}), gb({1, kH, Lq, gate.dim(3)});
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        for (int64_t d = 0; d < kD; ++d)
          qb(0, h, i, d) = q(b, h, i, d);
        for (int64_t d = 0; d < gate.dim(3); ++d)
          gb(0, h, i, d) = gate(b, h, i, d);
      }
    ref::AttentionResult expected = ref::sdpa(qb, keys[b], values[b], mask, {},
                                              c.gate.empty() ? nullptr : &gb);
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        for (int64_t d = 0; d < kDv; ++d)
          EXPECT_NEAR(o(b, h, i, d), expected.output(0, h, i, d), 2e-4)
              << "o of sequence " << b << " head " << h << " row " << i;
        if (!c.lse)
          continue;
        const double lse = fromRuntime(outputs[1])(b, h, i),
                     want = expected.lse(0, h, i);
        if (std::isinf(want))
          EXPECT_TRUE(std::isinf(lse) && lse < 0) << "lse of an empty row";
        else
          EXPECT_NEAR(lse, want, 2e-4) << "lse of sequence " << b;
      }
  }
}

class PagedAppend : public testing::TestWithParam<Backend> {};

// <layer>.append writes each new token's rows to its flat slot of both
// caches, in place; slot -1 skips a token and every other slot keeps its
// value.
TEST_P(PagedAppend, WritesEachTokenToItsSlot) {
  const Backend backend = GetParam();
  PagedCase c;
  c.pageSize = 4;
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(modelJson(c)), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(7);
  const int64_t T = 7, pages = 5;
  ref::Tensor kNew = randomF32({T, kHkv, kD}, rng, -1, 1);
  ref::Tensor vNew = randomF32({T, kHkv, kDv}, rng, -1, 1);
  ref::IntTensor slots({T});
  const int32_t chosen[T] = {13, 2, -1, 19, 0, 7, 8};
  for (int64_t t = 0; t < T; ++t)
    slots(t) = chosen[t];
  ref::Tensor kCache = randomF32({pages, 4, kHkv, kD}, rng, -1, 1);
  ref::Tensor vCache = randomF32({pages, 4, kHkv, kDv}, rng, -1, 1);
  ref::Tensor kExpected = kCache, vExpected = vCache;
  for (int64_t t = 0; t < T; ++t) {
    if (chosen[t] < 0)
      continue;
    const int64_t page = chosen[t] / 4, offset = chosen[t] % 4;
    for (int64_t h = 0; h < kHkv; ++h) {
      for (int64_t d = 0; d < kD; ++d)
        kExpected(page, offset, h, d) = kNew(t, h, d);
      for (int64_t d = 0; d < kDv; ++d)
        vExpected(page, offset, h, d) = vNew(t, h, d);
    }
  }
  std::vector<Tensor> inputs{toRuntime(kNew), toRuntime(vNew),
                             intsToRuntime(slots), toRuntime(kCache),
                             toRuntime(vCache)};
  std::vector<Tensor> outputs = runEntry(*model, "attn.append", inputs);
  EXPECT_TRUE(outputs.empty());
  EXPECT_EQ(ref::maxRelativeError(fromRuntime(inputs[3]), kExpected), 0.0);
  EXPECT_EQ(ref::maxRelativeError(fromRuntime(inputs[4]), vExpected), 0.0);
}

// A latent cache's append (latent_kv): kv_new, slots, kv_cache, the one
// cache written in place.
TEST_P(PagedAppend, WritesEachTokenToItsSlotOfALatentCache) {
  const Backend backend = GetParam();
  const int64_t P = 3, T = 6, pages = 4, D = 40;
  std::string skip;
  std::unique_ptr<Model> model = compileAndLoadFor(
      backend, modelDescription(R"({"model": "p", "layers": [{"name": "attn",
        "type": "attention", "num_heads": 8, "num_kv_heads": 1,
        "head_dim": 40, "value_dim": 32, "latent_kv": true,
        "layout": {"page_size": 3}}]})"),
      2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(8);
  ref::Tensor kvNew = randomF32({T, 1, D}, rng, -1, 1);
  ref::IntTensor slots({T});
  const int32_t chosen[T] = {11, -1, 0, 5, 4, 9};
  for (int64_t t = 0; t < T; ++t)
    slots(t) = chosen[t];
  ref::Tensor kvCache = randomF32({pages, P, 1, D}, rng, -1, 1);
  ref::Tensor expected = kvCache;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; chosen[t] >= 0 && d < D; ++d)
      expected(chosen[t] / P, chosen[t] % P, 0, d) = kvNew(t, 0, d);
  std::vector<Tensor> inputs{toRuntime(kvNew), intsToRuntime(slots),
                             toRuntime(kvCache)};
  std::vector<Tensor> outputs = runEntry(*model, "attn.append", inputs);
  EXPECT_TRUE(outputs.empty());
  EXPECT_EQ(ref::maxRelativeError(fromRuntime(inputs[2]), expected), 0.0);
}

// <layer>.meta_update, after an append with the same slots: each page a
// slot writes gets its bounds again over its slots 0 .. o, o the highest
// offset written to it (slots past it, which a rolled-back draft may have
// left, are left out); slot -1 writes nothing, and every other page keeps
// its bounds bit for bit. Page sizes 1, 16 and 5; decode (a slot per
// sequence), a prefill across pages, a page written out of order, and no
// tokens.
TEST_P(PagedAppend, RefreshesTheBoundsOfThePagesItWrote) {
  const Backend backend = GetParam();
  struct UpdateCase {
    int64_t pageSize, pages;
    std::vector<int32_t> slots;
  };
  const UpdateCase cases[] = {
      {16, 6, {16 * 3 + 7, 16 * 0 + 15, -1, 16 * 5 + 0}},
      {16, 5, {}},
      {5,
       9,
       {5 * 2 + 3, 5 * 2 + 4, 5 * 7 + 0, 5 * 7 + 1, 5 * 7 + 2, 5 * 7 + 3,
        5 * 7 + 4, 5 * 4 + 0, 5 * 4 + 1, -1, 5 * 8 + 4, 5 * 8 + 1}},
      {1, 4, {3, -1, 0, 2}},
  };
  for (const UpdateCase &c : cases) {
    SCOPED_TRACE("page size " + std::to_string(c.pageSize) + ", " +
                 std::to_string(c.slots.size()) + " tokens");
    const int64_t P = c.pageSize, T = static_cast<int64_t>(c.slots.size());
    std::string skip;
    std::unique_ptr<Model> model = compileAndLoadFor(
        backend,
        modelDescription(R"({"model": "p", "layers": [{"name": "attn",
          "type": "attention", "num_heads": 4, "num_kv_heads": 2,
          "head_dim": 24, "value_dim": 20, "sparsity": {"method": "top_k",
          "top_k": 2}, "layout": {"page_size": )" +
                         std::to_string(P) + "}}]}"),
        2, skip);
    if (!skip.empty())
      GTEST_SKIP() << skip;
    ASSERT_TRUE(model);
    std::mt19937_64 rng(11 + P);
    ref::Tensor kCache = randomF32({c.pages, P, kHkv, kD}, rng, -3, 3);
    ref::Tensor meta = randomF32({c.pages, 2, kHkv, kD}, rng, -3, 3);
    ref::IntTensor slots({T});
    std::vector<int64_t> fill(c.pages, 0); // the highest offset, + 1
    for (int64_t t = 0; t < T; ++t) {
      slots(t) = c.slots[t];
      if (c.slots[t] >= 0)
        fill[c.slots[t] / P] =
            std::max<int64_t>(fill[c.slots[t] / P], c.slots[t] % P + 1);
    }
    ref::Tensor expected = meta;
    for (int64_t page = 0; page < c.pages; ++page)
      for (int64_t h = 0; fill[page] && h < kHkv; ++h)
        for (int64_t d = 0; d < kD; ++d) {
          double low = INFINITY, high = -INFINITY;
          for (int64_t slot = 0; slot < fill[page]; ++slot) {
            low = std::min(low, kCache(page, slot, h, d));
            high = std::max(high, kCache(page, slot, h, d));
          }
          expected(page, 0, h, d) = low;
          expected(page, 1, h, d) = high;
        }
    std::vector<Tensor> inputs{toRuntime(kCache), intsToRuntime(slots),
                               toRuntime(meta)};
    std::vector<Tensor> outputs = runEntry(*model, "attn.meta_update", inputs);
    EXPECT_TRUE(outputs.empty());
    EXPECT_EQ(ref::maxRelativeError(fromRuntime(inputs[2]), expected), 0.0);
    EXPECT_EQ(ref::maxRelativeError(fromRuntime(inputs[0]), kCache), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PagedAppend, allBackends(),
                         [](const auto &info) {
                           return std::string(backendName(info.param));
                         });

struct PagedTreeCase {
  std::string label;
  int64_t pageSize;
  std::vector<int64_t> prefixes;
  int64_t nodes;
  std::optional<int64_t> window;
  /// A chunked mask of chunks of this many positions (instead of a window).
  std::optional<int64_t> chunk = std::nullopt;
  /// One latent cache (latent_kv), the values its keys' first features.
  bool latent = false;
};

class PagedTree
    : public testing::TestWithParam<std::tuple<PagedTreeCase, Backend>> {};

// <layer>.tree over a paged cache: each sequence's last T keys are its
// tree's; checked against the reference tree attention on each sequence's
// own keys.
TEST_P(PagedTree, MatchesEachSequencesTree) {
  const auto &[c, backend] = GetParam();
  std::string json = R"({"model": "t", "layers": [{"name": "attn",
    "type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 24,
    "value_dim": 20, "tree": true, "layout": {"page_size": )" +
                     std::to_string(c.pageSize) + "}";
  if (c.window)
    json +=
        R"(, "mask": {"sliding_window": )" + std::to_string(*c.window) + "}";
  if (c.chunk)
    json += R"(, "mask": {"chunked": )" + std::to_string(*c.chunk) + "}";
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
  const int64_t B = static_cast<int64_t>(c.prefixes.size()), P = c.pageSize;
  const int64_t T = c.nodes;
  int64_t pages = 1, mostPages = 1;
  for (int64_t prefix : c.prefixes) {
    pages += (prefix + T + P - 1) / P;
    mostPages = std::max(mostPages, (prefix + T + P - 1) / P);
  }
  std::vector<int32_t> order(pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  ref::Tensor kCache = ref::randomTensor({pages, P, kHkv, kD}, rng, -50, 50);
  ref::Tensor vCache = ref::randomTensor({pages, P, kHkv, kDv}, rng, -50, 50);
  ref::IntTensor table({B, mostPages}), lengths({B});
  ref::Tensor q = ref::randomTensor({B, kH, T, kD}, rng);
  ref::IntTensor parents = randomParents(B, T, rng, /*chain=*/false);
  std::vector<ref::Tensor> keys, values;
  int64_t used = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = c.prefixes[b] + T;
    lengths(b) = static_cast<int32_t>(n);
    for (int64_t p = 0; p < mostPages; ++p)
      table(b, p) = p * P < n ? order[used++] : -1;
    ref::Tensor k = ref::randomTensor({1, kHkv, n, kD}, rng);
    ref::Tensor v = c.latent ? leadingFeatures(k, kDv)
                             : ref::randomTensor({1, kHkv, n, kDv}, rng);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t h = 0; h < kHkv; ++h) {
        for (int64_t d = 0; d < kD; ++d)
          kCache(table(b, j / P), j % P, h, d) = k(0, h, j, d);
        for (int64_t d = 0; d < kDv; ++d)
          vCache(table(b, j / P), j % P, h, d) = v(0, h, j, d);
      }
    keys.push_back(std::move(k));
    values.push_back(std::move(v));
  }
  std::vector<Tensor> inputs{toRuntime(q), toRuntime(kCache)};
  if (!c.latent)
    inputs.push_back(toRuntime(vCache));
  for (const ref::IntTensor *ints : {&table, &lengths, &parents})
    inputs.push_back(intsToRuntime(*ints));
  std::vector<Tensor> outputs = runEntry(*model, "attn.tree", inputs);
  ASSERT_EQ(outputs.size(), 1u);
  ref::Tensor o = fromRuntime(outputs[0]);
  for (int64_t b = 0; b < B; ++b) {
    const ref::Mask mask = c.chunk    ? ref::Mask::chunked(*c.chunk)
                           : c.window ? ref::Mask::slidingWindow(*c.window)
                                      : ref::Mask::causal();
    ref::AttentionResult expected = ref::treeSdpa(
        batchRow(q, b), keys[b], values[b], batchRow(parents, b), mask);
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < kDv; ++d)
          EXPECT_NEAR(o(b, h, t, d), expected.output(0, h, t, d), 2e-4)
              << "o of sequence " << b << " head " << h << " node " << t;
  }
}

std::vector<PagedTreeCase> treeCases() {
  return {{"few_nodes_p16", 16, {37, 0, 100}, 6, std::nullopt},
          {"few_nodes_p5", 5, {37, 3}, 6, std::nullopt},
          {"many_nodes_p16", 16, {20, 70}, 40, std::nullopt},
          {"window_p1", 1, {50, 3}, 12, 8},
          {"chunked_p5", 5, {37, 3, 60}, 15, std::nullopt, 16},
          {"latent_p5",
           5,
           {37, 0, 60},
           13,
           std::nullopt,
           std::nullopt,
           /*latent=*/true}};
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedTree,
                         testing::Combine(testing::ValuesIn(treeCases()),
                                          allBackends()),
                         LabelAndBackend());

struct PagedSparseCase {
  std::string label;
  int64_t pageSize;
  std::vector<int64_t> keys; ///< seq_lens
  int64_t queries;           ///< Lq
  /// The "sparsity" object of the description (SPEC §3), without
  /// block_size: over pages the blocks are the pages.
  std::string sparsity;
  int64_t topK = 0; ///< 0: top-p alone
  int64_t sink = 0, local = 0;
  std::optional<ref::TopP> topP;
  std::string mask = R"("causal")";
  std::string gate;
  /// A ragged batch's query rows per sequence (`queries` is then unused);
  /// empty: [B, H, Lq, D] queries.
  std::vector<int64_t> rows = {};
  /// One latent cache (latent_kv), the values its keys' first features.
  bool latent = false;
  /// The threads the model runs on: more than the selection workgroups
  /// (batch x rows: one serves every kv head of a page) bound the
  /// candidates in chunks first.
  int threads = 2;
};

class PagedSparsity
    : public testing::TestWithParam<std::tuple<PagedSparseCase, Backend>> {};

// Sparsity over a paged cache (SPEC §8): <layer>.meta bounds each page's
// keys (junk past a sequence's keys left out), and <layer> selects pages
// (top-k) and tokens (top-p) and attends to them, equal to the reference
// selection and sparse attention on each sequence's own keys with blocks
// of the page size; in a ragged batch too, each sequence with its own
// query rows packed token-major.
TEST_P(PagedSparsity, MatchesEachSequencesSelection) {
  const auto &[c, backend] = GetParam();
  const bool ragged = !c.rows.empty();
  std::string json = R"({"model": "s", "layers": [{"name": "attn",
    "type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 24,
    "value_dim": 20, "mask": )" +
                     c.mask + R"(, "sparsity": )" + c.sparsity +
                     R"(, "layout": {"page_size": )" +
                     std::to_string(c.pageSize) +
                     (ragged ? R"(, "ragged": true})" : "}");
  if (!c.gate.empty())
    json += R"(, "gate": ")" + c.gate + "\"";
  if (c.latent)
    json += R"(, "latent_kv": true)";
  json += "}]}";
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(json), c.threads, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t B = static_cast<int64_t>(c.keys.size()), P = c.pageSize;
  auto rowsOf = [&](int64_t b) { return ragged ? c.rows[b] : c.queries; };
  int64_t pages = 3, mostPages = 1;
  for (int64_t n : c.keys) {
    pages += (n + P - 1) / P;
    mostPages = std::max(mostPages, (n + P - 1) / P);
  }
  std::vector<int32_t> order(pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  // Junk far outside the keys' range: a bound that took it in would
  // rank its page first.
  ref::Tensor kCache = ref::randomTensor({pages, P, kHkv, kD}, rng, -50, 50);
  ref::Tensor vCache = ref::randomTensor({pages, P, kHkv, kDv}, rng, -50, 50);
  ref::IntTensor table({B, mostPages + 1}), lengths({B});
  // Each sequence's queries and gate [1, H, Lq_b, F], packed below.
  const int64_t gateDim = c.gate == "headwise" ? 1 : kDv;
  std::vector<ref::Tensor> queries, gates;
  for (int64_t b = 0; b < B; ++b) {
    queries.push_back(ref::randomTensor({1, kH, rowsOf(b), kD}, rng));
    gates.push_back(ref::randomTensor({1, kH, rowsOf(b), gateDim}, rng));
  }
  std::vector<ref::Tensor> keys, values;
  int64_t used = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = c.keys[b];
    lengths(b) = static_cast<int32_t>(n);
    for (int64_t p = 0; p <= mostPages; ++p)
      table(b, p) = p * P < n ? order[used++] : 999; // junk past the pages
    ref::Tensor k = ref::randomTensor({1, kHkv, n, kD}, rng);
    ref::Tensor v = c.latent ? leadingFeatures(k, kDv)
                             : ref::randomTensor({1, kHkv, n, kDv}, rng);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t h = 0; h < kHkv; ++h) {
        for (int64_t d = 0; d < kD; ++d)
          kCache(table(b, j / P), j % P, h, d) = k(0, h, j, d);
        for (int64_t d = 0; d < kDv; ++d)
          vCache(table(b, j / P), j % P, h, d) = v(0, h, j, d);
      }
    keys.push_back(std::move(k));
    values.push_back(std::move(v));
  }

  std::vector<Tensor> metaOut = runEntry(
      *model, "attn.meta",
      {toRuntime(kCache), intsToRuntime(table), intsToRuntime(lengths)});
  ASSERT_EQ(metaOut.size(), 1u);
  ref::Tensor pageMeta = fromRuntime(metaOut[0]);
  ASSERT_EQ(pageMeta.dim(0), pages);
  for (int64_t b = 0; b < B; ++b) {
    if (c.keys[b] == 0)
      continue;
    ref::Tensor expected = ref::blockMeta(keys[b], P);
    for (int64_t i = 0; i * P < c.keys[b]; ++i)
      for (int64_t which = 0; which < 2; ++which)
        for (int64_t h = 0; h < kHkv; ++h)
          for (int64_t d = 0; d < kD; ++d)
            // Exact: the bounds are keys (as f32).
            ASSERT_EQ(static_cast<float>(pageMeta(table(b, i), which, h, d)),
                      static_cast<float>(expected(0, h, i, which, d)))
                << "bound " << which << " of page " << i << " of sequence "
                << b;
  }

  // A page no sequence uses is summarized whole.
  for (int64_t page = used; page < pages; ++page)
    for (int64_t h = 0; h < kHkv; ++h)
      for (int64_t d = 0; d < kD; ++d) {
        float low = INFINITY, high = -INFINITY;
        for (int64_t slot = 0; slot < P; ++slot) {
          low = std::min(low,
                         static_cast<float>(kCache(order[page], slot, h, d)));
          high = std::max(high,
                          static_cast<float>(kCache(order[page], slot, h, d)));
        }
        ASSERT_EQ(static_cast<float>(pageMeta(order[page], 0, h, d)), low);
        ASSERT_EQ(static_cast<float>(pageMeta(order[page], 1, h, d)), high);
      }

  // [B, H, Lq, F], or packed [T, H, F] with the offsets of the rows.
  std::vector<int64_t> firstRow{0};
  for (int64_t b = 0; b < B; ++b)
    firstRow.push_back(firstRow.back() + rowsOf(b));
  auto pack = [&](const std::vector<ref::Tensor> &perSequence, int64_t F) {
    ref::Tensor all = ragged ? ref::Tensor({firstRow.back(), kH, F})
                             : ref::Tensor({B, kH, c.queries, F});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t i = 0; i < rowsOf(b); ++i)
          for (int64_t d = 0; d < F; ++d)
            (ragged ? all(firstRow[b] + i, h, d) : all(b, h, i, d)) =
                perSequence[b](0, h, i, d);
    return all;
  };
  std::vector<Tensor> inputs{toRuntime(pack(queries, kD)), toRuntime(kCache)};
  if (!c.latent)
    inputs.push_back(toRuntime(vCache));
  inputs.push_back(intsToRuntime(table));
  inputs.push_back(intsToRuntime(lengths));
  if (!c.gate.empty())
    inputs.push_back(toRuntime(pack(gates, gateDim)));
  inputs.push_back(toRuntime(pageMeta));
  if (ragged) {
    ref::IntTensor offsets({B + 1});
    for (int64_t b = 0; b <= B; ++b)
      offsets(b) = static_cast<int32_t>(firstRow[b]);
    inputs.push_back(intsToRuntime(offsets));
  }
  std::vector<Tensor> outputs = runEntry(*model, "attn", inputs);
  ASSERT_EQ(outputs.size(), 1u);
  ref::Tensor o = fromRuntime(outputs[0]);
  auto outAt = [&](int64_t b, int64_t h, int64_t i, int64_t d) {
    return ragged ? o(firstRow[b] + i, h, d) : o(b, h, i, d);
  };

  const ref::Mask mask = referenceMask(c.mask);
  for (int64_t b = 0; b < B; ++b) {
    const ref::Tensor &qb = queries[b];
    const ref::Tensor *g = c.gate.empty() ? nullptr : &gates[b];
    const int64_t n = c.keys[b], Lq = rowsOf(b);
    ref::Tensor expected({1, kH, Lq, kDv}); // no key: o = 0
    if (n > 0) {
      std::optional<ref::IntTensor> blocks;
      if (c.topK > 0)
        blocks = ref::selectTopK(qb, ref::blockMeta(keys[b], P), n, mask, {},
                                 {P, c.topK, c.sink, c.local});
      if (c.topP) {
        ref::IntTensor tokens = ref::selectTopP(
            qb, keys[b], blocks ? &*blocks : nullptr, P, mask, {}, *c.topP);
        expected =
            ref::sparseSdpa(qb, keys[b], values[b], tokens, 1, mask, {}, g)
                .output;
      } else {
        expected =
            ref::sparseSdpa(qb, keys[b], values[b], *blocks, P, mask, {}, g)
                .output;
      }
    }
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t d = 0; d < kDv; ++d)
          EXPECT_NEAR(outAt(b, h, i, d), expected(0, h, i, d), 2e-4)
              << "o of sequence " << b << " head " << h << " row " << i;
  }
}

std::vector<PagedSparseCase> sparseCases() {
  const std::string topK =
      R"({"method": "top_k", "top_k": 3, "sink_blocks": 1, "local_blocks": 1})";
  std::vector<PagedSparseCase> all;
  for (int64_t P : {1, 16, 5}) {
    const std::string p = "_p" + std::to_string(P);
    // top_k = 3 of pages of 1 key is 3 keys: take more there.
    const int64_t k = P == 1 ? 12 : 3;
    const std::string json = P == 1 ? R"({"method": "top_k", "top_k": 12,
      "sink_blocks": 2, "local_blocks": 3, "block_size": 1})"
                                    : topK;
    all.push_back({"topk_decode" + p,
                   P,
                   {37, 1, 16, 80},
                   1,
                   json,
                   k,
                   P == 1 ? 2 : 1,
                   P == 1 ? 3 : 1});
    all.push_back({"topk_extend" + p,
                   P,
                   {37, 9, 16, 80},
                   6,
                   json,
                   k,
                   P == 1 ? 2 : 1,
                   P == 1 ? 3 : 1});
  }
  // Selections fewer than the threads, their bounds in chunks of 128
  // pages: 300 pages of one key (3 chunks) beside sequences whose
  // candidates fit the budget; 3 rows of 700 keys in pages of 5 (2
  // chunks); a ragged batch of 2 sequences.
  PagedSparseCase chunked{"topk_decode_p1_chunked",
                          1,
                          {300, 1, 14, 290},
                          1,
                          R"({"method": "top_k", "top_k": 12,
                              "sink_blocks": 2, "local_blocks": 3})",
                          12,
                          2,
                          3};
  chunked.threads = 8;
  all.push_back(chunked);
  PagedSparseCase chunkedExtend{
      "topk_extend_p5_chunked", 5, {700, 37}, 3, topK, 3, 1, 1};
  chunkedExtend.threads = 8;
  all.push_back(chunkedExtend);
  PagedSparseCase chunkedRagged{
      "ragged_topk_chunked", 16, {2100, 40}, 0, topK, 3, 1, 1, std::nullopt,
      R"("causal")",         "", {2, 1}};
  chunkedRagged.threads = 8;
  all.push_back(chunkedRagged);
  all.push_back({"topk_window_gate",
                 5,
                 {70, 33, 90},
                 4,
                 topK,
                 3,
                 1,
                 1,
                 std::nullopt,
                 R"({"sliding_window": 30})",
                 "headwise"});
  all.push_back({"topk_no_mask_empty",
                 16,
                 {0, 40, 100},
                 2,
                 topK,
                 3,
                 1,
                 1,
                 std::nullopt,
                 R"("none")",
                 "elementwise"});
  ref::TopP topP;
  topP.topP = 0.8;
  topP.minTokens = 4;
  topP.maxTokens = 40;
  all.push_back({"topp_after_topk",
                 16,
                 {100, 7, 64},
                 3,
                 R"({"method": "top_p", "top_k": 4, "sink_blocks": 1,
                     "local_blocks": 1, "top_p": 0.8, "min_tokens": 4,
                     "max_tokens": 40})",
                 4,
                 1,
                 1,
                 topP});
  // The int4 estimator reads each key row through the page table too.
  ref::TopP int4 = topP;
  int4.int4 = true;
  all.push_back({"topp_int4_after_topk",
                 5,
                 {90, 31},
                 1,
                 R"({"method": "top_p", "top_k": 4, "sink_blocks": 1,
                     "local_blocks": 1, "top_p": 0.8, "min_tokens": 4,
                     "max_tokens": 40, "estimator": "int4"})",
                 4,
                 1,
                 1,
                 int4});
  ref::TopP alone;
  alone.topP = 0.9;
  all.push_back({"topp_alone",
                 5,
                 {60, 2, 23},
                 2,
                 R"({"method": "top_p", "top_p": 0.9})",
                 0,
                 0,
                 0,
                 alone});
  // Ragged batches: decode and extend rows mixed, a sequence without rows,
  // more keys than rows.
  all.push_back({"ragged_topk",
                 16,
                 {100, 7, 64, 33},
                 0,
                 topK,
                 3,
                 1,
                 1,
                 std::nullopt,
                 R"("causal")",
                 "elementwise",
                 {1, 7, 0, 20}});
  all.push_back({"ragged_topk_p5_window",
                 5,
                 {70, 12, 41},
                 0,
                 topK,
                 3,
                 1,
                 1,
                 std::nullopt,
                 R"({"sliding_window": 16})",
                 "",
                 {3, 1, 41}});
  all.push_back({"ragged_topp_after_topk",
                 16,
                 {100, 9, 64},
                 0,
                 R"({"method": "top_p", "top_k": 4, "sink_blocks": 1,
                     "local_blocks": 1, "top_p": 0.8, "min_tokens": 4,
                     "max_tokens": 40})",
                 4,
                 1,
                 1,
                 topP,
                 R"("causal")",
                 "headwise",
                 {2, 9, 1}});
  PagedSparseCase latent{
      "latent_topk_extend", 5, {37, 9, 80}, 3, topK, 3, 1, 1};
  latent.latent = true;
  all.push_back(latent);
  PagedSparseCase raggedLatent{
      "ragged_latent_topp_after_topk",
      16,
      {100, 9, 64},
      0,
      R"({"method": "top_p", "top_k": 4, "sink_blocks": 1,
          "local_blocks": 1, "top_p": 0.8, "min_tokens": 4,
          "max_tokens": 40})",
      4,
      1,
      1,
      topP,
      R"("causal")",
      "elementwise",
      {2, 9, 1}};
  raggedLatent.latent = true;
  all.push_back(raggedLatent);
  all.push_back({"ragged_topp_alone_no_mask",
                 5,
                 {60, 0, 23},
                 0,
                 R"({"method": "top_p", "top_p": 0.9})",
                 0,
                 0,
                 0,
                 alone,
                 R"("none")",
                 "",
                 {4, 2, 1}});
  // Long rows of many selected tokens: the CUDA kernels split a row's
  // selection over threads and merge the splits.
  ref::TopP most;
  most.topP = 0.99;
  all.push_back({"ragged_topp_alone_long",
                 16,
                 {700, 30},
                 0,
                 R"({"method": "top_p", "top_p": 0.99})",
                 0,
                 0,
                 0,
                 most,
                 R"("causal")",
                 "elementwise",
                 {1, 12}});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedSparsity,
                         testing::Combine(testing::ValuesIn(sparseCases()),
                                          allBackends()),
                         LabelAndBackend());

std::vector<PagedCase> cases() {
  std::vector<PagedCase> all;
  for (int64_t P : {1, 16, 5}) {
    const std::string p = "_p" + std::to_string(P);
    all.push_back({"decode" + p, P, {37, 1, 16, 80}, 1});
    all.push_back({"extend" + p, P, {37, 9, 16, 80}, 6});
    all.push_back({"prefill" + p, P, {40, 25, 33}, 25});
  }
  all.push_back({"decode_gate_lse",
                 16,
                 {100, 3, 64},
                 1,
                 R"("causal")",
                 "headwise",
                 true});
  all.push_back(
      {"prefill_gate", 5, {70, 40}, 40, R"("causal")", "elementwise"});
  all.push_back(
      {"window", 5, {50, 70, 20}, 20, R"({"sliding_window": 12})", "", true});
  all.push_back({"empty_sequence", 16, {0, 5, 33}, 1, R"("none")", "", true});
  return all;
}

/// Batches drawn at random (from a fixed seed): page sizes, lengths,
/// query counts, masks, gates and lse in combinations nobody picked.
std::vector<PagedCase> randomCases(int count) {
  CaseDraws draw;
  std::vector<PagedCase> all;
  for (int i = 0; i < count; ++i) {
    PagedCase c;
    c.label = "random" + std::to_string(i);
    c.pageSize = draw.pick({1, 2, 5, 7, 16, 32});
    c.queries = draw.pick({1, 1, 2, 3, 8, 9, 17, 40});
    const int64_t window = draw.pick({1, 4, 16, 100});
    c.mask = draw.chance(40) ? R"("causal")"
             : draw.chance(50)
                 ? R"("none")"
                 : R"({"sliding_window": )" + std::to_string(window) + "}";
    // Query i sits at seq_lens[b] - Lq + i: masks need Lq keys.
    const int64_t least = c.mask == R"("none")" ? 0 : c.queries;
    const int64_t sequences = draw.pick({1, 2, 3, 5});
    for (int64_t b = 0; b < sequences; ++b)
      c.keys.push_back(least + draw.pick({0, 1, 5, 16, 40, 300}));
    c.gate = draw.chance(50)   ? ""
             : draw.chance(50) ? "elementwise"
                               : "headwise";
    c.lse = draw.chance(40);
    all.push_back(c);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Random, PagedAttention,
    testing::Combine(testing::ValuesIn(randomCases(randomCaseCount(16))),
                     allBackends()),
    LabelAndBackend());

INSTANTIATE_TEST_SUITE_P(Cases, PagedAttention,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend());

} // namespace
} // namespace attn::e2e
