//===- TreeRecurrenceTest.cpp - SPEC §10 on every backend -----------------===//
//
// A linear layer's .tree and .commit entries compiled from a model
// description and run on the CPU kernels, the CUDA kernels' CPU bodies and
// (when there is one) a GPU, against the float64 reference of §2 run on
// each root-to-node path (and on the accepted path for .commit). The
// Python suite (test/python/tree_recurrence.py) covers every rule and
// shape on the CPU; this one gives each target's kernel the same cases.
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <random>

namespace attn::e2e {
namespace {

struct TreeCase {
  std::string label, rule = "gated_delta";
  int64_t nodes = 9, maxNodes = 32, keyDim = 20;
  bool gate = false, chain = false;
  /// The gate's activation: silu, or (Kimi Linear's) sigmoid.
  bool sigmoidGate = false;
  /// A ragged layer: the trees start from a state pool's slots and .commit
  /// writes the accepted states back into them, in place (SPEC §8).
  bool pool = false;
};

bool featureDecays(const TreeCase &c) {
  return RecurrenceRuleName{c.rule}.featureDecay();
}
bool decays(const TreeCase &c) { return RecurrenceRuleName{c.rule}.decays(); }
bool deltas(const TreeCase &c) { return RecurrenceRuleName{c.rule}.deltas(); }

constexpr int64_t kHk = 2, kHv = 4, kDv = 12, kBatch = 2;

std::string modelJson(const TreeCase &c) {
  return R"({"model": "t", "layers": [{"name": "lin",
    "type": "linear_attention", "rule": ")" +
         c.rule + R"(", "num_k_heads": 2, "num_v_heads": 4, "k_dim": )" +
         std::to_string(c.keyDim) + R"(,
    "v_dim": 12, "chunk_size": 16, "qk_l2norm": true, "tree": true)" +
         (!c.gate         ? ""
          : c.sigmoidGate ? R"(, "output_gate": "rmsnorm_sigmoid")"
                          : R"(, "output_gate": "rmsnorm_silu")") +
         (c.pool ? R"(, "layout": {"ragged": true})" : "") +
         R"(}], "speculative": {"max_tree_nodes": )" +
         std::to_string(c.maxNodes) + "}}";
}

/// Steps `nodes` of batch row b of a [B, H, T(, F)] tensor, as [1, H, n(, F)].
ref::Tensor pick(const ref::Tensor &x, int64_t b,
                 const std::vector<int64_t> &nodes) {
  std::vector<int64_t> shape = x.shape();
  shape[0] = 1;
  shape[2] = static_cast<int64_t>(nodes.size());
  ref::Tensor out(shape);
  const int64_t features = x.rank() == 4 ? x.dim(3) : 1;
  for (int64_t h = 0; h < x.dim(1); ++h)
    for (size_t i = 0; i < nodes.size(); ++i)
      for (int64_t f = 0; f < features; ++f) {
        if (x.rank() == 4)
          out(0, h, static_cast<int64_t>(i), f) = x(b, h, nodes[i], f);
        else
          out(0, h, static_cast<int64_t>(i)) = x(b, h, nodes[i]);
      }
  return out;
}

ref::Tensor stateRow(const ref::Tensor &s, int64_t b) {
  ref::Tensor out({1, s.dim(1), s.dim(2), s.dim(3)});
  for (int64_t h = 0; h < s.dim(1); ++h)
    for (int64_t d = 0; d < s.dim(2); ++d)
      for (int64_t e = 0; e < s.dim(3); ++e)
        out(0, h, d, e) = s(b, h, d, e);
  return out;
}

struct Inputs {
  ref::Tensor q, k, v, g, beta, s0, z, w;
};

class TreeRecurrence
    : public testing::TestWithParam<std::tuple<TreeCase, Backend>> {};

