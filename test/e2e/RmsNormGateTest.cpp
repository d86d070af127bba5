//===- RmsNormGateTest.cpp - the gated RMSNorm as its own kernel ----------===//
//
// attn.rmsnorm_gate in the forms no recurrence kernel takes (Mamba2's
// RMSNormGated: groups of features spanning heads or part of one, the gate
// before the norm, a weight per feature of the token, the skip D x before
// it), and the per-head
// form where there is no recurrence to fuse it into: on entry inputs
// ([B, H, L, Dv] and packed [T, H, Dv]) and after a Mamba2-like decay
// recurrence, against the float64 reference, on every backend.
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

using namespace attn;
using namespace attn::e2e;

namespace {

struct GateCase {
  std::string label;
  int64_t heads = 6, features = 8;
  /// Features per group (0: the op's default, a head's).
  int64_t group = 16;
  bool normBeforeGate = false;
  /// A weight per feature of the token ([H * Dv]) rather than per head's.
  bool weightPerToken = true;
  bool sigmoid = false;
  std::string dtype = "f32";
  int64_t batch = 2, length = 5;
  /// Packed token-major [T, H, Dv] (a ragged batch's layout), T = batch x
  /// length.
  bool packed = false;
  /// After a decay recurrence (q = C, k = B of 1 head of 4, v = dt x) whose
  /// output it gates.
  bool afterRecurrence = false;
  /// Mamba2's skip: o + d[h] x gated in place of o.
  bool skip = false;
};

void PrintTo(const GateCase &c, std::ostream *os) { *os << c.label; }

/// `tensor<?x6x?x8xf32>`, or packed `tensor<?x6x8xf32>`.
std::string rowType(const GateCase &c) {
  std::ostringstream os;
  os << "tensor<?x" << c.heads << (c.packed ? "" : "x?") << "x" << c.features
     << "x" << c.dtype << ">";
  return os.str();
}

int64_t weightSize(const GateCase &c) {
  return c.weightPerToken ? c.heads * c.features : c.features;
}

std::string gateAttributes(const GateCase &c) {
  std::ostringstream os;
  os << "{eps = 1.0e-5";
  if (c.group)
    os << ", group_size = " << c.group;
  if (!c.normBeforeGate)
    os << ", norm_before_gate = false";
  if (c.sigmoid)
    os << ", activation = #attn.gate_activation<sigmoid>";
  os << "}";
  return os.str();
}

std::string source(const GateCase &c) {
  const std::string rows = rowType(c);
  const std::string weight =
      "tensor<" + std::to_string(weightSize(c)) + "x" + c.dtype + ">";
  const std::string scale =
      "tensor<" + std::to_string(c.heads) + "x" + c.dtype + ">";
  // The skip's arguments (after the gate's) and its operands.
  const std::string skipArguments =
      c.skip ? ", %x: " + rows + ", %d: " + scale : "";
  const std::string skip =
      c.skip ? "skip(%x, %d : " + rows + ", " + scale + ") " : "";
  const std::string gate = "    %r = attn.rmsnorm_gate %o, %z, %w " + skip +
                           gateAttributes(c) + " : " + rows + ", " + rows +
                           ", " + weight + "\n";
  std::ostringstream os;
  os << "module @gate {\n";
  if (!c.afterRecurrence) {
    os << "  func.func @gate(%o: " << rows << ", %z: " << rows
       << ", %w: " << weight << skipArguments << ") -> " << rows << " {\n"
       << gate << "    return %r : " << rows << "\n  }\n}\n";
    return os.str();
  }
  const std::string keys = "tensor<?x1x?x4xf32>";
  const std::string decay = "tensor<?x" + std::to_string(c.heads) + "x?xf32>";
  const std::string state = "tensor<?x" + std::to_string(c.heads) + "x4x" +
                            std::to_string(c.features) + "xf32>";
  os << "  func.func @gate(%q: " << keys << ", %k: " << keys << ", %v: " << rows
     << ", %g: " << decay << ", %s: " << state << ", %z: " << rows
     << ", %w: " << weight << skipArguments << ") -> (" << rows << ", " << state
     << ") {\n"
     << "    %o, %S = attn.linear_recurrence decay %q, %k, %v decay(%g : "
     << decay << ") state(%s : " << state << ") {scale = 1.0 : f64} : " << keys
     << ", " << keys << ", " << rows << "\n"
     << gate << "    return %r, %S : " << rows << ", " << state << "\n  }\n}\n";
  return os.str();
}

class RmsNormGate
    : public testing::TestWithParam<std::tuple<GateCase, Backend>> {};

TEST_P(RmsNormGate, MatchesReference) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, attnIR(source(c)), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const attn_dtype dtype = storageDtype(c.dtype);
  const int64_t B = c.batch, H = c.heads, L = c.length, Dv = c.features;
  ref::Tensor z = randomF32({B, H, L, Dv}, rng, -3, 3, dtype);
  ref::Tensor w = randomF32({weightSize(c)}, rng, 0.5, 1.5, dtype);
  const int64_t group = c.group ? c.group : Dv;
  const auto activation =
      c.sigmoid ? ref::GateActivation::Sigmoid : ref::GateActivation::Silu;

