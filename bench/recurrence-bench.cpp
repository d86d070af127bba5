//===- recurrence-bench.cpp - Chunked linear recurrences against the machine
//===//
//
// Not a test: prints tables. Gated DeltaNet (gated_delta, qk_l2norm, no
// output gate) at B=1, H=8 (Hk = Hv), Dk=Dv=128, chunks of 32 and 64:
//
//  * prefill, L = 1K..16K: time per token, and GFLOP/s over OpenBLAS sgemm
//    (1024^3) measured in the same run on the same threads. FLOPs are those
//    of the chunked algorithm, triangular products counted half: per chunk
//    of C steps and head, 2 (3 C Dk Dv + C^2 (3 Dk + 2 Dv) / 2) + C^3 / 3.
//    The growth t(8K) / t(2K) shows whether the cost is linear in L (4).
//  * the same recurrence step by step at L = 1K and 4K, two ways:
//      - "recurrent kernel": one dispatch per call whose workgroups walk
//        their head's steps in order (attnc --recurrent-max-steps);
//      - "decode calls": the model's L = 1 entry called once per token, the
//        state fed back, as an engine with only a decode kernel runs it.
//
//  * every rule (linear, decay, gla, delta, gated_delta, kda) chunked at C =
//  64,
//    L = 1K..32K: the growths t(8K) / t(2K) and t(32K) / t(8K) (linear: 4)
//    and, per length, the slowest of the timed calls over the fastest, so
//    that a bimodal or drifting cost shows.
//
//   recurrence-bench [--threads N] [--repeat N] [--quick] [--only SECTION]
//
//  * the output gates that run as kernels of their own (Falcon-H1's and
//    Nemotron-H's mixer ends, Qwen3-Next's attention gate when it cannot be
//    fused) at L = 4K: GB/s against memcpy's in the same run.
//
// Sections: prefill, stepwise, rules, gates.
//
//===----------------------------------------------------------------------===//

#include "bench/Ceilings.h"

#include <map>
#include <random>

namespace {

using namespace attn::bench;

constexpr int kHeads = 8, kDim = 128;

std::string modelJson(int chunk) {
  char json[512];
  std::snprintf(json, sizeof(json),
                R"({"model": "bench", "dtype": "f32", "layers": [{"name": )"
                R"("gdn", "type": "linear_attention", "rule": "gated_delta", )"
                R"("num_k_heads": %d, "num_v_heads": %d, "k_dim": %d, )"
                R"("v_dim": %d, "chunk_size": %d, "qk_l2norm": true}]})",
                kHeads, kHeads, kDim, kDim, chunk);
  return json;
}

/// q, k, v, g, beta, S_init of one call over `length` steps: q/k/v uniform
/// in [-1, 1], log-decays in [-0.1, 0], beta in [0, 1], S_init = 0.
std::vector<attn::Tensor> randomInputs(int64_t length) {
  std::vector<attn::Tensor> inputs{
      attn::Tensor(ATTN_F32, {1, kHeads, length, kDim}),
      attn::Tensor(ATTN_F32, {1, kHeads, length, kDim}),
      attn::Tensor(ATTN_F32, {1, kHeads, length, kDim}),
      attn::Tensor(ATTN_F32, {1, kHeads, length}),
      attn::Tensor(ATTN_F32, {1, kHeads, length}),
      attn::Tensor(ATTN_F32, {1, kHeads, kDim, kDim})};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int i = 0; i < 3; ++i)
    for (int64_t j = 0; j < inputs[i].numElements(); ++j)
      inputs[i].f32()[j] = uniform(rng);
  for (int64_t j = 0; j < inputs[3].numElements(); ++j)
    inputs[3].f32()[j] = -0.05f * (uniform(rng) + 1.0f);
  for (int64_t j = 0; j < inputs[4].numElements(); ++j)
    inputs[4].f32()[j] = 0.5f * (uniform(rng) + 1.0f);
  return inputs;
}

double chunkedFlopsPerToken(int chunk) {
  const double C = chunk, Dk = kDim, Dv = kDim;
  double perChunk =
      2.0 * (3.0 * C * Dk * Dv + C * C * (3.0 * Dk + 2.0 * Dv) / 2.0) +
      C * C * C / 3.0;
  return perChunk / C * kHeads;
}

