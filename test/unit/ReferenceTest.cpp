//===- ReferenceTest.cpp - Hand-checkable tests of the reference ----------===//
//
// The reference is what compiled code is judged against, so it is checked
// here on cases small enough to work out by hand, and on the identities SPEC
// states (a chain tree is causal attention, top_k >= #blocks is dense,
// running L1 then L2 equals running L1 + L2, ...).
//
//===----------------------------------------------------------------------===//

#include "test/reference/Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

using namespace attn::ref;

namespace {

constexpr double kTight = 1e-12;

std::mt19937_64 &rng() {
  static std::mt19937_64 generator(20261122);
  return generator;
}

/// Rows [from, to) of dim 2 of a [B, H, L, D] tensor.
Tensor sliceRows(const Tensor &t, int64_t from, int64_t to) {
  Tensor out({t.dim(0), t.dim(1), to - from, t.dim(3)});
  for (int64_t b = 0; b < t.dim(0); ++b)
    for (int64_t h = 0; h < t.dim(1); ++h)
      for (int64_t l = from; l < to; ++l)
        for (int64_t d = 0; d < t.dim(3); ++d)
          out(b, h, l - from, d) = t(b, h, l, d);
  return out;
}

/// Rows [from, to) of dim 2 of a [B, H, L] tensor.
Tensor sliceSteps(const Tensor &t, int64_t from, int64_t to) {
  Tensor out({t.dim(0), t.dim(1), to - from});
  for (int64_t b = 0; b < t.dim(0); ++b)
    for (int64_t h = 0; h < t.dim(1); ++h)
      for (int64_t l = from; l < to; ++l)
        out(b, h, l - from) = t(b, h, l);
  return out;
}

/// Repeats each of the Hkv heads H/Hkv times: GQA written as plain MHA.
Tensor repeatHeads(const Tensor &t, int64_t groups) {
  Tensor out({t.dim(0), t.dim(1) * groups, t.dim(2), t.dim(3)});
  for (int64_t b = 0; b < t.dim(0); ++b)
    for (int64_t h = 0; h < out.dim(1); ++h)
      for (int64_t l = 0; l < t.dim(2); ++l)
        for (int64_t d = 0; d < t.dim(3); ++d)
          out(b, h, l, d) = t(b, h / groups, l, d);
  return out;
}

//===----------------------------------------------------------------------===//
// §1.1 Dense attention
//===----------------------------------------------------------------------===//

TEST(Sdpa, TwoKeysByHand) {
  // q = [1, 0], k0 = [0, 0], k1 = [ln 3 * sqrt 2, 0]: scores 0 and ln 3,
  // weights 1/4 and 3/4.
  Tensor q({1, 1, 1, 2}, {1.0, 0.0});
  Tensor k({1, 1, 2, 2}, {0.0, 0.0, std::log(3.0) * std::sqrt(2.0), 0.0});
  Tensor v({1, 1, 2, 1}, {4.0, 8.0});
  AttentionResult r = sdpa(q, k, v, Mask::none());
  EXPECT_NEAR(r.output(0, 0, 0, 0), 0.25 * 4.0 + 0.75 * 8.0, kTight);
  EXPECT_NEAR(r.lse(0, 0, 0), std::log(1.0 + 3.0), kTight);
}

TEST(Sdpa, CausalIsBottomRightAligned) {
  // Lq = 2 queries against Lk = 4 keys sit at positions 2 and 3. With
  // value j at key j and zero scores, row 0 averages keys 0..2, row 1 0..3.
  Tensor q({1, 1, 2, 1}), k({1, 1, 4, 1});
  Tensor v({1, 1, 4, 1}, {0.0, 1.0, 2.0, 3.0});
  AttentionResult r = sdpa(q, k, v, Mask::causal());
  EXPECT_NEAR(r.output(0, 0, 0, 0), 1.0, kTight);
  EXPECT_NEAR(r.output(0, 0, 1, 0), 1.5, kTight);
  EXPECT_NEAR(r.lse(0, 0, 0), std::log(3.0), kTight);
}

TEST(Sdpa, SlidingWindowSeesLastWKeys) {
  // Decode row at position 5 with W = 2 sees keys 4 and 5 only.
  Tensor q({1, 1, 1, 1}), k({1, 1, 6, 1});
  Tensor v({1, 1, 6, 1}, {0, 1, 2, 3, 4, 5});
  AttentionResult r = sdpa(q, k, v, Mask::slidingWindow(2));
  EXPECT_NEAR(r.output(0, 0, 0, 0), 4.5, kTight);
}

TEST(Sdpa, EmptyRowIsZeroWithNegInfLse) {
  // Lq = 3 > Lk = 1: rows 0 and 1 sit at negative positions and see nothing
  // under a sliding window; row 2 sees key 0.
  Tensor q({1, 1, 3, 2}), k({1, 1, 1, 2}, {1.0, 1.0});
  Tensor v({1, 1, 1, 2}, {7.0, -7.0});
  AttentionResult r = sdpa(q, k, v, Mask::slidingWindow(4));
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.output(0, 0, i, 0), 0.0);
    EXPECT_EQ(r.lse(0, 0, i), -std::numeric_limits<double>::infinity());
  }
  EXPECT_NEAR(r.output(0, 0, 2, 1), -7.0, kTight);
}

