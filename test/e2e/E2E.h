//===- E2E.h - What the end-to-end tests share ------------------*- C++ -*-===//
//
// Compiling a model description in-process and loading it with the
// runtime, and moving tensors between the float64 reference and the
// runtime's tensors (f32, or the storage dtypes f16 and bf16).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEST_E2E_E2E_H
#define ATTN_TEST_E2E_E2E_H

#include "compiler/Compile.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "runtime/Float16.h"
#include "runtime/attn_runtime.hpp"
#include "test/reference/Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>

namespace attn::e2e {

/// SPEC §7's ALiBi slope of head h of H.
inline double alibiSlope(int64_t h, int64_t heads) {
  int64_t n = 1;
  while (n * 2 <= heads)
    n *= 2;
  return h < n ? std::exp2(-8.0 * (h + 1) / n)
               : std::exp2(-4.0 * (2 * (h - n) + 1) / n);
}

/// The dtype of a model description's "dtype".
inline attn_dtype storageDtype(const std::string &name) {
  return name == "f16" ? ATTN_F16 : name == "bf16" ? ATTN_BF16 : ATTN_F32;
}

/// `x` rounded to `dtype` (to nearest even), as a double.
inline double roundTo(attn_dtype dtype, double x) {
  float f = static_cast<float>(x);
  if (dtype == ATTN_F16)
    return halfToFloat(floatToHalf(f));
  if (dtype == ATTN_BF16)
    return bf16ToFloat(floatToBf16(f));
  return f;
}

/// One unit in the last place at 1 of a float dtype: the error of one
/// rounding to it, relative to the magnitude rounded, is at most half that.
inline double unitInLastPlace(attn_dtype dtype) {
  return dtype == ATTN_F16 ? 0x1p-10 : dtype == ATTN_BF16 ? 0x1p-7 : 0x1p-23;
}

inline Tensor toRuntime(const ref::Tensor &t, attn_dtype dtype = ATTN_F32) {
  Tensor out(dtype, t.shape());
  for (int64_t i = 0; i < t.size(); ++i) {
    float x = static_cast<float>(t.values()[i]);
    if (dtype == ATTN_F16)
      out.bits16()[i] = floatToHalf(x);
    else if (dtype == ATTN_BF16)
      out.bits16()[i] = floatToBf16(x);
    else
      out.f32()[i] = x;
  }
  return out;
}

inline ref::Tensor fromRuntime(const Tensor &t) {
  ref::Tensor out(t.shape);
  for (int64_t i = 0; i < out.size(); ++i)
    out.values()[i] = t.dtype == ATTN_F16    ? halfToFloat(t.bits16()[i])
                      : t.dtype == ATTN_BF16 ? bf16ToFloat(t.bits16()[i])
                                             : t.f32()[i];
  return out;
}

/// Uniform values in [lo, hi), rounded to `dtype` (f32 by default) so the
/// reference sees exactly the values the compiled code sees.
inline ref::Tensor randomF32(std::vector<int64_t> shape, std::mt19937_64 &rng,
                             double lo, double hi,
                             attn_dtype dtype = ATTN_F32) {
  ref::Tensor t = ref::randomTensor(std::move(shape), rng, lo, hi);
  for (double &x : t.values())
    x = roundTo(dtype, x);
  return t;
}

/// The reference mask of a model description's "mask" JSON value:
/// "none", "causal", {"sliding_window": W} or {"chunked": C}.
inline ref::Mask referenceMask(const std::string &json) {
  if (json == "\"none\"")
    return ref::Mask::none();
  if (json == "\"causal\"")
    return ref::Mask::causal();
  const int64_t size = std::stoll(json.substr(json.find(':') + 1));
  if (json.find("chunked") != std::string::npos)
    return ref::Mask::chunked(size);
  return ref::Mask::slidingWindow(size);
}

/// The seed of the random cases: a fixed one, so that a failing case keeps
/// its name and its inputs, unless ATTN_CASE_SEED names another (a hunt for
/// edge cases nobody drew yet; docs/testing.md).
inline uint64_t caseSeed() {
  const char *seed = std::getenv("ATTN_CASE_SEED");
  return seed ? std::strtoull(seed, nullptr, 10) : 20261128;
}

/// How many random cases a suite draws: `count`, or `count` times
/// ATTN_CASE_DRAWS when that is set to a positive number.
inline int randomCaseCount(int count) {
  const char *times = std::getenv("ATTN_CASE_DRAWS");
  const int factor = times ? std::atoi(times) : 1;
  return count * (factor > 0 ? factor : 1);
}

/// Draws of the random cases beside each suite's chosen ones.
struct CaseDraws {
  std::mt19937_64 rng{caseSeed()};

