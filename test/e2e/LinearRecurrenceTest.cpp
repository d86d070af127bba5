//===- LinearRecurrenceTest.cpp - linear-attention layers, end to end -----===//
//
// Each case writes a `linear_attention` layer (SPEC §3), compiles it with
// the library attnc uses, runs the entry on random inputs with the runtime
// and compares o and the final state with the float64 step-by-step
// recurrence of SPEC §2. Lengths cover the decode step (L = 1), chunk - 1,
// chunk, chunk + 1 and several hundred steps; Dk != Dv and sizes that are no
// multiple of the vector width; Hv / Hk of 1 and 2; random initial states;
// log-decays down to -5; and continuation (running L1 then L2 steps from
// the returned state equals running L1 + L2 steps). Every case runs on
// every backend: the CPU kernels, the CUDA kernels run on the CPU, and the
// CUDA kernels on a GPU (skipped without one).
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

struct RecurrenceCase {
  std::string label;
  std::string rule = "gated_delta";
  int64_t keyHeads = 2, valueHeads = 4, keyDim = 40, valueDim = 24;
  int64_t chunk = 16;
  bool l2norm = true, gate = false;
  /// The gate's activation of z: Qwen3-Next's silu or Kimi Linear's sigmoid.
  bool sigmoidGate = false;
  std::optional<double> scale;
  /// Log-decays are uniform in [-maxDecay, 0].
  double maxDecay = 5.0;
  /// Keys are uniform in [-keyRange, keyRange] (before normalization).
  double keyRange = 1.0;
  int64_t batch = 1, length = 17;
  /// Split the run into `length` steps then `continuation` more.
  int64_t continuation = 0;
  /// Runtime threads. With batch x value heads below it, the chunked form
  /// can run over column tiles of the state (see the cases below), down to
  /// `stateColumns` columns (0: the compiler's default).
  int threads = 2;
  int64_t stateColumns = 0;
  /// The storage dtype of everything but the states (f32, f16, bf16).
  std::string dtype = "f32";
};

void PrintTo(const RecurrenceCase &c, std::ostream *os) { *os << c.label; }

bool hasFeatureDecay(const std::string &rule) {
  return RecurrenceRuleName{rule}.featureDecay();
}
bool hasDecay(const std::string &rule) {
  return RecurrenceRuleName{rule}.decays();
}
bool hasBeta(const std::string &rule) {
  return RecurrenceRuleName{rule}.deltas();
}

std::string modelJson(const RecurrenceCase &c) {
  std::ostringstream json;
  json << R"({"model": "e2e", "dtype": ")" << c.dtype
       << R"(", "layers": [{"name": "layer",)"
       << R"( "type": "linear_attention", "rule": ")" << c.rule
       << R"(", "num_k_heads": )" << c.keyHeads << R"(, "num_v_heads": )"
       << c.valueHeads << R"(, "k_dim": )" << c.keyDim << R"(, "v_dim": )"
       << c.valueDim << R"(, "chunk_size": )" << c.chunk << R"(, "qk_l2norm": )"
       << (c.l2norm ? "true" : "false") << R"(, "output_gate": ")"
       << (!c.gate         ? "none"
           : c.sigmoidGate ? "rmsnorm_sigmoid"
                           : "rmsnorm_silu")
       << "\"";
  if (c.scale)
    json << R"(, "scale": )" << *c.scale;
  json << "}]}";
  return json.str();
}

/// Steps [begin, end) of a per-step tensor (dim 2 is the step).
ref::Tensor steps(const ref::Tensor &t, int64_t begin, int64_t end) {
  std::vector<int64_t> shape = t.shape();
  int64_t inner = 1;
  for (size_t d = 3; d < shape.size(); ++d)
    inner *= shape[d];
  const int64_t outer = shape[0] * shape[1], length = shape[2];
  shape[2] = end - begin;
  ref::Tensor out(shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = begin; s < end; ++s)
      for (int64_t i = 0; i < inner; ++i)
        out.values()[(o * (end - begin) + s - begin) * inner + i] =
            t.values()[(o * length + s) * inner + i];
  return out;
}

/// Random inputs of one call, in entry order.
struct Inputs {
  ref::Tensor q, k, v, g, beta, state, z, w;
};