TEST(Variants, ScoreModSeesPositionsAfterSoftcap) {
  // Lq = 2 against Lk = 3 (positions 1 and 2), zero scores: score_mod adds
  // -(qp - kp), so row 1 (qp = 2) weighs keys 0, 1, 2 as e^-2 : e^-1 : 1.
  Tensor q({1, 1, 2, 1}), k({1, 1, 3, 1});
  Tensor v({1, 1, 3, 1}, {0.0, 1.0, 2.0});
  Score score;
  std::vector<std::pair<int64_t, int64_t>> seen;
  score.scoreMod = [&](double s, int64_t b, int64_t h, int64_t qp, int64_t kp) {
    EXPECT_EQ(s, 0.0);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(h, 0);
    seen.emplace_back(qp, kp);
    return s - static_cast<double>(qp - kp);
  };
  AttentionResult r = sdpa(q, k, v, Mask::causal(), score);
  // Only visible keys are scored: (1, 0), (1, 1), then (2, 0..2).
  std::vector<std::pair<int64_t, int64_t>> expected{
      {1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 2}};
  EXPECT_EQ(seen, expected);
  double w0 = std::exp(-2.0), w1 = std::exp(-1.0), w2 = 1.0;
  EXPECT_NEAR(r.output(0, 0, 1, 0), (w1 + 2 * w2) / (w0 + w1 + w2), kTight);
  EXPECT_NEAR(r.lse(0, 0, 1), std::log(w0 + w1 + w2), kTight);
}

TEST(Variants, MaskModNarrowsTheMaskAndEmptiesRows) {
  // mask_mod hides odd keys and every key of the row at position 3.
  Tensor q({1, 1, 2, 1}), k({1, 1, 4, 1});
  Tensor v({1, 1, 4, 1}, {10.0, 20.0, 30.0, 40.0});
  Score score;
  score.maskMod = [](int64_t, int64_t, int64_t qp, int64_t kp) {
    return kp % 2 == 0 && qp != 3;
  };
  AttentionResult r = sdpa(q, k, v, Mask::causal(), score);
  EXPECT_NEAR(r.output(0, 0, 0, 0), 20.0, kTight); // keys 0, 2
  EXPECT_NEAR(r.lse(0, 0, 0), std::log(2.0), kTight);
  EXPECT_EQ(r.output(0, 0, 1, 0), 0.0);
  EXPECT_EQ(r.lse(0, 0, 1), -std::numeric_limits<double>::infinity());
}

TEST(Variants, TreePositionsAreDepths) {
  // P = 2 prefix keys and a chain root -> 1 plus a sibling 2 of 1: node 2
  // (depth 1) sits at 3, its tree keys P + 0 and P + 2 at 2 and 3.
  Tensor q({1, 1, 3, 1}), k({1, 1, 5, 1}), v({1, 1, 5, 1});
  IntTensor parents({1, 3}, {-1, 0, 0});
  Score score;
  std::set<std::pair<int64_t, int64_t>> node2;
  score.maskMod = [&](int64_t, int64_t, int64_t qp, int64_t kp) {
    if (qp == 3)
      node2.emplace(qp, kp);
    return true;
  };
  treeSdpa(q, k, v, parents, std::nullopt, score);
  std::set<std::pair<int64_t, int64_t>> expected{
      {3, 0}, {3, 1}, {3, 2}, {3, 3}};
  EXPECT_EQ(node2, expected);
}

TEST(Sdpa, HugeLogitsDoNotOverflow) {
  // Scores of 1e4 and 1e4 - ln 2: weights 2/3 and 1/3, exactly representable
  // only through the running maximum.
  Tensor q({1, 1, 1, 1}, {1.0});
  Tensor k({1, 1, 2, 1}, {1e4, 1e4 - std::log(2.0)});
  Tensor v({1, 1, 2, 1}, {3.0, 6.0});
  AttentionResult r = sdpa(q, k, v, Mask::none(), Score{1.0, 0.0});
  EXPECT_NEAR(r.output(0, 0, 0, 0), 2.0 / 3.0 * 3.0 + 1.0 / 3.0 * 6.0, 1e-9);
  EXPECT_NEAR(r.lse(0, 0, 0), 1e4 + std::log(1.5), 1e-9);
}

TEST(Sdpa, SoftcapBoundsScores) {
  Tensor q({1, 1, 1, 1}, {1.0});
  Tensor k({1, 1, 2, 1}, {100.0, 0.0});
  Tensor v({1, 1, 2, 1}, {1.0, 0.0});
  AttentionResult r = sdpa(q, k, v, Mask::none(), Score{1.0, 5.0});
  const double capped = 5.0 * std::tanh(100.0 / 5.0);
  EXPECT_NEAR(r.output(0, 0, 0, 0), std::exp(capped) / (std::exp(capped) + 1.0),
              kTight);
}

