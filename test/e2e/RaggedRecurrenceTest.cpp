//===- RaggedRecurrenceTest.cpp - SPEC §8 linear layers, every backend ----===//
//
// A linear layer with "layout": {"ragged": true}: sequences of 0 to 70
// steps packed token-major in one call (decode and prefill mixed), their
// states in a pool at scattered slots, updated in place. Checked on the CPU
// kernels, the CUDA kernels' CPU bodies and (when there is one) a GPU
// against the float64 reference of §2 run on each sequence alone, over two
// calls that continue the sequences through the pool; the pool's other
// slots must come back untouched.
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <random>

namespace attn::e2e {
namespace {

struct RaggedCase {
  std::string label, rule = "gated_delta";
  /// Steps of each sequence in the first and the second call.
  std::vector<int64_t> first, second;
  bool gate = false;
};

bool decays(const RaggedCase &c) { return RecurrenceRuleName{c.rule}.decays(); }
bool deltas(const RaggedCase &c) { return RecurrenceRuleName{c.rule}.deltas(); }

constexpr int64_t kHk = 2, kHv = 4, kDk = 20, kDv = 12, kPool = 9;

std::string modelJson(const RaggedCase &c) {
  return R"({"model": "r", "layers": [{"name": "lin",
    "type": "linear_attention", "rule": ")" +
         c.rule + R"(", "num_k_heads": 2, "num_v_heads": 4, "k_dim": 20,
    "v_dim": 12, "chunk_size": 16, "qk_l2norm": true,
    "layout": {"ragged": true})" +
         (c.gate ? R"(, "output_gate": "rmsnorm_silu")" : "") + "}]}";
}

/// One sequence's steps of every input, [1, H, L(, F)] as the reference
/// takes them.
struct Steps {
  ref::Tensor q, k, v, g, beta, z;
};

/// Rows [first, first + n) of a packed [T, H(, F)] tensor as [1, H, n(, F)].
ref::Tensor unpack(const ref::Tensor &x, int64_t first, int64_t n) {
  std::vector<int64_t> shape{1, x.dim(1), n};
  if (x.rank() == 3)
    shape.push_back(x.dim(2));
  ref::Tensor out(shape);
  const int64_t features = x.rank() == 3 ? x.dim(2) : 1;
  for (int64_t h = 0; h < x.dim(1); ++h)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t f = 0; f < features; ++f) {
        if (x.rank() == 3)
          out(0, h, t, f) = x(first + t, h, f);
        else
          out(0, h, t) = x(first + t, h);
      }
  return out;
}

/// Appends [1, H, n(, F)] to [1, H, L(, F)] along the steps.
ref::Tensor concat(const ref::Tensor &a, const ref::Tensor &b) {
  std::vector<int64_t> shape = a.shape();
  shape[2] = a.dim(2) + b.dim(2);
  ref::Tensor out(shape);
  const int64_t features = a.rank() == 4 ? a.dim(3) : 1;
  for (int64_t h = 0; h < a.dim(1); ++h)
    for (int64_t t = 0; t < shape[2]; ++t)
      for (int64_t f = 0; f < features; ++f) {
        const ref::Tensor &src = t < a.dim(2) ? a : b;
        int64_t ts = t < a.dim(2) ? t : t - a.dim(2);
        if (a.rank() == 4)
          out(0, h, t, f) = src(0, h, ts, f);
        else
          out(0, h, t) = src(0, h, ts);
      }
  return out;
}

class RaggedRecurrence
    : public testing::TestWithParam<std::tuple<RaggedCase, Backend>> {};