/// Median seconds of one call over all of `inputs`, into output buffers
/// allocated once (the C API is destination-passing).
double timeCall(attn::Model &model, const std::vector<attn::Tensor> &inputs,
                int repeat) {
  int32_t entry = -1;
  model.findEntry("gdn", entry);
  const int64_t length = inputs[0].shape[2];
  attn::Tensor output(ATTN_F32, {1, kHeads, length, kDim});
  attn::Tensor state(ATTN_F32, {1, kHeads, kDim, kDim});
  std::vector<attn_tensor> in;
  for (const attn::Tensor &t : inputs)
    in.push_back(t.view());
  attn_tensor out[2] = {output.view(), state.view()};
  return medianSeconds(repeat, [&] {
    if (attn_run(model.get(), entry, in.data(), static_cast<int32_t>(in.size()),
                 out, 2) != ATTN_OK)
      std::fprintf(stderr, "%s\n", attn_last_error());
  });
}

/// Median seconds of running `inputs` one token per call through the
/// L = 1 entry, the state of each call the initial state of the next. The
/// per-token slices are cut before timing; the state ping-pongs between two
/// buffers without copies.
double timeDecodeCalls(attn::Model &model,
                       const std::vector<attn::Tensor> &inputs, int repeat) {
  int32_t entry = -1;
  model.findEntry("gdn", entry);
  const int64_t length = inputs[0].shape[2];
  std::vector<std::vector<attn::Tensor>> steps(length);
  for (int64_t t = 0; t < length; ++t)
    for (int i = 0; i < 5; ++i) {
      const attn::Tensor &all = inputs[i];
      const int64_t inner = all.shape.size() == 4 ? kDim : 1;
      std::vector<int64_t> shape = all.shape;
      shape[2] = 1;
      attn::Tensor step(ATTN_F32, shape);
      for (int h = 0; h < kHeads; ++h)
        std::memcpy(step.f32() + h * inner,
                    all.f32() + (h * length + t) * inner,
                    sizeof(float) * inner);
      steps[t].push_back(std::move(step));
    }
  attn::Tensor states[2] = {inputs[5], inputs[5]};
  attn::Tensor output(ATTN_F32, {1, kHeads, 1, kDim});
  return medianSeconds(repeat, [&] {
    for (int64_t t = 0; t < length; ++t) {
      attn_tensor in[6], out[2];
      for (int i = 0; i < 5; ++i)
        in[i] = steps[t][i].view();
      in[5] = states[t % 2].view();
      out[0] = output.view();
      out[1] = states[(t + 1) % 2].view();
      if (attn_run(model.get(), entry, in, 6, out, 2) != ATTN_OK) {
        std::fprintf(stderr, "%s\n", attn_last_error());
        return;
      }
    }
  });
}

std::string ruleJson(const std::string &rule) {
  char json[512];
  std::snprintf(json, sizeof(json),
                R"({"model": "bench", "dtype": "f32", "layers": [{"name": )"
                R"("gdn", "type": "linear_attention", "rule": "%s", )"
                R"("num_k_heads": %d, "num_v_heads": %d, "k_dim": %d, )"
                R"("v_dim": %d, "chunk_size": 64}]})",
                rule.c_str(), kHeads, kHeads, kDim, kDim);
  return json;
}

/// Inputs and output buffers for entry `gdn` of `model` at B = 1 over
/// `length` steps, from its signature: log-decays ("g") in [-0.1, 0],
/// "beta" in [0, 1], the initial state 0, the rest uniform in [-1, 1].
struct RuleCall {
  std::vector<attn::Tensor> inputs, outputs;