Inputs randomInputs(const RecurrenceCase &c, int64_t length,
                    std::mt19937_64 &rng) {
  Inputs in;
  const int64_t B = c.batch;
  const attn_dtype dtype = storageDtype(c.dtype);
  in.q = randomF32({B, c.keyHeads, length, c.keyDim}, rng, -1, 1, dtype);
  in.k = randomF32({B, c.keyHeads, length, c.keyDim}, rng, -c.keyRange,
                   c.keyRange, dtype);
  in.v = randomF32({B, c.valueHeads, length, c.valueDim}, rng, -1, 1, dtype);
  if (hasFeatureDecay(c.rule))
    in.g = randomF32({B, c.valueHeads, length, c.keyDim}, rng, -c.maxDecay, 0,
                     dtype);
  else
    in.g = randomF32({B, c.valueHeads, length}, rng, -c.maxDecay, 0, dtype);
  in.beta = randomF32({B, c.valueHeads, length}, rng, 0.05, 0.95, dtype);
  in.state = randomF32({B, c.valueHeads, c.keyDim, c.valueDim}, rng, -1, 1);
  in.z = randomF32({B, c.valueHeads, length, c.valueDim}, rng, -3, 3, dtype);
  in.w = randomF32({c.valueDim}, rng, 0.5, 1.5, dtype);
  return in;
}

std::vector<Tensor> entryInputs(const RecurrenceCase &c, const Inputs &in) {
  const attn_dtype dtype = storageDtype(c.dtype);
  std::vector<Tensor> inputs{toRuntime(in.q, dtype), toRuntime(in.k, dtype),
                             toRuntime(in.v, dtype)};
  if (hasDecay(c.rule))
    inputs.push_back(toRuntime(in.g, dtype));
  if (hasBeta(c.rule))
    inputs.push_back(toRuntime(in.beta, dtype));
  inputs.push_back(toRuntime(in.state));
  if (c.gate) {
    inputs.push_back(toRuntime(in.z, dtype));
    inputs.push_back(toRuntime(in.w, dtype));
  }
  return inputs;
}

ref::RecurrenceResult reference(const RecurrenceCase &c, const Inputs &in) {
  ref::Recurrence options;
  options.rule = RecurrenceRuleName{c.rule}.rule();
  options.scale = c.scale;
  options.qkL2Norm = c.l2norm;
  ref::RecurrenceResult result = ref::linearRecurrence(
      in.q, in.k, in.v, hasDecay(c.rule) ? &in.g : nullptr,
      hasBeta(c.rule) ? &in.beta : nullptr, in.state, options);
  if (c.gate)
    result.output =
        ref::rmsNormGate(result.output, in.z, in.w, 1e-6,
                         c.sigmoidGate ? ref::GateActivation::Sigmoid
                                       : ref::GateActivation::Silu);
  return result;
}

/// Runs the entry; fails the test on error or a non-finite output.
std::vector<ref::Tensor> run(Model &model, const std::vector<Tensor> &inputs) {
  int32_t entry = -1;
  EXPECT_TRUE(model.findEntry("layer", entry).ok());
  std::vector<Tensor> outputs;
  Status status = model.run(entry, inputs, outputs);
  EXPECT_TRUE(status.ok()) << status.message;
  std::vector<ref::Tensor> result;
  for (const Tensor &t : outputs) {
    result.push_back(fromRuntime(t));
    for (int64_t i = 0; i < t.numElements(); ++i)
      EXPECT_TRUE(std::isfinite(result.back().values()[i])) << "element " << i;
  }
  return result;
}

constexpr double kTolerance = 1e-4;

/// Within the f32 tolerance, plus for an output stored as f16 / bf16 one
/// unit in the last place of that dtype (`storageUlp`).
void expectClose(const ref::Tensor &actual, const ref::Tensor &expected,
                 const char *what, double storageUlp = 0.0) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  double error = ref::maxRelativeError(actual, expected);
  char text[32];
  std::snprintf(text, sizeof(text), "%.3e", error);
  testing::Test::RecordProperty(std::string("max_relative_error_") + what,
                                text);
  EXPECT_LE(error, kTolerance + storageUlp) << what;
}

class LinearRecurrence
    : public testing::TestWithParam<std::tuple<RecurrenceCase, Backend>> {};