TEST_P(TreeRecurrence, MatchesEveryPath) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(modelJson(c)), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t T = c.nodes;
  Inputs x{ref::randomTensor({kBatch, kHk, T, c.keyDim}, rng),
           ref::randomTensor({kBatch, kHk, T, c.keyDim}, rng),
           ref::randomTensor({kBatch, kHv, T, kDv}, rng),
           featureDecays(c)
               ? ref::randomTensor({kBatch, kHv, T, c.keyDim}, rng, -1, 0)
               : ref::randomTensor({kBatch, kHv, T}, rng, -2, 0),
           ref::randomTensor({kBatch, kHv, T}, rng, 0.05, 0.95),
           ref::randomTensor({kBatch, kHv, c.keyDim, kDv}, rng, -0.1, 0.1),
           ref::randomTensor({kBatch, kHv, T, kDv}, rng),
           ref::randomTensor({kDv}, rng)};
  ref::IntTensor parents = randomParents(kBatch, T, rng, c.chain);
  // Over a pool, batch row b's state is slot slots[b] of 5, the others
  // junk that neither entry may read or write.
  constexpr int64_t kPoolSlots = 5;
  ref::Tensor pool =
      ref::randomTensor({kPoolSlots, kHv, c.keyDim, kDv}, rng, -0.1, 0.1);
  ref::IntTensor slots({kBatch});
  slots(0) = 3, slots(1) = 1;
  if (c.pool)
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t h = 0; h < kHv; ++h)
        for (int64_t d = 0; d < c.keyDim; ++d)
          for (int64_t e = 0; e < kDv; ++e)
            pool(slots(b), h, d, e) = x.s0(b, h, d, e);
  // S_init, or the pool and its slots.
  auto addStates = [&](std::vector<Tensor> &inputs) {
    if (!c.pool)
      return inputs.push_back(toRuntime(x.s0));
    inputs.push_back(toRuntime(pool));
    inputs.push_back(intsToRuntime(slots));
  };

  std::vector<Tensor> common{toRuntime(x.q), toRuntime(x.k), toRuntime(x.v)};
  if (decays(c))
    common.push_back(toRuntime(x.g));
  if (deltas(c))
    common.push_back(toRuntime(x.beta));
  ref::Recurrence options;
  options.rule = RecurrenceRuleName{c.rule}.rule();
  options.qkL2Norm = true;
  auto pathRecurrence = [&](int64_t b, const std::vector<int64_t> &nodes) {
    ref::Tensor g = pick(x.g, b, nodes), beta = pick(x.beta, b, nodes);
    return ref::linearRecurrence(pick(x.q, b, nodes), pick(x.k, b, nodes),
                                 pick(x.v, b, nodes), decays(c) ? &g : nullptr,
                                 deltas(c) ? &beta : nullptr, stateRow(x.s0, b),
                                 options);
  };

  // .tree: node t's output is the last of its root-to-node path's.
  std::vector<Tensor> treeInputs = common;
  treeInputs.push_back(intsToRuntime(parents));
  addStates(treeInputs);
  if (c.gate) {
    treeInputs.push_back(toRuntime(x.z));
    treeInputs.push_back(toRuntime(x.w));
  }
  std::vector<Tensor> tree = runEntry(*model, "lin.tree", treeInputs);
  ASSERT_EQ(tree.size(), 1u);
  ref::Tensor expected({kBatch, kHv, T, kDv});
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int64_t> path;
      for (int64_t u = t; u >= 0; u = parents(b, u))
        path.insert(path.begin(), u);
      ref::Tensor o = pathRecurrence(b, path).output;
      if (c.gate)
        o = ref::rmsNormGate(o, pick(x.z, b, path), x.w, 1e-6,
                             c.sigmoidGate ? ref::GateActivation::Sigmoid
                                           : ref::GateActivation::Silu);
      for (int64_t h = 0; h < kHv; ++h)
        for (int64_t e = 0; e < kDv; ++e)
          expected(b, h, t, e) =
              o(0, h, static_cast<int64_t>(path.size()) - 1, e);
    }
  EXPECT_LE(ref::maxRelativeError(fromRuntime(tree[0]), expected), 1e-4) << "o";

  // .commit: the deepest node's path in batch row 0, the root alone in
  // row 1.
  ref::IntTensor path({kBatch, T}), length({kBatch});
  std::vector<std::vector<int64_t>> accepted(kBatch);
  for (int64_t u = T - 1; u >= 0; u = parents(0, u))
    accepted[0].insert(accepted[0].begin(), u);
  accepted[1] = {0};
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t i = 0; i < T; ++i)
      path(b, i) = i < static_cast<int64_t>(accepted[b].size())
                       ? static_cast<int32_t>(accepted[b][i])
                       : -1;
    length(b) = static_cast<int32_t>(accepted[b].size());
  }
  std::vector<Tensor> commitInputs = common;
  commitInputs.push_back(intsToRuntime(path));
  commitInputs.push_back(intsToRuntime(length));
  const size_t poolInput = commitInputs.size();
  addStates(commitInputs);
  std::vector<Tensor> commit = runEntry(*model, "lin.commit", commitInputs);
  // Over a pool: no output, each row's slot advanced, the others as they
  // were.
  ASSERT_EQ(commit.size(), c.pool ? 0u : 1u);
  ref::Tensor state = c.pool ? pool : ref::Tensor({kBatch, kHv, c.keyDim, kDv});
  for (int64_t b = 0; b < kBatch; ++b) {
    ref::Tensor s = pathRecurrence(b, accepted[b]).state;
    for (int64_t h = 0; h < kHv; ++h)
      for (int64_t d = 0; d < c.keyDim; ++d)
        for (int64_t e = 0; e < kDv; ++e)
          state(c.pool ? slots(b) : b, h, d, e) = s(0, h, d, e);
  }
  const ref::Tensor committed =
      fromRuntime(c.pool ? commitInputs[poolInput] : commit[0]);
  EXPECT_LE(ref::maxRelativeError(committed, state), 1e-4) << "S";
}