  bool make(attn::Model &model, int64_t length) {
    int32_t entry = -1;
    if (!model.findEntry("gdn", entry).ok())
      return false;
    const int32_t numInputs = attn_entry_num_inputs(model.get(), entry);
    const int32_t numOutputs = attn_entry_num_outputs(model.get(), entry);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (int32_t a = 0; a < numInputs + numOutputs; ++a) {
      attn_argument_info info;
      if (attn_entry_argument(model.get(), entry, a, &info) != ATTN_OK)
        return false;
      std::vector<int64_t> shape;
      for (int32_t d = 0; d < info.rank; ++d)
        shape.push_back(info.dims[d] >= 0                     ? info.dims[d]
                        : std::string(info.symbols[d]) == "B" ? 1
                                                              : length);
      attn::Tensor t(ATTN_F32, shape);
      const std::string name = info.name;
      if (a < numInputs && name != "S_init")
        for (int64_t j = 0; j < t.numElements(); ++j) {
          float x = uniform(rng);
          t.f32()[j] = name == "g"      ? -0.05f * (x + 1.0f)
                       : name == "beta" ? 0.5f * (x + 1.0f)
                                        : x;
        }
      (a < numInputs ? inputs : outputs).push_back(std::move(t));
    }
    return true;
  }
};

/// Seconds of `repeat` calls (after one warm-up call): the median and the
/// fastest.
struct Spread {
  double median, fastest, slowest;
};

Spread timeSpread(attn::Model &model, RuleCall &call, int repeat) {
  int32_t entry = -1;
  model.findEntry("gdn", entry);
  std::vector<attn_tensor> in, out;
  for (const attn::Tensor &t : call.inputs)
    in.push_back(t.view());
  for (const attn::Tensor &t : call.outputs)
    out.push_back(t.view());
  std::vector<double> times;
  auto run = [&] {
    if (attn_run(model.get(), entry, in.data(), static_cast<int32_t>(in.size()),
                 out.data(), static_cast<int32_t>(out.size())) != ATTN_OK)
      std::fprintf(stderr, "%s\n", attn_last_error());
  };
  run();
  for (int r = 0; r < repeat; ++r) {
    auto begin = Clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(Clock::now() - begin).count());
  }
  auto [fastest, slowest] = std::minmax_element(times.begin(), times.end());
  return {median(times), *fastest, *slowest};
}

/// Every rule at L = 1K..32K: whether the cost is linear in L.
void ruleGrowth(int threads, int repeat, bool quick) {
  std::vector<int64_t> lengths = {1024, 2048, 8192, 32768};
  if (quick)
    lengths = {1024, 2048, 8192};
  std::printf("| rule, C=64 | L | median ms | us/token | fastest ms | "
              "slowest / fastest |\n|---|---|---|---|---|---|\n");
  std::string growths;
  for (const char *rule :
       {"linear", "decay", "gla", "delta", "gated_delta", "kda"}) {
    std::unique_ptr<attn::Model> model =
        compileAndLoad(ruleJson(rule), threads);
    if (!model)
      return;
    std::map<int64_t, Spread> times;
    for (int64_t length : lengths) {
      RuleCall call;
      if (!call.make(*model, length))
        return;
      Spread t = timeSpread(*model, call, repeat);
      times[length] = t;
      std::printf("| %s | %lld | %.2f | %.2f | %.2f | %.2f |\n", rule,
                  static_cast<long long>(length), t.median * 1e3,
                  t.median * 1e6 / length, t.fastest * 1e3,
                  t.slowest / t.fastest);
    }
    // Growth of the medians, and of the fastest calls (what the kernels
    // cost when no other tenant of the machine interferes).
    auto growth = [&](int64_t from, int64_t to, double Spread::*of) {
      return times.count(to) ? times[to].*of / times[from].*of : 0.0;
    };
    char line[200];
    std::snprintf(line, sizeof(line), "| %s | %.2f | %.2f | %.2f | %.2f |\n",
                  rule, growth(2048, 8192, &Spread::median),
                  growth(8192, 32768, &Spread::median),
                  growth(2048, 8192, &Spread::fastest),
                  growth(8192, 32768, &Spread::fastest));
    growths += line;
  }
  std::printf("\n| growth (linear: 4) | median t(8K) / t(2K) | median "
              "t(32K) / t(8K) | fastest t(8K) / t(2K) | fastest t(32K) / "
              "t(8K) |\n|---|---|---|---|---|\n%s\n",
              growths.c_str());
}

/// One output gate as a kernel of its own: its attn IR (entry @gate) and
/// the shapes of its inputs and output.
struct GateBench {
  const char *name;
  std::string source;
  std::vector<std::vector<int64_t>> inputs;
  std::vector<int64_t> output;
};