  /// One of `values`, uniformly.
  int64_t pick(std::initializer_list<int64_t> values) {
    return values.begin()[rng() % values.size()];
  }
  /// True with probability `percent` / 100.
  bool chance(int percent) { return static_cast<int>(rng() % 100) < percent; }
};

/// The first `features` features of every row of `t` (any rank): the
/// values a latent cache holds in its keys (a layer's "latent_kv").
inline ref::Tensor leadingFeatures(const ref::Tensor &t, int64_t features) {
  std::vector<int64_t> shape = t.shape();
  const int64_t width = shape.back();
  shape.back() = features;
  ref::Tensor out(shape);
  for (int64_t row = 0; row < t.size() / width; ++row)
    for (int64_t f = 0; f < features; ++f)
      out.values()[row * features + f] = t.values()[row * width + f];
  return out;
}

/// Row `b` of `t` ([B, ...]) as a batch of one ([1, ...]): one sequence's
/// inputs for a reference that takes a batch.
template <typename T>
ref::Array<T> batchRow(const ref::Array<T> &t, int64_t b) {
  std::vector<int64_t> shape = t.shape();
  const int64_t rowSize = t.size() / shape[0];
  shape[0] = 1;
  return ref::Array<T>(shape,
                       std::vector<T>(t.values().begin() + b * rowSize,
                                      t.values().begin() + (b + 1) * rowSize));
}

/// Attention sinks of `heads` heads (a layer's "sinks": true): logits in
/// the range of the scores, with head 0's -inf (no sink) and, beside it, one
/// high enough to take most of its rows' weight.
inline std::vector<double> randomSinks(int64_t heads, std::mt19937_64 &rng) {
  std::vector<double> sinks = randomF32({heads}, rng, -2.0, 2.0).values();
  sinks[0] = -std::numeric_limits<double>::infinity();
  if (heads > 1)
    sinks[1] = 6.0;
  return sinks;
}

/// The `sinks [H]` input (f32 whatever the model's dtype).
inline Tensor sinksToRuntime(const std::vector<double> &sinks) {
  return toRuntime(ref::Tensor({static_cast<int64_t>(sinks.size())}, sinks));
}

inline Tensor intsToRuntime(const ref::IntTensor &t) {
  Tensor out(ATTN_I32, t.shape());
  for (int64_t i = 0; i < t.size(); ++i)
    out.i32()[i] = t.values()[i];
  return out;
}

/// A linear layer's rule (SPEC §2) by its model-description name, and which
/// per-step inputs it reads: a log-decay per step (`g`, per key feature for
/// gla and kda) and a write strength (`beta`, the delta rules).
struct RecurrenceRuleName {
  std::string name;

  ref::Rule rule() const {
    static const std::pair<const char *, ref::Rule> kRules[] = {
        {"linear", ref::Rule::Linear},
        {"decay", ref::Rule::Decay},
        {"gla", ref::Rule::Gla},
        {"delta", ref::Rule::Delta},
        {"gated_delta", ref::Rule::GatedDelta},
        {"kda", ref::Rule::Kda}};
    for (auto [text, rule] : kRules)
      if (name == text)
        return rule;
    ADD_FAILURE() << "unknown rule " << name;
    return ref::Rule::Linear;
  }
  bool featureDecay() const { return name == "gla" || name == "kda"; }
  bool decays() const {
    return featureDecay() || name == "decay" || name == "gated_delta";
  }
  bool deltas() const {
    return name == "delta" || name == "gated_delta" || name == "kda";
  }
};

/// Every rule's name.
inline constexpr const char *kRecurrenceRules[] = {
    "linear", "decay", "gla", "delta", "gated_delta", "kda"};

/// A random tree of `nodes` nodes per batch row: node t's parent is uniform
/// among the earlier nodes, or (with `chain`) t - 1.
inline ref::IntTensor randomParents(int64_t batch, int64_t nodes,
                                    std::mt19937_64 &rng, bool chain = false) {
  ref::IntTensor parents({batch, nodes});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < nodes; ++t)
      parents(b, t) = t == 0  ? -1
                      : chain ? static_cast<int32_t>(t - 1)
                              : static_cast<int32_t>(rng() % t);
  return parents;
}