  std::vector<Tensor> inputs;
  ref::Tensor o, state;
  if (c.afterRecurrence) {
    ref::Tensor q = randomF32({B, 1, L, 4}, rng, -1, 1);
    ref::Tensor k = randomF32({B, 1, L, 4}, rng, -1, 1);
    ref::Tensor v = randomF32({B, H, L, Dv}, rng, -1, 1);
    ref::Tensor g = randomF32({B, H, L}, rng, -2, 0);
    ref::Tensor s0 = randomF32({B, H, 4, Dv}, rng, -1, 1);
    ref::Recurrence options;
    options.rule = ref::Rule::Decay;
    options.scale = 1.0;
    ref::RecurrenceResult r =
        ref::linearRecurrence(q, k, v, &g, nullptr, s0, options);
    o = r.output;
    state = r.state;
    inputs = {toRuntime(q), toRuntime(k), toRuntime(v), toRuntime(g),
              toRuntime(s0)};
  } else {
    // Values of mixed magnitudes, so a group's norm is not a head's.
    o = randomF32({B, H, L, Dv}, rng, -2, 2, dtype);
    for (int64_t h = 1; h < H; h += 2)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t f = 0; f < Dv; ++f)
            o(b, h, l, f) = roundTo(dtype, o(b, h, l, f) * 0.125);
    inputs = {toRuntime(c.packed ? packTokens(o) : o, dtype)};
  }
  inputs.push_back(toRuntime(c.packed ? packTokens(z) : z, dtype));
  inputs.push_back(toRuntime(w, dtype));
  if (c.skip) {
    ref::Tensor x = randomF32({B, H, L, Dv}, rng, -1, 1, dtype);
    ref::Tensor d = randomF32({H}, rng, -2, 2, dtype);
    inputs.push_back(toRuntime(c.packed ? packTokens(x) : x, dtype));
    inputs.push_back(toRuntime(d, dtype));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t f = 0; f < Dv; ++f)
            o(b, h, l, f) += d(h) * x(b, h, l, f);
  }
  ref::Tensor expected = ref::groupedRmsNormGate(
      o, z, w, group, c.normBeforeGate, 1e-5, activation);
  if (c.packed)
    expected = packTokens(expected);

  std::vector<Tensor> outputs = runEntry(*model, "gate", inputs);
  ASSERT_EQ(outputs.size(), c.afterRecurrence ? 2u : 1u);
  ref::Tensor actual = fromRuntime(outputs[0]);
  ASSERT_EQ(actual.shape(), expected.shape());
  const double storageUlp = dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype);
  EXPECT_LE(ref::maxRelativeError(actual, expected), 1e-4 + storageUlp);
  if (c.afterRecurrence)
    EXPECT_LE(ref::maxRelativeError(fromRuntime(outputs[1]), state), 1e-4);
}

std::vector<GateCase> cases() {
  std::vector<GateCase> all;
  auto add = [&](GateCase c) { all.push_back(std::move(c)); };
  // Mamba2 / Nemotron-H's form: groups of two heads, the gate first, a
  // weight per feature of the token.
  add({.label = "groups_of_two_heads_gate_first"});
  // Every head in one group (transformers' Mamba2 and Bamba, n_groups 1).
  add({.label = "one_group", .heads = 3, .features = 5, .group = 15});
  // Groups of part of a head, normalized before the gate (Falcon-H1's
  // mamba_norm_before_gate), one weight for every head, sigmoid.
  add({.label = "half_heads_norm_first",
       .heads = 4,
       .features = 16,
       .group = 8,
       .normBeforeGate = true,
       .weightPerToken = false,
       .sigmoid = true});
  // The per-head form on entry inputs (no recurrence to fuse it into).
  add({.label = "per_head",
       .group = 0,
       .normBeforeGate = true,
       .weightPerToken = false});
  add({.label = "packed_tokens", .batch = 1, .length = 7, .packed = true});
  // Groups of 20 heads (a CUDA block holds one row of them).
  add({.label = "twenty_heads_a_group",
       .heads = 40,
       .features = 4,
       .group = 80,
       .length = 3});
  // Four groups in each head vector, gate first, one weight per head's
  // feature, packed.
  add({.label = "quarter_heads_packed",
       .heads = 2,
       .features = 24,
       .group = 6,
       .weightPerToken = false,
       .length = 9,
       .packed = true});
  // Longer than a CPU workgroup's run of tokens (16 of a row of 1024
  // features), the last run partial.
  add({.label = "runs_of_tokens",
       .heads = 32,
       .features = 64,
       .group = 1024,
       .length = 37,
       .skip = true});
  add({.label = "runs_of_packed_tokens",
       .heads = 32,
       .features = 64,
       .group = 512,
       .batch = 1,
       .length = 40,
       .packed = true});
  add({.label = "bf16", .dtype = "bf16", .length = 33});
  add({.label = "f16_one_token", .dtype = "f16", .batch = 1, .length = 1});
  add({.label = "empty", .length = 0});
  // After Mamba2's SSD (the decay rule), prefill and one step.
  add({.label = "after_decay_recurrence",
       .length = 70,
       .afterRecurrence = true});
  add({.label = "after_decay_step",
       .batch = 3,
       .length = 1,
       .afterRecurrence = true});
  // Mamba2's output path: the skip D x, then its gated RMSNorm.
  add({.label = "skip", .skip = true});
  add({.label = "skip_per_head_packed",
       .group = 0,
       .normBeforeGate = true,
       .weightPerToken = false,
       .packed = true,
       .skip = true});
  add({.label = "skip_bf16_twenty_heads",
       .heads = 40,
       .features = 4,
       .group = 80,
       .dtype = "bf16",
       .skip = true});
  add({.label = "skip_after_decay_recurrence",
       .length = 70,
       .afterRecurrence = true,
       .skip = true});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, RmsNormGate,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend{});

} // namespace