TEST(Sdpa, GroupedQueryHeadsReadTheirKvHead) {
  const int64_t groups = 4;
  Tensor q = randomTensor({2, 8, 5, 6}, rng());
  Tensor k = randomTensor({2, 2, 7, 6}, rng());
  Tensor v = randomTensor({2, 2, 7, 3}, rng());
  AttentionResult gqa = sdpa(q, k, v, Mask::causal());
  AttentionResult mha =
      sdpa(q, repeatHeads(k, groups), repeatHeads(v, groups), Mask::causal());
  EXPECT_EQ(maxRelativeError(gqa.output, mha.output), 0.0);
}

TEST(Gate, ElementwiseAndHeadwise) {
  Tensor o({1, 1, 1, 2}, {2.0, 4.0});
  Tensor elementwise({1, 1, 1, 2}, {0.0, std::log(3.0)});
  Tensor g = sigmoidGate(o, elementwise);
  EXPECT_NEAR(g(0, 0, 0, 0), 1.0, kTight);
  EXPECT_NEAR(g(0, 0, 0, 1), 3.0, kTight);
  Tensor headwise({1, 1, 1, 1}, {0.0});
  Tensor h = sigmoidGate(o, headwise);
  EXPECT_NEAR(h(0, 0, 0, 0), 1.0, kTight);
  EXPECT_NEAR(h(0, 0, 0, 1), 2.0, kTight);
}

TEST(Gate, SdpaAppliesGateToOutput) {
  Tensor q = randomTensor({1, 2, 3, 4}, rng());
  Tensor k = randomTensor({1, 1, 3, 4}, rng());
  Tensor v = randomTensor({1, 1, 3, 4}, rng());
  Tensor gate = randomTensor({1, 2, 3, 4}, rng(), -3, 3);
  AttentionResult gated = sdpa(q, k, v, Mask::causal(), {}, &gate);
  AttentionResult plain = sdpa(q, k, v, Mask::causal());
  EXPECT_EQ(maxRelativeError(gated.output, sigmoidGate(plain.output, gate)),
            0.0);
  EXPECT_EQ(maxRelativeError(gated.lse, plain.lse), 0.0);
}

//===----------------------------------------------------------------------===//
// §1.3 Sparsity
//===----------------------------------------------------------------------===//

TEST(BlockMeta, MinMaxWithPartialLastBlock) {
  Tensor k({1, 1, 5, 1}, {3.0, -1.0, 4.0, 1.0, -5.0});
  Tensor meta = blockMeta(k, 2);
  ASSERT_EQ(meta.shape(), (std::vector<int64_t>{1, 1, 3, 2, 1}));
  EXPECT_EQ(meta(0, 0, 0, 0, 0), -1.0);
  EXPECT_EQ(meta(0, 0, 0, 1, 0), 3.0);
  EXPECT_EQ(meta(0, 0, 1, 0, 0), 1.0);
  EXPECT_EQ(meta(0, 0, 1, 1, 0), 4.0);
  EXPECT_EQ(meta(0, 0, 2, 0, 0), -5.0);
  EXPECT_EQ(meta(0, 0, 2, 1, 0), -5.0);
}

TEST(TopK, BlockScoreIsUpperBoundOfKeyScores) {
  Tensor q = randomTensor({1, 2, 3, 5}, rng());
  Tensor k = randomTensor({1, 2, 11, 5}, rng());
  Tensor meta = blockMeta(k, 4);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t n = 0; n < 3; ++n) {
        double bound = 0.0;
        for (int64_t d = 0; d < 5; ++d)
          bound += std::max(q(0, h, i, d) * meta(0, h, n, 0, d),
                            q(0, h, i, d) * meta(0, h, n, 1, d));
        for (int64_t j = 4 * n; j < std::min<int64_t>(11, 4 * n + 4); ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < 5; ++d)
            dot += q(0, h, i, d) * k(0, h, j, d);
          EXPECT_LE(dot, bound + kTight);
        }
      }
}

TEST(TopK, KeepsSinkLocalAndBestByHand) {
  // One decode row, 5 blocks of 1 key, D = 1, q = 1: block scores are the
  // keys. Sink 1 + local 1 keep blocks 0 and 4; the best other is block 2;
  // blocks 1 and 3 tie below it.
  Tensor q({1, 1, 1, 1}, {1.0});
  Tensor k({1, 1, 5, 1}, {-9.0, 1.0, 5.0, 1.0, -9.0});
  IntTensor kept =
      selectTopK(q, blockMeta(k, 1), 5, Mask::causal(), {}, TopK{1, 3, 1, 1});
  EXPECT_EQ(kept.values(), (std::vector<int32_t>{0, 2, 4}));
  // With one more slot the tie goes to the lower block index.
  kept =
      selectTopK(q, blockMeta(k, 1), 5, Mask::causal(), {}, TopK{1, 4, 1, 1});
  EXPECT_EQ(kept.values(), (std::vector<int32_t>{0, 1, 2, 4}));
}