/// Which code runs a test's entries.
enum class Backend {
  Cpu,              // the CPU kernels
  CudaKernelsOnCpu, // the CUDA kernels' one-thread bodies, on the CPU
  Cuda,             // the CUDA kernels on the first GPU
};

inline const char *backendName(Backend backend) {
  switch (backend) {
  case Backend::Cpu:
    return "cpu";
  case Backend::CudaKernelsOnCpu:
    return "cuda_kernels_on_cpu";
  case Backend::Cuda:
    return "cuda";
  }
  return "?";
}

inline void PrintTo(Backend backend, std::ostream *os) {
  *os << backendName(backend);
}

/// Every backend: the CPU kernels, the CUDA kernels' bodies run on the CPU
/// (always), the CUDA kernels on a GPU (skipped without one).
inline auto allBackends() {
  return testing::Values(Backend::Cpu, Backend::CudaKernelsOnCpu,
                         Backend::Cuda);
}

/// A (case, backend) instance's name: the case's label, then the backend.
struct LabelAndBackend {
  template <typename Case>
  std::string operator()(
      const testing::TestParamInfo<std::tuple<Case, Backend>> &info) const {
    return std::get<0>(info.param).label + "_" +
           backendName(std::get<1>(info.param));
  }
};

/// Whether the CUDA driver can be opened at all (checked once, so tests
/// without a GPU skip before compiling anything).
inline bool cudaDriverPresent() {
  static const bool present = [] {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver)
      dlclose(driver);
    return driver != nullptr;
  }();
  return present;
}

/// Builds a binary with the given options (a model description, attn IR).
using CompileFn = std::function<llvm::Expected<std::string>(
    const mlir::attn::CompileOptions &)>;

/// Compiles with `compile` and loads the binary on `threads` threads; null
/// (and a test failure) if either fails.
inline std::unique_ptr<Model>
compileAndLoad(const CompileFn &compile, int threads,
               const mlir::attn::CompileOptions &options = {}) {
  llvm::Expected<std::string> binary = compile(options);
  EXPECT_TRUE(static_cast<bool>(binary)) << llvm::toString(binary.takeError());
  if (!binary)
    return nullptr;
  std::unique_ptr<Model> model;
  Status status =
      Model::loadMemory(binary->data(), binary->size(), threads, model);
  EXPECT_TRUE(status.ok()) << status.message;
  return model;
}

/// The CPU the tests compile for: the host, or the x86-64 level
/// ATTN_TEST_CPU names (x86-64-v2, -v3, -v4, -v4+avx512bf16,
/// -v4+avx512bf16+amx-bf16), so one
/// machine runs the suite as every level the project supports would.
inline const mlir::attn::CpuTarget &testCpu() {
  static const mlir::attn::CpuTarget target = [] {
    const char *level = std::getenv("ATTN_TEST_CPU");
    if (!level || !*level)
      return mlir::attn::CpuTarget::host();
    llvm::Expected<mlir::attn::CpuTarget> named =
        mlir::attn::CpuTarget::forLevel(level);
    if (!named) {
      std::fprintf(stderr, "ATTN_TEST_CPU: %s\n",
                   llvm::toString(named.takeError()).c_str());
      std::abort();
    }
    return *named;
  }();
  return target;
}

