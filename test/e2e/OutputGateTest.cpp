//===- OutputGateTest.cpp - attn.gate as its own kernel -------------------===//
//
// attn.gate where no softmax attention takes it into its epilogue: on entry
// inputs ([B, H, L, Dv] and packed [T, H, Dv], elementwise and headwise),
// after an attention whose ungated output is returned too, after an
// attention already gated, and the forms beyond SPEC (silu, Mamba2's skip)
// that end Falcon-H1's mixer without its norm, after a decay recurrence;
// against the float64 reference, on every backend.
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

using namespace attn;
using namespace attn::e2e;

namespace {

struct GateCase {
  std::string label;
  int64_t heads = 3, features = 20;
  /// One logit per head vector ([.., 1]).
  bool headwise = false;
  bool silu = false;
  /// Mamba2's skip: o + d[h] x gated in place of o.
  bool skip = false;
  std::string dtype = "f32";
  int64_t batch = 2, length = 7;
  /// Packed token-major [T, H, Dv], T = batch x length.
  bool packed = false;
  /// What it gates: an entry input, a softmax attention's output that the
  /// entry also returns ungated, an attention output already gated (by the
  /// same logits), or a decay recurrence's output.
  enum class Source { Input, SharedAttention, GatedAttention, Recurrence };
  Source source = Source::Input;
};

void PrintTo(const GateCase &c, std::ostream *os) { *os << c.label; }

std::string rowType(const GateCase &c, int64_t features) {
  std::ostringstream os;
  os << "tensor<?x" << c.heads << (c.packed ? "" : "x?") << "x" << features
     << "x" << c.dtype << ">";
  return os.str();
}

std::string source(const GateCase &c) {
  const std::string rows = rowType(c, c.features);
  const std::string logits = rowType(c, c.headwise ? 1 : c.features);
  const std::string scale =
      "tensor<" + std::to_string(c.heads) + "x" + c.dtype + ">";
  const std::string skipArguments =
      c.skip ? ", %x: " + rows + ", %d: " + scale : "";
  const std::string gate =
      "    %r = attn.gate %o, %g " +
      (c.skip ? "skip(%x, %d : " + rows + ", " + scale + ") " : "") +
      (c.silu ? "{activation = #attn.gate_activation<silu>} " : "") + ": " +
      rows + ", " + logits + "\n";
  std::ostringstream os;
  os << "module @gate {\n";
  switch (c.source) {
  case GateCase::Source::Input:
    os << "  func.func @gate(%o: " << rows << ", %g: " << logits
       << skipArguments << ") -> " << rows << " {\n"
       << gate << "    return %r : " << rows << "\n  }\n}\n";
    break;
  case GateCase::Source::SharedAttention:
  case GateCase::Source::GatedAttention: {
    const bool gated = c.source == GateCase::Source::GatedAttention;
    const std::string keys =
        "tensor<?x1x?x" + std::to_string(c.features) + "x" + c.dtype + ">";
    os << "  func.func @gate(%q: " << rows << ", %k: " << keys
       << ", %v: " << keys << ", %g: " << logits << skipArguments << ") -> ("
       << rows << ", " << rows << ") {\n"
       << "    %o = attn.sdpa %q, %k, %v " << (gated ? "gate(%g) " : "")
       << "{mask = #attn.mask<causal>} : " << rows << ", " << keys << ", "
       << keys << (gated ? ", " + logits : "") << "\n"
       << gate << "    return %o, %r : " << rows << ", " << rows
       << "\n  }\n}\n";
    break;
  }
  case GateCase::Source::Recurrence: {
    const std::string keys = "tensor<?x1x?x4xf32>";
    const std::string decay = "tensor<?x" + std::to_string(c.heads) + "x?xf32>";
    const std::string state = "tensor<?x" + std::to_string(c.heads) + "x4x" +
                              std::to_string(c.features) + "xf32>";
    os << "  func.func @gate(%q: " << keys << ", %k: " << keys
       << ", %v: " << rows << ", %a: " << decay << ", %s: " << state
       << ", %g: " << logits << skipArguments << ") -> (" << rows << ", "
       << state << ") {\n"
       << "    %o, %S = attn.linear_recurrence decay %q, %k, %v decay(%a : "
       << decay << ") state(%s : " << state
       << ") {scale = 1.0 : f64} : " << keys << ", " << keys << ", " << rows
       << "\n"
       << gate << "    return %r, %S : " << rows << ", " << state
       << "\n  }\n}\n";
    break;
  }
  }
  return os.str();
}

class OutputGate
    : public testing::TestWithParam<std::tuple<GateCase, Backend>> {};

TEST_P(OutputGate, MatchesReference) {
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
  auto laidOut = [&](const ref::Tensor &t) {
    return toRuntime(c.packed ? packTokens(t) : t, dtype);
  };
  ref::Tensor g = randomF32({B, H, L, c.headwise ? 1 : Dv}, rng, -4, 4, dtype);

  std::vector<Tensor> inputs;
  ref::Tensor o, secondOutput;
  switch (c.source) {
  case GateCase::Source::Input:
    o = randomF32({B, H, L, Dv}, rng, -2, 2, dtype);
    inputs = {laidOut(o)};
    break;
  case GateCase::Source::SharedAttention:
  case GateCase::Source::GatedAttention: {
    ref::Tensor q = randomF32({B, H, L, Dv}, rng, -1, 1, dtype);
    ref::Tensor k = randomF32({B, 1, L, Dv}, rng, -1, 1, dtype);
    ref::Tensor v = randomF32({B, 1, L, Dv}, rng, -1, 1, dtype);
    const bool gated = c.source == GateCase::Source::GatedAttention;
    o = ref::sdpa(q, k, v, ref::Mask::causal(), {}, gated ? &g : nullptr)
            .output;
    secondOutput = o;
    inputs = {laidOut(q), toRuntime(k, dtype), toRuntime(v, dtype)};
    break;
  }
  case GateCase::Source::Recurrence: {
    ref::Tensor q = randomF32({B, 1, L, 4}, rng, -1, 1);
    ref::Tensor k = randomF32({B, 1, L, 4}, rng, -1, 1);
    ref::Tensor v = randomF32({B, H, L, Dv}, rng, -1, 1);
    ref::Tensor a = randomF32({B, H, L}, rng, -2, 0);
    ref::Tensor s0 = randomF32({B, H, 4, Dv}, rng, -1, 1);
    ref::Recurrence options;
    options.rule = ref::Rule::Decay;
    options.scale = 1.0;
    ref::RecurrenceResult r =
        ref::linearRecurrence(q, k, v, &a, nullptr, s0, options);
    o = r.output;
    secondOutput = r.state;
    inputs = {toRuntime(q), toRuntime(k), toRuntime(v), toRuntime(a),
              toRuntime(s0)};
    break;
  }
  }
  inputs.push_back(laidOut(g));
  ref::Tensor gatedInput = o;
  if (c.skip) {
    ref::Tensor x = randomF32({B, H, L, Dv}, rng, -1, 1, dtype);
    ref::Tensor d = randomF32({H}, rng, -2, 2, dtype);
    inputs.push_back(laidOut(x));
    inputs.push_back(toRuntime(d, dtype));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t f = 0; f < Dv; ++f)
            gatedInput(b, h, l, f) += d(h) * x(b, h, l, f);
  }
  ref::Tensor expected =
      c.silu ? ref::siluGate(gatedInput, g) : ref::sigmoidGate(gatedInput, g);
  if (c.packed)
    expected = packTokens(expected);