TEST(TopK, OnlyCandidateBlocksAndPadding) {
  // Prefill row 0 (causal) sees only block 0; it is kept, the rest is -1.
  Tensor q = randomTensor({1, 1, 8, 2}, rng());
  Tensor k = randomTensor({1, 1, 8, 2}, rng());
  IntTensor kept =
      selectTopK(q, blockMeta(k, 2), 8, Mask::causal(), {}, TopK{2, 3, 0, 0});
  EXPECT_EQ(kept(0, 0, 0, 0), 0);
  EXPECT_EQ(kept(0, 0, 0, 1), -1);
  EXPECT_EQ(kept(0, 0, 0, 2), -1);
  // Row 7 has 4 candidate blocks and keeps 3 distinct ones.
  std::set<int32_t> row7;
  for (int64_t n = 0; n < 3; ++n)
    row7.insert(kept(0, 0, 7, n));
  EXPECT_EQ(row7.size(), 3u);
  EXPECT_EQ(row7.count(-1), 0u);
}

class SparsityInvariants : public ::testing::TestWithParam<Mask> {};

TEST_P(SparsityInvariants, TopKCoveringAllBlocksIsDense) {
  const Mask mask = GetParam();
  Tensor q = randomTensor({2, 4, 13, 8}, rng());
  Tensor k = randomTensor({2, 2, 37, 8}, rng());
  Tensor v = randomTensor({2, 2, 37, 5}, rng());
  const int64_t bs = 8, numBlocks = 5;
  IntTensor blocks =
      selectTopK(q, blockMeta(k, bs), 37, mask, {}, TopK{bs, numBlocks, 1, 1});
  AttentionResult sparse = sparseSdpa(q, k, v, blocks, bs, mask);
  AttentionResult dense = sdpa(q, k, v, mask);
  EXPECT_LT(maxRelativeError(sparse.output, dense.output), kTight);
  EXPECT_LT(maxRelativeError(sparse.lse, dense.lse), kTight);
}

TEST_P(SparsityInvariants, TopPOfOneIsDense) {
  const Mask mask = GetParam();
  Tensor q = randomTensor({1, 2, 9, 4}, rng());
  Tensor k = randomTensor({1, 1, 21, 4}, rng());
  Tensor v = randomTensor({1, 1, 21, 3}, rng());
  IntTensor tokens = selectTopP(q, k, nullptr, 1, mask, {}, TopP{1.0});
  AttentionResult sparse = sparseSdpa(q, k, v, tokens, 1, mask);
  AttentionResult dense = sdpa(q, k, v, mask);
  EXPECT_LT(maxRelativeError(sparse.output, dense.output), kTight);
}

INSTANTIATE_TEST_SUITE_P(Masks, SparsityInvariants,
                         ::testing::Values(Mask::none(), Mask::causal(),
                                           Mask::slidingWindow(10)));

TEST(TopP, ShortestPrefixReachingP) {
  // Scores ln 4, ln 3, ln 2, ln 1: weights 0.4, 0.3, 0.2, 0.1.
  Tensor q({1, 1, 1, 1}, {1.0});
  Tensor k({1, 1, 4, 1},
           {std::log(2.0), std::log(4.0), std::log(1.0), std::log(3.0)});
  auto select = [&](TopP options) {
    return selectTopP(q, k, nullptr, 1, Mask::none(), Score{1.0, 0.0}, options)
        .values();
  };
  EXPECT_EQ(select(TopP{0.65}), (std::vector<int32_t>{1, 3, -1, -1}));
  EXPECT_EQ(select(TopP{0.71}), (std::vector<int32_t>{0, 1, 3, -1}));
  EXPECT_EQ(select(TopP{0.1, 3}), (std::vector<int32_t>{0, 1, 3, -1}));
  EXPECT_EQ(select(TopP{0.99, 0, 2}), (std::vector<int32_t>{1, 3}));
}

TEST(TopP, CandidatesAreVisibleKeysOfKeptBlocks) {
  Tensor q = randomTensor({1, 1, 1, 3}, rng());
  Tensor k = randomTensor({1, 1, 10, 3}, rng());
  IntTensor blocks({1, 1, 1, 2}, {3, -1}); // keys 6, 7 (block size 2)
  IntTensor tokens =
      selectTopP(q, k, &blocks, 2, Mask::causal(), {}, TopP{1.0});
  EXPECT_EQ(tokens(0, 0, 0, 0), 6);
  EXPECT_EQ(tokens(0, 0, 0, 1), 7);
  EXPECT_EQ(tokens(0, 0, 0, 2), -1);
}