/// The gates that run after a recurrence or an attention as kernels of
/// their own, at L tokens: GB/s of the bytes each moves (inputs read,
/// output written, as STREAM counts) against memcpy's in the same run.
/// They are memory-bound: the ratio says how close they come.
void gateTable(int threads, int repeat) {
  const int64_t L = 4096;
  const std::string falcon = "tensor<1x24x4096x64xf32>";
  const std::string nemotron = "tensor<1x128x4096x64xf32>";
  const std::string qwen = "tensor<1x16x4096x256xf32>";
  const std::string headwise = "tensor<1x16x4096x1xf32>";
  const std::vector<GateBench> gates = {
      {"Falcon-H1-0.5B mixer: (y + D x) silu(z), 24 heads of 64",
       "func.func @gate(%o: " + falcon + ", %z: " + falcon + ", %x: " + falcon +
           ", %d: tensor<24xf32>) -> " + falcon +
           " {\n  %r = attn.gate %o, %z skip(%x, %d : " + falcon +
           ", tensor<24xf32>) {activation = #attn.gate_activation<silu>} : " +
           falcon + ", " + falcon + "\n  return %r : " + falcon + "\n}",
       {{1, 24, L, 64}, {1, 24, L, 64}, {1, 24, L, 64}, {24}},
       {1, 24, L, 64}},
      {"Nemotron-H mixer: rmsnorm(y + D x) of 8 groups, gate first, 128 "
       "heads of 64",
       "func.func @gate(%o: " + nemotron + ", %z: " + nemotron +
           ", %w: tensor<8192xf32>, %x: " + nemotron +
           ", %d: tensor<128xf32>) -> " + nemotron +
           " {\n  %r = attn.rmsnorm_gate %o, %z, %w skip(%x, %d : " + nemotron +
           ", tensor<128xf32>) {eps = 1.0e-5, group_size = 1024, "
           "norm_before_gate = false} : " +
           nemotron + ", " + nemotron +
           ", tensor<8192xf32>\n  return %r : " + nemotron + "\n}",
       {{1, 128, L, 64}, {1, 128, L, 64}, {8192}, {1, 128, L, 64}, {128}},
       {1, 128, L, 64}},
      {"Qwen3-Next attention output: o sigmoid(g), 16 heads of 256",
       "func.func @gate(%o: " + qwen + ", %g: " + qwen + ") -> " + qwen +
           " {\n  %r = attn.gate %o, %g : " + qwen + ", " + qwen +
           "\n  return %r : " + qwen + "\n}",
       {{1, 16, L, 256}, {1, 16, L, 256}},
       {1, 16, L, 256}},
      {"headwise: o sigmoid(g[h]), 16 heads of 256",
       "func.func @gate(%o: " + qwen + ", %g: " + headwise + ") -> " + qwen +
           " {\n  %r = attn.gate %o, %g : " + qwen + ", " + headwise +
           "\n  return %r : " + qwen + "\n}",
       {{1, 16, L, 256}, {1, 16, L, 1}},
       {1, 16, L, 256}},
  };
  MemcpyCeiling ceiling(threads);
  std::printf("| gate, L = %lld | ms | MB moved | GB/s | memcpy GB/s | x "
              "memcpy |\n|---|---|---|---|---|---|\n",
              static_cast<long long>(L));
  for (const GateBench &gate : gates) {
    std::unique_ptr<attn::Model> model = compileIRAndLoad(gate.source, threads);
    if (!model)
      return;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(-1, 1);
    std::vector<attn::Tensor> inputs;
    double bytes = 0;
    for (const std::vector<int64_t> &shape : gate.inputs) {
      attn::Tensor t(ATTN_F32, shape);
      for (int64_t j = 0; j < t.numElements(); ++j)
        t.f32()[j] = uniform(rng);
      bytes += 4.0 * t.numElements();
      inputs.push_back(std::move(t));
    }
    attn::Tensor output(ATTN_F32, gate.output);
    bytes += 4.0 * output.numElements();
    int32_t entry = -1;
    model->findEntry("gate", entry);
    std::vector<attn_tensor> in;
    for (const attn::Tensor &t : inputs)
      in.push_back(t.view());
    attn_tensor out = output.view();
    double seconds = medianSeconds(repeat, [&] {
      if (attn_run(model->get(), entry, in.data(),
                   static_cast<int32_t>(in.size()), &out, 1) != ATTN_OK)
        std::fprintf(stderr, "%s\n", attn_last_error());
    });
    double copy = ceiling.gbps(repeat);
    double gbps = bytes / seconds / 1e9;
    std::printf("| %s | %.2f | %.0f | %.1f | %.1f | %.2f |\n", gate.name,
                seconds * 1e3, bytes / 1e6, gbps, copy, gbps / copy);
  }
  std::printf("\n");
}

} // namespace