TEST_P(LinearRecurrence, MatchesReference) {
  const auto &[c, backend] = GetParam();
  mlir::attn::CompileOptions options;
  options.stateColumns = c.stateColumns;
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelJson(c), c.threads, skip, options);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const int64_t total = c.length + c.continuation;
  const attn_dtype dtype = storageDtype(c.dtype);
  // o is stored in the model's dtype, the state always in f32.
  const double outputUlp = dtype == ATTN_F32 ? 0.0 : unitInLastPlace(dtype);
  Inputs all = randomInputs(c, total, rng);
  ref::RecurrenceResult expected = reference(c, all);

  if (c.continuation == 0) {
    std::vector<ref::Tensor> outputs = run(*model, entryInputs(c, all));
    ASSERT_EQ(outputs.size(), 2u);
    expectClose(outputs[0], expected.output, "o", outputUlp);
    expectClose(outputs[1], expected.state, "S");
    return;
  }

  // Two calls: the second starts from the state the first returned.
  Inputs first = all, second = all;
  for (auto [part, begin, end] : {std::tuple{&first, int64_t(0), c.length},
                                  std::tuple{&second, c.length, total}}) {
    part->q = steps(all.q, begin, end);
    part->k = steps(all.k, begin, end);
    part->v = steps(all.v, begin, end);
    part->g = steps(all.g, begin, end);
    part->beta = steps(all.beta, begin, end);
    part->z = steps(all.z, begin, end);
  }
  std::vector<ref::Tensor> head = run(*model, entryInputs(c, first));
  ASSERT_EQ(head.size(), 2u);
  second.state = head[1];
  std::vector<ref::Tensor> tail = run(*model, entryInputs(c, second));
  ASSERT_EQ(tail.size(), 2u);
  expectClose(head[0], steps(expected.output, 0, c.length), "o_first",
              outputUlp);
  expectClose(tail[0], steps(expected.output, c.length, total), "o_second",
              outputUlp);
  expectClose(tail[1], expected.state, "S");
}