TEST(SparseSdpa, SelectionWithoutVisibleKeyIsEmptyRow) {
  Tensor q = randomTensor({1, 1, 4, 2}, rng());
  Tensor k = randomTensor({1, 1, 4, 2}, rng());
  Tensor v = randomTensor({1, 1, 4, 2}, rng());
  IntTensor selection({1, 1, 4, 1}, {3, 3, 3, 3}); // row 0 cannot see key 3
  AttentionResult r = sparseSdpa(q, k, v, selection, 1, Mask::causal());
  EXPECT_EQ(r.output(0, 0, 0, 0), 0.0);
  EXPECT_EQ(r.lse(0, 0, 0), -std::numeric_limits<double>::infinity());
  EXPECT_NEAR(r.output(0, 0, 3, 1), v(0, 0, 3, 1), kTight);
}

//===----------------------------------------------------------------------===//
// §1.4 Trees
//===----------------------------------------------------------------------===//

TEST(Tree, ChainIsCausalAttention) {
  const int64_t P = 6, T = 5;
  IntTensor chain({2, T});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < T; ++t)
      chain(b, t) = static_cast<int32_t>(t - 1);
  Tensor q = randomTensor({2, 4, T, 8}, rng());
  Tensor k = randomTensor({2, 2, P + T, 8}, rng());
  Tensor v = randomTensor({2, 2, P + T, 6}, rng());
  EXPECT_LT(maxRelativeError(treeSdpa(q, k, v, chain, std::nullopt).output,
                             sdpa(q, k, v, Mask::causal()).output),
            kTight);
  EXPECT_LT(maxRelativeError(treeSdpa(q, k, v, chain, 3).output,
                             sdpa(q, k, v, Mask::slidingWindow(3)).output),
            kTight);
}

TEST(Tree, SiblingsDoNotSeeEachOther) {
  // Root 0 with children 1 and 2; node 2 sees prefix key 0 and tree keys of
  // nodes 0 and 2 (positions 1 and 3), not node 1's.
  IntTensor parents({1, 3}, {-1, 0, 0});
  Tensor q({1, 1, 3, 1}), k({1, 1, 4, 1});
  Tensor v({1, 1, 4, 1}, {1.0, 10.0, 100.0, 1000.0});
  AttentionResult r = treeSdpa(q, k, v, parents, std::nullopt);
  EXPECT_NEAR(r.output(0, 0, 0, 0), (1.0 + 10.0) / 2, kTight);
  EXPECT_NEAR(r.output(0, 0, 1, 0), (1.0 + 10.0 + 100.0) / 3, kTight);
  EXPECT_NEAR(r.output(0, 0, 2, 0), (1.0 + 10.0 + 1000.0) / 3, kTight);
  // A window of 1 keeps only the node itself (positions are depths).
  AttentionResult w = treeSdpa(q, k, v, parents, 1);
  EXPECT_NEAR(w.output(0, 0, 2, 0), 1000.0, kTight);
}

TEST(Tree, InvalidParentsNameTheIndex) {
  EXPECT_EQ(checkParents(IntTensor({1, 3}, {-1, 0, 1})), "");
  EXPECT_EQ(checkParents(IntTensor({2, 3}, {-1, 0, 1, -1, 0, 2})),
            "parents[1][2] = 2 must be in [0, 2)");
  EXPECT_EQ(checkParents(IntTensor({1, 2}, {0, 0})),
            "parents[0][0] = 0 must be -1 (the root)");
}

TEST(Tree, GreedyAcceptanceByHand) {
  // Tree: 0 -> {1, 2}, 1 -> {3}, 2 -> {4}. target[0] = 7 matches both 1
  // and 2 (lowest index wins), target[1] = 9 matches node 3; target[3] is
  // the bonus.
  IntTensor parents({1, 5}, {-1, 0, 0, 1, 2});
  IntTensor tokens({1, 5}, {5, 7, 7, 9, 9});
  IntTensor target({1, 5}, {7, 9, 8, 42, 0});
  Acceptance a = treeAccept(tokens, target, parents);
  EXPECT_EQ(a.path.values(), (std::vector<int32_t>{0, 1, 3, -1, -1}));
  EXPECT_EQ(a.length(0), 3);
  EXPECT_EQ(a.bonus(0), 42);
  // Nothing matches: only the root, and its target is the bonus.
  IntTensor miss({1, 5}, {1, 2, 3, 4, 5});
  Acceptance none = treeAccept(tokens, miss, parents);
  EXPECT_EQ(none.length(0), 1);
  EXPECT_EQ(none.bonus(0), 1);
}

TEST(Tree, CompactMovesPathRowsAfterPrefix) {
  // P = 2, T = 3 rows of value = row index; path 0 -> 2.
  Tensor k({1, 1, 5, 1}, {0, 1, 2, 3, 4});
  IntTensor path({1, 3}, {0, 2, -1}), length({1}, {2});
  auto [newK, newV] = kvCompact(k, k, path, length);
  EXPECT_EQ(newK.values(), (std::vector<double>{0, 1, 2, 4, 4}));
  EXPECT_EQ(newV.values(), newK.values());
}

//===----------------------------------------------------------------------===//
// §2 Linear recurrences
//===----------------------------------------------------------------------===//

struct RecurrenceInputs {
  Tensor q, k, v, g, beta, s0;
};