std::vector<TreeCase> cases() {
  std::vector<TreeCase> all;
  for (const char *rule : kRecurrenceRules) {
    TreeCase c;
    c.rule = rule;
    c.label = rule;
    all.push_back(c);
  }
  TreeCase gated;
  gated.label = "gated_delta_gate";
  gated.gate = true;
  all.push_back(gated);
  TreeCase one;
  one.label = "one_node";
  one.nodes = 1;
  all.push_back(one);
  TreeCase full;
  full.label = "max_nodes";
  full.nodes = 32;
  all.push_back(full);
  TreeCase chain;
  chain.label = "chain";
  chain.nodes = 20;
  chain.chain = true;
  all.push_back(chain);
  // A tree of 60 nodes in chunks of 64 at Dk = 128: on CUDA the chunk's
  // products on the tensor cores (four blocks of 16 nodes in T's
  // inversion, the ancestor relation for the causal mask).
  TreeCase wide;
  wide.label = "tensor_core_tree";
  wide.nodes = 60;
  wide.maxNodes = 64;
  wide.keyDim = 128;
  wide.gate = true;
  all.push_back(wide);
  // Trees of at most 8 nodes with Dk = 72: the CUDA kernel splits each
  // state column over 4 threads (SimtRecurrenceColumns).
  for (const char *rule : {"gated_delta", "gla", "kda"}) {
    TreeCase small;
    small.label = std::string("split_columns_") + rule;
    small.rule = rule;
    small.nodes = 7;
    small.maxNodes = 8;
    small.keyDim = 72;
    all.push_back(small);
  }
  // Trees whose chunk buffers exceed the CUDA kernel's shared memory (a
  // 256 x 256 score matrix alone is 256 KiB): they live in global scratch.
  for (const char *rule : {"gated_delta", "gla", "kda"}) {
    TreeCase large;
    large.label = std::string("large_tree_") + rule;
    large.rule = rule;
    large.nodes = 200;
    large.maxNodes = 256;
    large.gate = true;
    large.sigmoidGate = large.rule == "kda";
    all.push_back(large);
  }
  // A ragged layer's trees over its state pool, every rule, a gate, the
  // tensor-core tree.
  for (const char *rule : kRecurrenceRules) {
    TreeCase pooled;
    pooled.rule = rule;
    pooled.label = std::string("pool_") + rule;
    pooled.pool = true;
    pooled.gate = pooled.rule == "gated_delta";
    all.push_back(pooled);
  }
  TreeCase widePool = wide;
  widePool.label = "pool_tensor_core_tree";
  widePool.pool = true;
  all.push_back(widePool);
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, TreeRecurrence,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend());

} // namespace
} // namespace attn::e2e