std::vector<RecurrenceCase> cases() {
  std::vector<RecurrenceCase> all;
  // Every rule at every length class of a 16-step chunk, Dk != Dv, Hv/Hk 2.
  for (const char *rule : kRecurrenceRules)
    for (int64_t length : {1, 15, 16, 17, 300}) {
      RecurrenceCase c;
      c.label = std::string(rule) + "_L" + std::to_string(length);
      c.rule = rule;
      c.length = length;
      // Without decay, sums over hundreds of steps grow: keep q/k unit.
      c.l2norm = true;
      all.push_back(c);
    }
  auto add = [&](RecurrenceCase c) { all.push_back(std::move(c)); };
  // Hv / Hk = 1, batch 2, chunk 64 at 63 / 64 / 65 and beyond.
  for (int64_t length : {63, 64, 65, 200})
    add({.label = "gated_delta_chunk64_L" + std::to_string(length),
         .keyHeads = 3,
         .valueHeads = 3,
         .keyDim = 64,
         .valueDim = 80,
         .chunk = 64,
         .batch = 2,
         .length = length});
  // The rmsnorm-silu gate on both kernels, and Qwen3-Next's head sizes.
  add({.label = "gated_delta_gate_decode", .gate = true, .length = 1});
  add({.label = "gated_delta_gate_prefill",
       .keyHeads = 1,
       .valueHeads = 2,
       .keyDim = 128,
       .valueDim = 128,
       .chunk = 64,
       .gate = true,
       .length = 150});
  add({.label = "gla_gate_chunk32",
       .rule = "gla",
       .keyDim = 36,
       .valueDim = 20,
       .chunk = 32,
       .gate = true,
       .length = 97});
  // Chunk 128, strong and weak decays.
  add({.label = "decay_chunk128_weak",
       .rule = "decay",
       .chunk = 128,
       .maxDecay = 0.05,
       .length = 260});
  add({.label = "gated_delta_chunk128_strong",
       .chunk = 128,
       .maxDecay = 5.0,
       .length = 129});
  // Weak decays: the state carries information across many chunks.
  add({.label = "gated_delta_weak_decay", .maxDecay = 0.02, .length = 300});
  add({.label = "gla_weak_decay",
       .rule = "gla",
       .maxDecay = 0.02,
       .length = 300});
  // Without the L2 normalization (small keys keep the delta rule stable),
  // and a custom scale.
  add({.label = "delta_no_l2norm",
       .rule = "delta",
       .l2norm = false,
       .keyRange = 0.15,
       .length = 40});
  add({.label = "linear_scale", .rule = "linear", .scale = 0.5, .length = 33});
  // Empty sequence: the state passes through.
  add({.label = "gated_delta_L0", .length = 0});
  // Continuation: prefill then decode, decode then prefill, prefill twice.
  add({.label = "continue_prefill_decode", .length = 37, .continuation = 1});
  add({.label = "continue_decode_prefill", .length = 1, .continuation = 40});
  add({.label = "continue_prefill_prefill",
       .rule = "gla",
       .length = 20,
       .continuation = 29});
  // One (batch, value head) and more threads: column tiles of the state,
  // the width whose critical path is the shortest (checked to be a column
  // path, not whole rows, for every case). Dv = 80: 2 tiles of 40 on 2
  // threads, 5 of 16 on 4 threads with tiles down to 16; tiles of one host
  // vector w (the narrowest the compiler takes) over Dv = 4.5 w: 5 tiles,
  // the last with w / 2 real columns; Dv = 128: 2 tiles of 64. The gated
  // cases run the rmsnorm-silu gate kernel after the tiles.
  add({.label = "gated_delta_columns",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 64,
       .valueDim = 80,
       .length = 100});
  add({.label = "gated_delta_columns_gate_4threads",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 64,
       .valueDim = 80,
       .gate = true,
       .length = 100,
       .threads = 4,
       .stateColumns = 16});
  const int64_t vector = testCpu().vectorWidth;
  add({.label = "delta_columns_one_vector_3threads",
       .rule = "delta",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 40,
       .valueDim = 4 * vector + vector / 2,
       .length = 70,
       .threads = 3,
       .stateColumns = vector});
  add({.label = "gla_columns_gate",
       .rule = "gla",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 36,
       .valueDim = 128,
       .chunk = 32,
       .gate = true,
       .length = 90});
  // f16 / bf16 storage (the states stay f32): prefill with the gate,
  // decode, gla, and a continuation.
  add({.label = "bf16_gated_delta_gate",
       .keyHeads = 1,
       .valueHeads = 2,
       .keyDim = 64,
       .valueDim = 48,
       .chunk = 32,
       .gate = true,
       .length = 70,
       .dtype = "bf16"});
  add({.label = "bf16_decode", .gate = true, .length = 1, .dtype = "bf16"});
  // The CUDA kernel with the chunk's products on warp_mma (f16 / bf16: the
  // tensor cores' operands as bf16 parts): Qwen3-Next's head dims over
  // chunks of 64 with weak decays, so the state crosses several chunks;
  // the rules without delta (v as stored is an operand) with f16's two
  // parts per stored value and a chunk of 16 over more tiles than warps.
  add({.label = "bf16_gated_delta_dims128",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 128,
       .valueDim = 128,
       .chunk = 64,
       .gate = true,
       .maxDecay = 0.05,
       .length = 150,
       .dtype = "bf16"});
  add({.label = "bf16_decay_Dv20",
       .rule = "decay",
       .keyDim = 36,
       .valueDim = 20,
       .chunk = 16,
       .length = 50,
       .dtype = "bf16"});
  add({.label = "f16_linear_Dv40",
       .rule = "linear",
       .keyDim = 24,
       .valueDim = 40,
       .chunk = 32,
       .length = 70,
       .dtype = "f16"});
  // Rows of no whole 4-byte pieces (bf16 with odd dims): the kernels
  // stage k, W, the values and (the gate) o and z an element a load
  // instead of by async copies.
  add({.label = "bf16_linear_odd_dims",
       .rule = "linear",
       .keyDim = 27,
       .valueDim = 7,
       .chunk = 16,
       .length = 40,
       .dtype = "bf16"});
  add({.label = "bf16_delta_odd_dims",
       .rule = "delta",
       .keyDim = 27,
       .valueDim = 13,
       .chunk = 16,
       .gate = true,
       .length = 37,
       .dtype = "bf16"});
  add({.label = "f16_gla", .rule = "gla", .length = 45, .dtype = "f16"});
  add({.label = "f16_continue_delta",
       .rule = "delta",
       .length = 20,
       .continuation = 21,
       .dtype = "f16"});
  // Decode steps on columns split over threads (SimtRecurrenceColumns):
  // Qwen3-Next's dims (4 parts of 32 rows), rows per part that are no
  // power of two (Dk = 100: 4 of 25) over two column tiles, 8 parts
  // (Dk = 256), and two steps in a row.
  add({.label = "bf16_decode_dims128",
       .keyHeads = 2,
       .valueHeads = 4,
       .keyDim = 128,
       .valueDim = 128,
       .chunk = 64,
       .gate = true,
       .batch = 3,
       .length = 1,
       .dtype = "bf16"});
  add({.label = "decode_Dk100_Dv50",
       .keyDim = 100,
       .valueDim = 50,
       .length = 1});
  add({.label = "decay_decode_Dk256",
       .rule = "decay",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 256,
       .valueDim = 20,
       .length = 1});
  add({.label = "continue_decode_decode", .length = 1, .continuation = 1});
  // CUDA, the per-chunk kernel on products: chunks of two blocks of 16
  // steps (T's off-diagonal block), Dk and Dv padded to the products' 16
  // (72 -> 80, 40 -> 48), a last chunk of 22 steps, two sequences, two
  // value heads a key head; and the same in f16 (k and v converted into
  // two bf16 parts).
  add({.label = "delta_chunk32_padded_dims",
       .rule = "delta",
       .keyDim = 72,
       .valueDim = 40,
       .chunk = 32,
       .batch = 2,
       .length = 150});
  add({.label = "f16_gated_delta_chunk32",
       .keyDim = 72,
       .valueDim = 40,
       .chunk = 32,
       .length = 150,
       .dtype = "f16"});
  // CUDA, the chain in blocks of half the columns when its blocks would
  // leave multiprocessors idle (threads / 4 of them here): 2 value heads
  // of 128 columns in 8 blocks of 32 on 32 threads, 8 warps each (Dk =
  // 128: 4 of its ranges of 32), chunks of 64 in bf16 with the gate;
  // Dk = 40 (padded to 48: 2 ranges of 24) over 2 blocks of 32 columns of
  // Dv = 40, the second mostly idle, chunks of a row tile (whose two
  // warps' W S rows are the same tile), and a second call from the
  // first's state.
  add({.label = "bf16_gated_delta_narrow_chain_gate",
       .keyHeads = 1,
       .valueHeads = 2,
       .keyDim = 128,
       .valueDim = 128,
       .chunk = 64,
       .gate = true,
       .length = 150,
       .threads = 32,
       .dtype = "bf16"});
  add({.label = "delta_narrow_chain_Dk40",
       .rule = "delta",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 40,
       .valueDim = 40,
       .length = 61,
       .continuation = 35,
       .threads = 8});
  // CUDA: a value dim wider than a block (2 column tiles of 128, the
  // second with 72 idle threads) and one narrower than a warp.
  add({.label = "gated_delta_Dv200_gate",
       .keyHeads = 1,
       .valueHeads = 2,
       .keyDim = 48,
       .valueDim = 200,
       .chunk = 32,
       .gate = true,
       .length = 45});
  add({.label = "decay_Dv7",
       .rule = "decay",
       .keyDim = 24,
       .valueDim = 7,
       .length = 50});
  // Kimi Delta Attention (kda: gla's decay per key feature, then the delta
  // rule): Kimi Linear's head dims over chunks of 64 with the gate and
  // weak decays (the state crosses chunks), strong decays over chunks of
  // 128, groups, continuation through decode, column tiles, bf16, and
  // decode on split columns.
  add({.label = "kda_dims128_gate",
       .rule = "kda",
       .keyHeads = 2,
       .valueHeads = 2,
       .keyDim = 128,
       .valueDim = 128,
       .chunk = 64,
       .gate = true,
       .sigmoidGate = true,
       .maxDecay = 0.05,
       .length = 150});
  add({.label = "kda_chunk128_strong",
       .rule = "kda",
       .chunk = 128,
       .maxDecay = 5.0,
       .length = 260});
  // Decays strong enough that a block of 16 steps sums past what the
  // blocked products take (kMaxBlockDecay): some blocks (7 per step at
  // most) or every block (12) take their pairs one at a time.
  for (double maxDecay : {7.0, 12.0})
    for (const char *rule : {"kda", "gla"})
      add({.label = std::string(rule) + "_decay" +
                    std::to_string(static_cast<int>(maxDecay)) + "_chunk64",
           .rule = rule,
           .keyDim = 64,
           .valueDim = 40,
           .chunk = 64,
           .maxDecay = maxDecay,
           .length = 150});
  add({.label = "kda_continue_prefill_decode_prefill",
       .rule = "kda",
       .keyHeads = 1,
       .valueHeads = 3,
       .length = 33,
       .continuation = 1});
  add({.label = "kda_continue_decode_prefill",
       .rule = "kda",
       .length = 1,
       .continuation = 40});
  add({.label = "kda_columns_gate",
       .rule = "kda",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 64,
       .valueDim = 80,
       .chunk = 32,
       .gate = true,
       .sigmoidGate = true,
       .length = 90,
       .threads = 4,
       .stateColumns = 16});
  add({.label = "bf16_kda_gate",
       .rule = "kda",
       .keyHeads = 1,
       .valueHeads = 2,
       .keyDim = 64,
       .valueDim = 48,
       .chunk = 32,
       .gate = true,
       .length = 70,
       .dtype = "bf16"});
  add({.label = "bf16_kda_decode_dims128",
       .rule = "kda",
       .keyHeads = 2,
       .valueHeads = 4,
       .keyDim = 128,
       .valueDim = 128,
       .chunk = 64,
       .gate = true,
       .sigmoidGate = true,
       .batch = 3,
       .length = 1,
       .dtype = "bf16"});
  add({.label = "kda_no_l2norm",
       .rule = "kda",
       .l2norm = false,
       .keyRange = 0.15,
       .length = 40});
  add({.label = "linear_columns_continuation",
       .rule = "linear",
       .keyHeads = 1,
       .valueHeads = 1,
       .keyDim = 64,
       .valueDim = 80,
       .length = 40,
       .continuation = 33});
  return all;
}