RecurrenceInputs randomRecurrence(Rule rule, int64_t B, int64_t Hk, int64_t Hv,
                                  int64_t L, int64_t Dk, int64_t Dv) {
  RecurrenceInputs in;
  in.q = randomTensor({B, Hk, L, Dk}, rng());
  in.k = randomTensor({B, Hk, L, Dk}, rng());
  in.v = randomTensor({B, Hv, L, Dv}, rng());
  const bool featureDecay = rule == Rule::Gla || rule == Rule::Kda;
  in.g = featureDecay ? randomTensor({B, Hv, L, Dk}, rng(), -5.0, 0.0)
                      : randomTensor({B, Hv, L}, rng(), -5.0, 0.0);
  in.beta = randomTensor({B, Hv, L}, rng(), 0.0, 1.0);
  in.s0 = randomTensor({B, Hv, Dk, Dv}, rng());
  return in;
}

TEST(Recurrence, LinearRuleIsCausalLinearAttention) {
  // o_t = scale * sum_{j <= t} (q_t . k_j) v_j + S0^T scale q_t.
  RecurrenceInputs in = randomRecurrence(Rule::Linear, 1, 1, 1, 6, 3, 2);
  RecurrenceResult r = linearRecurrence(in.q, in.k, in.v, nullptr, nullptr,
                                        in.s0, Recurrence{Rule::Linear, 0.5});
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t e = 0; e < 2; ++e) {
      double expected = 0.0;
      for (int64_t d = 0; d < 3; ++d)
        expected += in.s0(0, 0, d, e) * 0.5 * in.q(0, 0, t, d);
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < 3; ++d)
          dot += in.q(0, 0, t, d) * in.k(0, 0, j, d);
        expected += 0.5 * dot * in.v(0, 0, j, e);
      }
      EXPECT_NEAR(r.output(0, 0, t, e), expected, 1e-12);
    }
}

TEST(Recurrence, DeltaStepByHand) {
  // Dk = Dv = 1, S0 = 2, k = 1, v = 5, beta = 0.5: u = 0.5 (5 - 2) = 1.5,
  // S = 3.5; o = S * scale * q = 3.5 * 1 * 2.
  Tensor q({1, 1, 1, 1}, {2.0}), k({1, 1, 1, 1}, {1.0});
  Tensor v({1, 1, 1, 1}, {5.0}), beta({1, 1, 1}, {0.5});
  Tensor s0({1, 1, 1, 1}, {2.0});
  RecurrenceResult r = linearRecurrence(q, k, v, nullptr, &beta, s0,
                                        Recurrence{Rule::Delta, 1.0});
  EXPECT_NEAR(r.state(0, 0, 0, 0), 3.5, kTight);
  EXPECT_NEAR(r.output(0, 0, 0, 0), 7.0, kTight);
  // Gated: the state first decays by exp(ln 0.5): S = 1, u = 0.5 * 4 = 2.
  Tensor g({1, 1, 1}, {std::log(0.5)});
  RecurrenceResult gated = linearRecurrence(q, k, v, &g, &beta, s0,
                                            Recurrence{Rule::GatedDelta, 1.0});
  EXPECT_NEAR(gated.state(0, 0, 0, 0), 3.0, kTight);
}

TEST(Recurrence, KdaStepByHand) {
  // Dk = 2, Dv = 1, S0 = [2, 4], decays [0.5, 1]: S = [1, 4]; k = [1, 0]
  // predicts 1, so u = 0.5 (5 - 1) = 2 and S = [3, 4]; o = S . q = 3 + 8.
  Tensor q({1, 1, 1, 2}, {1.0, 2.0}), k({1, 1, 1, 2}, {1.0, 0.0});
  Tensor v({1, 1, 1, 1}, {5.0}), beta({1, 1, 1}, {0.5});
  Tensor g({1, 1, 1, 2}, {std::log(0.5), 0.0});
  Tensor s0({1, 1, 2, 1}, {2.0, 4.0});
  RecurrenceResult r =
      linearRecurrence(q, k, v, &g, &beta, s0, Recurrence{Rule::Kda, 1.0});
  EXPECT_NEAR(r.state(0, 0, 0, 0), 3.0, kTight);
  EXPECT_NEAR(r.state(0, 0, 1, 0), 4.0, kTight);
  EXPECT_NEAR(r.output(0, 0, 0, 0), 11.0, kTight);
}

TEST(Recurrence, ZeroDecayEqualsUngatedRule) {
  RecurrenceInputs in = randomRecurrence(Rule::GatedDelta, 2, 2, 4, 9, 5, 3);
  Tensor zero({2, 4, 9});
  Tensor zeroVector({2, 4, 9, 5});
  auto run = [&](Rule rule, const Tensor *g, const Tensor *beta) {
    return linearRecurrence(in.q, in.k, in.v, g, beta, in.s0,
                            Recurrence{rule, std::nullopt, true});
  };
  RecurrenceResult linear = run(Rule::Linear, nullptr, nullptr);
  EXPECT_LT(
      maxRelativeError(run(Rule::Decay, &zero, nullptr).output, linear.output),
      kTight);
  EXPECT_LT(maxRelativeError(run(Rule::Gla, &zeroVector, nullptr).output,
                             linear.output),
            kTight);
  EXPECT_LT(maxRelativeError(run(Rule::GatedDelta, &zero, &in.beta).output,
                             run(Rule::Delta, nullptr, &in.beta).output),
            kTight);
  EXPECT_LT(maxRelativeError(run(Rule::Kda, &zeroVector, &in.beta).output,
                             run(Rule::Delta, nullptr, &in.beta).output),
            kTight);
}