TEST_P(RaggedRecurrence, MatchesEachSequenceAcrossCalls) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(modelJson(c)), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t B = static_cast<int64_t>(c.first.size());
  ASSERT_EQ(c.second.size(), c.first.size());

  // Sequence b lives in slot slots[b] of the pool, scattered.
  std::vector<int32_t> slots;
  for (int64_t b = 0; b < B; ++b)
    slots.push_back(static_cast<int32_t>((kPool - 1 - 2 * b + kPool) % kPool));
  ref::Tensor pool = ref::randomTensor({kPool, kHv, kDk, kDv}, rng, -0.1, 0.1);
  const ref::Tensor initialPool = pool;
  ref::IntTensor stateIdx({B});
  for (int64_t b = 0; b < B; ++b)
    stateIdx(b) = slots[b];
  const ref::Tensor w = ref::randomTensor({kDv}, rng);

  ref::Recurrence options;
  options.rule = RecurrenceRuleName{c.rule}.rule();
  options.qkL2Norm = true;
  std::vector<std::optional<Steps>> history(B);

  for (const std::vector<int64_t> *lengths : {&c.first, &c.second}) {
    ref::IntTensor cu({B + 1});
    cu(0) = 0;
    for (int64_t b = 0; b < B; ++b)
      cu(b + 1) = cu(b) + static_cast<int32_t>((*lengths)[b]);
    const int64_t T = cu(B);
    ref::Tensor q = ref::randomTensor({T, kHk, kDk}, rng),
                k = ref::randomTensor({T, kHk, kDk}, rng),
                v = ref::randomTensor({T, kHv, kDv}, rng),
                g = RecurrenceRuleName{c.rule}.featureDecay()
                        ? ref::randomTensor({T, kHv, kDk}, rng, -1, 0)
                        : ref::randomTensor({T, kHv}, rng, -2, 0),
                beta = ref::randomTensor({T, kHv}, rng, 0.05, 0.95),
                z = ref::randomTensor({T, kHv, kDv}, rng);

    std::vector<Tensor> inputs{toRuntime(q), toRuntime(k), toRuntime(v)};
    if (decays(c))
      inputs.push_back(toRuntime(g));
    if (deltas(c))
      inputs.push_back(toRuntime(beta));
    const size_t poolInput = inputs.size();
    inputs.push_back(toRuntime(pool));
    inputs.push_back(intsToRuntime(stateIdx));
    if (c.gate) {
      inputs.push_back(toRuntime(z));
      inputs.push_back(toRuntime(w));
    }
    inputs.push_back(intsToRuntime(cu));
    std::vector<Tensor> outputs = runEntry(*model, "lin", inputs);
    ASSERT_EQ(outputs.size(), 1u);
    ref::Tensor o = fromRuntime(outputs[0]);
    pool = fromRuntime(inputs[poolInput]);

    // Each sequence's whole history from the first call's initial state:
    // its outputs of this call are the last ones, its state is its slot.
    ref::Tensor expectedOut({T, kHv, kDv});
    ref::Tensor expectedPool = initialPool;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t first = cu(b), n = (*lengths)[b];
      Steps now{unpack(q, first, n),    unpack(k, first, n),
                unpack(v, first, n),    unpack(g, first, n),
                unpack(beta, first, n), unpack(z, first, n)};
      Steps all = now;
      if (history[b]) {
        const Steps &h = *history[b];
        all = {concat(h.q, now.q),       concat(h.k, now.k),
               concat(h.v, now.v),       concat(h.g, now.g),
               concat(h.beta, now.beta), concat(h.z, now.z)};
      }
      history[b] = all;
      ref::Tensor s0({1, kHv, kDk, kDv});
      for (int64_t h = 0; h < kHv; ++h)
        for (int64_t d = 0; d < kDk; ++d)
          for (int64_t e = 0; e < kDv; ++e)
            s0(0, h, d, e) = initialPool(slots[b], h, d, e);
      const int64_t L = all.q.dim(2);
      ref::RecurrenceResult r = ref::linearRecurrence(
          all.q, all.k, all.v, decays(c) ? &all.g : nullptr,
          deltas(c) ? &all.beta : nullptr, s0, options);
      ref::Tensor out =
          c.gate ? ref::rmsNormGate(r.output, all.z, w) : r.output;
      for (int64_t h = 0; h < kHv; ++h) {
        for (int64_t t = 0; t < n; ++t)
          for (int64_t e = 0; e < kDv; ++e)
            expectedOut(first + t, h, e) = out(0, h, L - n + t, e);
        for (int64_t d = 0; d < kDk; ++d)
          for (int64_t e = 0; e < kDv; ++e)
            expectedPool(slots[b], h, d, e) = r.state(0, h, d, e);
      }
    }
    if (T > 0) {
      EXPECT_LE(ref::maxRelativeError(o, expectedOut), 1e-4) << "o";
    }
    // Every slot: the sequences' updated, the others untouched.
    EXPECT_LE(ref::maxRelativeError(pool, expectedPool), 1e-4) << "states";
  }
}

std::vector<RaggedCase> cases() {
  // Empty, decode (1), short and multi-chunk (chunk_size 16) sequences.
  const std::vector<int64_t> mixed{0, 1, 3, 37, 1, 70};
  const std::vector<int64_t> next{5, 1, 0, 1, 20, 1};
  std::vector<RaggedCase> all;
  for (const char *rule : kRecurrenceRules) {
    RaggedCase c;
    c.rule = rule;
    c.label = rule;
    c.first = mixed;
    c.second = next;
    all.push_back(c);
  }
  RaggedCase gated;
  gated.label = "gated_delta_gate";
  gated.gate = true;
  gated.first = mixed;
  gated.second = next;
  all.push_back(gated);
  RaggedCase decode;
  decode.label = "decode_only";
  decode.first = {1, 1, 1};
  decode.second = {1, 1, 1};
  all.push_back(decode);
  // No more tokens than sequences, but unevenly: the CUDA host takes the
  // decode kernel (built for chunks of one step), which walks a sequence
  // of 3 steps as 3 chunks.
  RaggedCase uneven;
  uneven.label = "few_tokens_uneven";
  uneven.first = {0, 3, 0, 1};
  uneven.second = {2, 0, 1, 0};
  all.push_back(uneven);
  RaggedCase single;
  single.label = "one_long_sequence";
  single.first = {50};
  single.second = {33};
  all.push_back(single);
  return all;
}

/// Batches drawn at random (from a fixed seed): every rule over up to
/// kPool sequences whose lengths in the two calls mix empty, decode,
/// within-chunk and multi-chunk steps in orders nobody picked.
std::vector<RaggedCase> randomCases(int count) {
  CaseDraws draw;
  std::vector<RaggedCase> all;
  for (int i = 0; i < count; ++i) {
    RaggedCase c;
    c.label = "random" + std::to_string(i);
    c.rule = kRecurrenceRules[draw.rng() % std::size(kRecurrenceRules)];
    c.gate = draw.chance(30);
    const int64_t sequences = draw.pick({1, 2, 4, 7, kPool});
    for (int64_t b = 0; b < sequences; ++b) {
      c.first.push_back(draw.pick({0, 1, 1, 2, 3, 15, 16, 17, 37, 70}));
      c.second.push_back(draw.pick({0, 1, 1, 2, 3, 15, 16, 17, 37, 70}));
    }
    all.push_back(c);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Random, RaggedRecurrence,
    testing::Combine(testing::ValuesIn(randomCases(randomCaseCount(16))),
                     allBackends()),
    LabelAndBackend());

INSTANTIATE_TEST_SUITE_P(Cases, RaggedRecurrence,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend());

} // namespace
} // namespace attn::e2e