/// Cases drawn at random (from a fixed seed): every rule with sizes,
/// chunks, groups, dtypes, thread counts and continuations in
/// combinations nobody picked.
std::vector<RecurrenceCase> randomCases(int count) {
  CaseDraws draw;
  std::vector<RecurrenceCase> all;
  for (int i = 0; i < count; ++i) {
    RecurrenceCase c;
    c.label = "random" + std::to_string(i);
    c.rule = kRecurrenceRules[draw.rng() % std::size(kRecurrenceRules)];
    c.keyHeads = draw.pick({1, 1, 2, 3});
    c.valueHeads = c.keyHeads * draw.pick({1, 2});
    c.keyDim = draw.pick({8, 16, 24, 40, 64, 128});
    c.valueDim = draw.pick({7, 16, 24, 48, 64, 128});
    c.chunk = draw.pick({16, 32, 64, 128});
    c.l2norm = draw.chance(70);
    // Without the L2 normalization, keys of about unit norm: the delta
    // rules' step I - beta k k^T otherwise has an eigenvalue far below -1,
    // and the state (as the reference's) grows past every storage dtype.
    if (!c.l2norm)
      c.keyRange = std::sqrt(3.0 / static_cast<double>(c.keyDim));
    c.gate = draw.chance(30);
    c.sigmoidGate = draw.chance(50);
    c.batch = draw.pick({1, 1, 2, 3});
    c.length = draw.pick({0, 1, 2, 15, 16, 17, 63, 64, 65, 130, 300});
    c.continuation = draw.pick({0, 0, 1, 17, 70});
    c.threads = static_cast<int>(draw.pick({1, 2, 3, 4}));
    c.dtype = draw.chance(50) ? "f32" : draw.chance(50) ? "bf16" : "f16";
    all.push_back(c);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Random, LinearRecurrence,
    testing::Combine(testing::ValuesIn(randomCases(randomCaseCount(16))),
                     allBackends()),
    LabelAndBackend());

INSTANTIATE_TEST_SUITE_P(Cases, LinearRecurrence,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend());

} // namespace