TEST(Recurrence, GlaWithEqualChannelsIsScalarDecay) {
  RecurrenceInputs in = randomRecurrence(Rule::Decay, 1, 1, 2, 7, 4, 3);
  Tensor vector({1, 2, 7, 4});
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 7; ++t)
      for (int64_t d = 0; d < 4; ++d)
        vector(0, h, t, d) = in.g(0, h, t);
  RecurrenceResult scalar = linearRecurrence(in.q, in.k, in.v, &in.g, nullptr,
                                             in.s0, Recurrence{Rule::Decay});
  RecurrenceResult gla = linearRecurrence(in.q, in.k, in.v, &vector, nullptr,
                                          in.s0, Recurrence{Rule::Gla});
  EXPECT_LT(maxRelativeError(gla.output, scalar.output), kTight);
  EXPECT_LT(maxRelativeError(gla.state, scalar.state), kTight);
  // Likewise kda with equal channels is gated_delta.
  RecurrenceResult gatedDelta = linearRecurrence(
      in.q, in.k, in.v, &in.g, &in.beta, in.s0, Recurrence{Rule::GatedDelta});
  RecurrenceResult kda = linearRecurrence(in.q, in.k, in.v, &vector, &in.beta,
                                          in.s0, Recurrence{Rule::Kda});
  EXPECT_LT(maxRelativeError(kda.output, gatedDelta.output), kTight);
  EXPECT_LT(maxRelativeError(kda.state, gatedDelta.state), kTight);
}

TEST(Recurrence, ValueHeadsShareTheirKeyHead) {
  // Hv = 2 * Hk: value heads 0 and 1 read q/k head 0. Feeding the same
  // value to both gives identical outputs.
  RecurrenceInputs in = randomRecurrence(Rule::Linear, 1, 1, 2, 4, 3, 2);
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t e = 0; e < 2; ++e)
      in.v(0, 1, t, e) = in.v(0, 0, t, e);
  for (int64_t d = 0; d < 3; ++d)
    for (int64_t e = 0; e < 2; ++e)
      in.s0(0, 1, d, e) = in.s0(0, 0, d, e);
  RecurrenceResult r = linearRecurrence(in.q, in.k, in.v, nullptr, nullptr,
                                        in.s0, Recurrence{Rule::Linear});
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t e = 0; e < 2; ++e)
      EXPECT_EQ(r.output(0, 0, t, e), r.output(0, 1, t, e));
}

TEST(Recurrence, QkL2NormNormalizesBeforeUse) {
  // q = k = [3, 4] normalize to [0.6, 0.8] (up to the 1e-6 epsilon).
  Tensor q({1, 1, 1, 2}, {3.0, 4.0}), v({1, 1, 1, 1}, {1.0});
  Tensor s0({1, 1, 2, 1});
  RecurrenceResult r = linearRecurrence(q, q, v, nullptr, nullptr, s0,
                                        Recurrence{Rule::Linear, 1.0, true});
  const double norm = std::sqrt(25.0 + 1e-6);
  EXPECT_NEAR(r.state(0, 0, 0, 0), 3.0 / norm, kTight);
  EXPECT_NEAR(r.output(0, 0, 0, 0), 25.0 / (norm * norm), kTight);
}

class RecurrenceRules : public ::testing::TestWithParam<Rule> {};

TEST_P(RecurrenceRules, StateContinuation) {
  // Running L1 steps, then L2 from the resulting state, equals L1 + L2.
  const Rule rule = GetParam();
  const int64_t L1 = 5, L2 = 8;
  RecurrenceInputs in = randomRecurrence(rule, 2, 2, 4, L1 + L2, 6, 3);
  const bool featureDecay = rule == Rule::Gla || rule == Rule::Kda;
  auto steps = [&](const Tensor &t, int64_t from, int64_t to) {
    return featureDecay ? sliceRows(t, from, to) : sliceSteps(t, from, to);
  };
  Recurrence options{rule, std::nullopt, true};
  RecurrenceResult whole =
      linearRecurrence(in.q, in.k, in.v, &in.g, &in.beta, in.s0, options);
  Tensor g1 = steps(in.g, 0, L1), g2 = steps(in.g, L1, L1 + L2);
  Tensor b1 = sliceSteps(in.beta, 0, L1), b2 = sliceSteps(in.beta, L1, L1 + L2);
  RecurrenceResult first =
      linearRecurrence(sliceRows(in.q, 0, L1), sliceRows(in.k, 0, L1),
                       sliceRows(in.v, 0, L1), &g1, &b1, in.s0, options);
  RecurrenceResult second = linearRecurrence(
      sliceRows(in.q, L1, L1 + L2), sliceRows(in.k, L1, L1 + L2),
      sliceRows(in.v, L1, L1 + L2), &g2, &b2, first.state, options);
  EXPECT_LT(maxRelativeError(second.state, whole.state), kTight);
  EXPECT_LT(
      maxRelativeError(second.output, sliceRows(whole.output, L1, L1 + L2)),
      kTight);
  EXPECT_LT(maxRelativeError(first.output, sliceRows(whole.output, 0, L1)),
            kTight);
}