int main(int argc, char **argv) {
  BenchOptions options;
  if (!options.parse(argc, argv))
    return 2;
  const int threads = options.threads, repeat = options.repeat;
  const bool quick = options.quick;
  if (options.runs("rules"))
    ruleGrowth(threads, repeat, quick);
  if (options.runs("gates"))
    gateTable(threads, repeat);
  if (!options.runs("prefill") && !options.runs("stepwise"))
    return 0;
  double sgemm = sgemmGflops(threads, repeat);
  std::printf("threads=%d  sgemm=%.1f GFLOP/s\n\n", threads, sgemm);

  // The chunk size is the op's (Qwen3-Next uses 64); the recurrent kernel
  // does not depend on it.
  const int chunks[] = {32, 64};
  std::unique_ptr<attn::Model> chunked[2];
  for (int c = 0; c < 2; ++c)
    chunked[c] = compileAndLoad(modelJson(chunks[c]), threads);
  mlir::attn::CompileOptions stepwise;
  stepwise.recurrentMaxSteps = int64_t(1) << 40;
  std::unique_ptr<attn::Model> recurrent =
      compileAndLoad(modelJson(64), threads, stepwise);
  if (!chunked[0] || !chunked[1] || !recurrent)
    return 1;

  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192, 16384};
  if (quick)
    lengths = {1024, 2048, 8192};
  for (int c = 0; c < 2 && options.runs("prefill"); ++c) {
    std::printf("| gated_delta chunked | L | ms | us/token | GFLOP/s | x sgemm "
                "|\n|---|---|---|---|---|---|\n");
    double t2k = 0, t8k = 0;
    for (int64_t length : lengths) {
      double seconds = timeCall(*chunked[c], randomInputs(length), repeat);
      if (length == 2048)
        t2k = seconds;
      if (length == 8192)
        t8k = seconds;
      double gflops = chunkedFlopsPerToken(chunks[c]) * length / seconds / 1e9;
      std::printf("| H=%d Dk=Dv=%d C=%d | %lld | %.2f | %.2f | %.1f | %.2f |\n",
                  kHeads, kDim, chunks[c], static_cast<long long>(length),
                  seconds * 1e3, seconds * 1e6 / length, gflops,
                  gflops / sgemm);
    }
    std::printf("\ngrowth t(8K) / t(2K) = %.2f (linear: 4)\n\n", t8k / t2k);
  }

  if (!options.runs("stepwise"))
    return 0;
  std::printf("| step by step | L | ms | chunked C=32 ms | speed-up | chunked "
              "C=64 ms | speed-up |\n|---|---|---|---|---|---|---|\n");
  for (int64_t length : {int64_t(1024), int64_t(4096)}) {
    std::vector<attn::Tensor> inputs = randomInputs(length);
    double chunkedSeconds[2];
    for (int c = 0; c < 2; ++c)
      chunkedSeconds[c] = timeCall(*chunked[c], inputs, repeat);
    double kernelSeconds = timeCall(*recurrent, inputs, repeat);
    double callSeconds =
        timeDecodeCalls(*chunked[1], inputs, std::max(1, repeat / 2));
    for (auto [name, seconds] : {std::pair{"recurrent kernel", kernelSeconds},
                                 std::pair{"decode calls", callSeconds}})
      std::printf("| %s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name,
                  static_cast<long long>(length), seconds * 1e3,
                  chunkedSeconds[0] * 1e3, seconds / chunkedSeconds[0],
                  chunkedSeconds[1] * 1e3, seconds / chunkedSeconds[1]);
  }
  return 0;
}