/// Rows [B, H, L, F] as a ragged batch's packed token-major [B L, H, F]
/// (token b L + l).
inline ref::Tensor packTokens(const ref::Tensor &t) {
  const int64_t B = t.dim(0), H = t.dim(1), L = t.dim(2), F = t.dim(3);
  ref::Tensor packed({B * L, H, F});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t f = 0; f < F; ++f)
          packed(b * L + l, h, f) = t(b, h, l, f);
  return packed;
}

/// A model description compiled for the test CPU.
inline CompileFn modelDescription(std::string json) {
  return [json = std::move(json)](const mlir::attn::CompileOptions &options) {
    return mlir::attn::compileModelDescription(json, testCpu(), options);
  };
}

/// attn IR compiled for the test CPU.
inline CompileFn attnIR(std::string source) {
  return [source = std::move(source)](const mlir::attn::CompileOptions &options)
             -> llvm::Expected<std::string> {
    mlir::DialectRegistry registry;
    mlir::attn::registerCompilerDialects(registry);
    mlir::MLIRContext context(registry);
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(source, &context);
    if (!module)
      return llvm::createStringError("the test's attn IR does not parse");
    return mlir::attn::compile(*module, mlir::attn::CompileStage::Binary,
                               testCpu(), "attn_ir", options);
  };
}

inline std::unique_ptr<Model>
compileAndLoad(const std::string &json, int threads,
               const mlir::attn::CompileOptions &options = {}) {
  return compileAndLoad(modelDescription(json), threads, options);
}

/// Runs entry `name` of `model`; a test failure if it fails.
inline std::vector<Tensor> runEntry(Model &model, const std::string &name,
                                    const std::vector<Tensor> &inputs) {
  int32_t entry = -1;
  EXPECT_TRUE(model.findEntry(name, entry).ok()) << name;
  std::vector<Tensor> outputs;
  Status status = model.run(entry, inputs, outputs);
  EXPECT_TRUE(status.ok()) << name << ": " << status.message;
  return outputs;
}

/// As compileAndLoad, for `backend`. For Backend::Cuda, sets `skip` (and
/// returns null) when this machine has no CUDA toolkit, driver or GPU.
inline std::unique_ptr<Model>
compileAndLoadFor(Backend backend, const CompileFn &compile, int threads,
                  std::string &skip, mlir::attn::CompileOptions options = {}) {
  if (backend == Backend::CudaKernelsOnCpu) {
    options.cpuRunsCudaKernels = true;
    // ATTN_STRESS_CUDA_KERNELS=1: the kernels' threads in another order,
    // their buffers starting as NaN (CompileOptions::cpuStressesCudaKernels).
    options.cpuStressesCudaKernels =
        std::getenv("ATTN_STRESS_CUDA_KERNELS") != nullptr;
  }
  if (backend != Backend::Cuda)
    return compileAndLoad(compile, threads, options);
  if (!cudaDriverPresent()) {
    skip = "skipped: no CUDA device (no CUDA driver: libcuda.so.1 not found)";
    return nullptr;
  }
  llvm::Expected<mlir::attn::CudaTarget> target =
      mlir::attn::CudaTarget::get("sm_90a", "/usr/local/cuda");
  if (!target) {
    skip =
        "skipped: no CUDA toolkit (" + llvm::toString(target.takeError()) + ")";
    return nullptr;
  }
  options.targets = mlir::attn::TargetSet::Cuda;
  options.cuda = *target;
  std::unique_ptr<Model> model = compileAndLoad(compile, threads, options);
  if (!model)
    return nullptr;
  Status status = model->setDevice(ATTN_DEVICE_CUDA);
  if (status.code == ATTN_UNSUPPORTED) {
    skip = "skipped: no CUDA device (" + status.message + ")";
    return nullptr;
  }
  EXPECT_TRUE(status.ok()) << status.message;
  return status.ok() ? std::move(model) : nullptr;
}

inline std::unique_ptr<Model>
compileAndLoadFor(Backend backend, const std::string &json, int threads,
                  std::string &skip, mlir::attn::CompileOptions options = {}) {
  return compileAndLoadFor(backend, modelDescription(json), threads, skip,
                           std::move(options));
}

} // namespace attn::e2e

#endif // ATTN_TEST_E2E_E2E_H