  std::vector<Tensor> outputs = runEntry(*model, "gate", inputs);
  const bool second = c.source != GateCase::Source::Input;
  ASSERT_EQ(outputs.size(), second ? 2u : 1u);
  ref::Tensor gated = fromRuntime(outputs[second ? 1 : 0]);
  ref::Tensor actual = c.source == GateCase::Source::Recurrence
                           ? fromRuntime(outputs[0])
                           : gated;
  ASSERT_EQ(actual.shape(), expected.shape());
  const double storageUlp = dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype);
  // Attention outputs are rounded to the storage dtype before the gate.
  const double rounding = c.source == GateCase::Source::SharedAttention ||
                                  c.source == GateCase::Source::GatedAttention
                              ? 2 * storageUlp
                              : storageUlp;
  EXPECT_LE(ref::maxRelativeError(actual, expected), 1e-4 + rounding);
  if (second) {
    ref::Tensor other =
        fromRuntime(outputs[c.source == GateCase::Source::Recurrence ? 1 : 0]);
    if (c.packed)
      secondOutput = packTokens(secondOutput);
    EXPECT_LE(ref::maxRelativeError(other, secondOutput), 1e-4 + rounding);
  }
}

std::vector<GateCase> cases() {
  std::vector<GateCase> all;
  auto add = [&](GateCase c) { all.push_back(std::move(c)); };
  using Source = GateCase::Source;
  // SPEC §1.2's gate on entry inputs: nothing to fuse it into.
  add({.label = "elementwise"});
  add({.label = "headwise", .headwise = true});
  add({.label = "packed", .batch = 1, .length = 11, .packed = true});
  add({.label = "packed_headwise",
       .headwise = true,
       .length = 5,
       .packed = true});
  add({.label = "one_feature", .heads = 5, .features = 1, .length = 9});
  // Longer than a CPU workgroup's run of tokens (64 of a head of 64, 32
  // packed of 4 heads of 32), the last run partial.
  add({.label = "runs_of_tokens",
       .heads = 2,
       .features = 64,
       .silu = true,
       .skip = true,
       .length = 150});
  add({.label = "runs_of_packed_tokens",
       .heads = 4,
       .features = 32,
       .headwise = true,
       .batch = 1,
       .length = 150,
       .packed = true});
  add({.label = "bf16", .dtype = "bf16", .length = 33});
  add({.label = "f16_one_token", .dtype = "f16", .batch = 1, .length = 1});
  add({.label = "empty", .length = 0});
  // An attention output the entry returns ungated as well, and one gated
  // twice.
  add({.label = "shared_attention_output", .source = Source::SharedAttention});
  add({.label = "shared_attention_output_headwise_bf16",
       .headwise = true,
       .dtype = "bf16",
       .length = 19,
       .source = Source::SharedAttention});
  add({.label = "gated_attention_gated_again",
       .source = Source::GatedAttention});
  // Beyond SPEC: silu, and Mamba2's skip (Falcon-H1's mixer without its
  // norm), after the decay recurrence too.
  add({.label = "silu", .silu = true});
  add({.label = "silu_headwise", .headwise = true, .silu = true});
  add({.label = "skip_silu", .silu = true, .skip = true});
  add({.label = "skip_sigmoid_headwise_packed",
       .heads = 6,
       .features = 8,
       .headwise = true,
       .skip = true,
       .packed = true});
  add({.label = "skip_silu_bf16",
       .heads = 4,
       .features = 64,
       .silu = true,
       .skip = true,
       .dtype = "bf16",
       .batch = 3,
       .length = 5});
  add({.label = "skip_silu_after_decay_recurrence",
       .silu = true,
       .skip = true,
       .length = 70,
       .source = Source::Recurrence});
  add({.label = "skip_silu_after_decay_step",
       .silu = true,
       .skip = true,
       .batch = 3,
       .length = 1,
       .source = Source::Recurrence});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, OutputGate,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend{});

} // namespace