INSTANTIATE_TEST_SUITE_P(AllRules, RecurrenceRules,
                         ::testing::Values(Rule::Linear, Rule::Decay, Rule::Gla,
                                           Rule::Delta, Rule::GatedDelta,
                                           Rule::Kda));

TEST(Recurrence, DeltaRuleWithUnitBetaStoresTheValue) {
  // With |k_t| = 1 and beta = 1, S'^T k_t = S^T k_t + (v_t - S^T k_t) = v_t:
  // reading with q_t = k_t (scale 1) returns exactly the value just written,
  // whatever the state held before.
  RecurrenceInputs in = randomRecurrence(Rule::Delta, 1, 1, 1, 6, 4, 3);
  Tensor ones({1, 1, 6}, 1.0);
  RecurrenceResult r =
      linearRecurrence(in.k, in.k, in.v, nullptr, &ones, in.s0,
                       Recurrence{Rule::Delta, 1.0, /*qkL2Norm=*/true});
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t e = 0; e < 3; ++e)
      EXPECT_NEAR(r.output(0, 0, t, e), in.v(0, 0, t, e), 1e-5);
}

TEST(RmsNormSilu, ByHand) {
  // o = [3, 4]: mean square 12.5; z = 0 gives silu 0, z = big gives ~z.
  Tensor o({1, 1, 1, 2}, {3.0, 4.0}), z({1, 1, 1, 2}, {0.0, 2.0});
  Tensor w({2}, {1.0, 0.5});
  Tensor r = rmsNormGate(o, z, w, 0.0);
  const double rms = std::sqrt(12.5);
  EXPECT_EQ(r(0, 0, 0, 0), 0.0);
  EXPECT_NEAR(r(0, 0, 0, 1), 4.0 / rms * 0.5 * 2.0 / (1.0 + std::exp(-2.0)),
              kTight);
  // Kimi Linear's sigmoid: z = 0 halves, z = 2 scales by sigmoid(2).
  Tensor s = rmsNormGate(o, z, w, 0.0, GateActivation::Sigmoid);
  EXPECT_NEAR(s(0, 0, 0, 0), 3.0 / rms * 0.5, kTight);
  EXPECT_NEAR(s(0, 0, 0, 1), 4.0 / rms * 0.5 / (1.0 + std::exp(-2.0)), kTight);
}

TEST(GroupedRmsNormGate, ByHand) {
  // Two heads of one feature in one group: o = [3, 4] over the heads.
  Tensor o({1, 2, 1, 1}, {3.0, 4.0}), z({1, 2, 1, 1}, {0.0, 2.0});
  Tensor w({2}, {1.0, 0.5});
  const double silu2 = 2.0 / (1.0 + std::exp(-2.0));
  // Norm first: as rmsNormGate over the token's two features.
  Tensor r = groupedRmsNormGate(o, z, w, 2, true, 0.0, GateActivation::Silu);
  const double rms = std::sqrt(12.5);
  EXPECT_EQ(r(0, 0, 0, 0), 0.0);
  EXPECT_NEAR(r(0, 1, 0, 0), 4.0 / rms * 0.5 * silu2, kTight);
  // Gate first: o silu(z) = [0, 4 silu(2)], whose rms is 4 silu(2) / sqrt(2).
  Tensor g = groupedRmsNormGate(o, z, w, 2, false, 0.0, GateActivation::Silu);
  EXPECT_EQ(g(0, 0, 0, 0), 0.0);
  EXPECT_NEAR(g(0, 1, 0, 0), std::sqrt(2.0) * 0.5, kTight);
  // Groups of one feature: each normalizes to its sign, times its weight.
  Tensor one = groupedRmsNormGate(o, o, Tensor({1}, {2.0}), 1, false, 0.0,
                                  GateActivation::Sigmoid);
  EXPECT_NEAR(one(0, 0, 0, 0), 2.0, kTight);
  EXPECT_NEAR(one(0, 1, 0, 0), 2.0, kTight);
}

TEST(Helpers, RelativeErrorCatchesNaNAndScales) {
  Tensor a({2}, {1.0, 2.0}), b({2}, {1.0, 2.5});
  EXPECT_NEAR(maxRelativeError(a, b), 0.5 / 2.5, kTight);
  Tensor nan({2}, {1.0, std::nan("")});
  EXPECT_TRUE(std::isinf(maxRelativeError(nan, b)));
}

} // namespace
