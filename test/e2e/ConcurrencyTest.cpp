//===- ConcurrencyTest.cpp - One model called from many threads -----------===//
//
// A serving engine calls one loaded model from many threads at once. Each
// call must be correct on its own: the same bits as the call made alone,
// whatever else runs on the model's pool. Checked for a softmax layer with
// split-KV decode and prefill and a chunked recurrence, on the CPU, with
// the CUDA kernels' bodies on the CPU (whose decode blocks count their
// splits done on counters zeroed by each call) and on a GPU when there is
// one (CUDA calls on one model take turns).
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

using namespace attn;

namespace {

const char *kModel = R"({"model": "shared", "dtype": "f32", "layers": [
  {"name": "attention", "type": "attention", "num_heads": 4,
   "num_kv_heads": 2, "head_dim": 32, "mask": "causal",
   "gate": "elementwise"},
  {"name": "recurrence", "type": "linear_attention", "rule": "gated_delta",
   "num_k_heads": 1, "num_v_heads": 2, "k_dim": 32, "v_dim": 48,
   "chunk_size": 16, "qk_l2norm": true, "output_gate": "rmsnorm_silu"}]})";

/// One call: the entry, its inputs and the outputs it gave alone.
struct Call {
  int32_t entry = 0;
  std::vector<Tensor> inputs, expected;
};

Tensor random(attn_dtype dtype, std::vector<int64_t> shape,
              std::mt19937_64 &rng, double lo, double hi) {
  return e2e::toRuntime(e2e::randomF32(std::move(shape), rng, lo, hi), dtype);
}

/// Calls of every kind the model has, each with its own sizes: prefill
/// and decode of the softmax layer (decode splits its keys), and the
/// recurrence over several chunks and as one step.
std::vector<Call> makeCalls(Model &model) {
  int32_t attention = -1, recurrence = -1;
  EXPECT_TRUE(model.findEntry("attention", attention).ok());
  EXPECT_TRUE(model.findEntry("recurrence", recurrence).ok());
  std::vector<Call> calls;
  std::mt19937_64 rng(11);
  for (auto [lq, lk] : {std::pair{37, 37}, std::pair{1, 900}, std::pair{5, 300},
                        std::pair{70, 130}}) {
    Call c;
    c.entry = attention;
    c.inputs = {random(ATTN_F32, {2, 4, lq, 32}, rng, -1, 1),
                random(ATTN_F32, {2, 2, lk, 32}, rng, -1, 1),
                random(ATTN_F32, {2, 2, lk, 32}, rng, -1, 1),
                random(ATTN_F32, {2, 4, lq, 32}, rng, -2, 2)};
    calls.push_back(std::move(c));
  }
  for (int64_t length : {1, 45, 100}) {
    Call c;
    c.entry = recurrence;
    c.inputs = {random(ATTN_F32, {1, 1, length, 32}, rng, -1, 1),
                random(ATTN_F32, {1, 1, length, 32}, rng, -1, 1),
                random(ATTN_F32, {1, 2, length, 48}, rng, -1, 1),
                random(ATTN_F32, {1, 2, length}, rng, -0.5, 0),
                random(ATTN_F32, {1, 2, length}, rng, 0, 1),
                random(ATTN_F32, {1, 2, 32, 48}, rng, -0.1, 0.1),
                random(ATTN_F32, {1, 2, length, 48}, rng, -1, 1),
                random(ATTN_F32, {48}, rng, 0.5, 1.5)};
    calls.push_back(std::move(c));
  }
  for (Call &c : calls) {
    Status status = model.run(c.entry, c.inputs, c.expected);
    EXPECT_TRUE(status.ok()) << status.message;
  }
  return calls;
}

class Concurrency : public testing::TestWithParam<e2e::Backend> {};

// Four threads share one model (a pool of 2) and each runs every call
// many times, in its own order; every result equals the call alone, bit for
// bit, and each thread reads back its own kernel time.
TEST_P(Concurrency, CallsFromManyThreadsMatchCallsAlone) {
  std::string skip;
  std::unique_ptr<Model> model =
      e2e::compileAndLoadFor(GetParam(), kModel, 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  const std::vector<Call> calls = makeCalls(*model);
  ASSERT_FALSE(HasFailure());

  constexpr int kThreads = 4, kRounds = 12;
  std::atomic<int> mismatches{0}, failures{0}, timeless{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round)
        for (size_t i = 0; i < calls.size(); ++i) {
          const Call &c = calls[(i + t * 3 + round) % calls.size()];
          std::vector<Tensor> outputs;
          Status status = model->run(c.entry, c.inputs, outputs);
          double ms = 0;
          if (!status.ok()) {
            ++failures;
            continue;
          }
          if (!model->lastKernelMs(ms).ok() || ms <= 0)
            ++timeless;
          for (size_t o = 0; o < outputs.size(); ++o)
            if (outputs[o].storage != c.expected[o].storage)
              ++mismatches;
        }
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(timeless.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, Concurrency,
                         testing::Values(e2e::Backend::Cpu,
                                         e2e::Backend::CudaKernelsOnCpu,
                                         e2e::Backend::Cuda),
                         [](const testing::TestParamInfo<e2e::Backend> &info) {
                           return std::string(e2e::backendName(info.param));
                         });

} // namespace

#ifdef ATTN_THREAD_SANITIZER
/// ThreadSanitizer (AttnConcurrencyTsanTests): MLIR's own threads, which
/// compile the model before the test's threads start, run uninstrumented
/// code whose locks it cannot see. Of the diagnostic engine's lock, taken
/// and released around a handler's registration, it sees only the release
/// (inline code of the test binary's): an "unlock of an unlocked mutex"
/// in the compile, on the main thread, before any other thread exists.
extern "C" const char *__tsan_default_suppressions() {
  return "called_from_lib:libMLIR.so\n"
         "race:libMLIR.so\n"
         "called_from_lib:libLLVM.so\n"
         "race:libLLVM.so\n"
         "mutex:attn::e2e::compileAndLoad\n";
}
#endif
