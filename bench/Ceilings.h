//===- Ceilings.h - What the benchmarks measure against ---------*- C++ -*-===//
//
// The machine's own ceilings, measured in the same run as the kernels they
// judge: OpenBLAS sgemm for compute, a large memcpy for bandwidth; and the
// timing and model-loading helpers every benchmark uses.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_BENCH_CEILINGS_H
#define ATTN_BENCH_CEILINGS_H

#include "compiler/Compile.h"
#include "runtime/attn_runtime.hpp"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace attn::bench {

using Clock = std::chrono::steady_clock;

/// The median of `values` (not empty).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// The median of `repeat` timed runs of `body`, after one warm-up run.
template <typename F> double medianSeconds(int repeat, F &&body) {
  body(); // warm up
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) {
    auto begin = Clock::now();
    body();
    times.push_back(
        std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return median(std::move(times));
}

/// OpenBLAS sgemm 1024^3 on `threads` threads, in GFLOP/s.
inline double sgemmGflops(int threads, int repeat) {
  openblas_set_num_threads(threads);
  const int n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double seconds = medianSeconds(repeat, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f,
                a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * n * n * n / seconds / 1e9;
}

/// memcpy of 512 MiB split over threads, in GB/s counted as STREAM does
/// (bytes read + bytes written). The buffers are allocated (and faulted in)
/// once, so the ceiling can be timed again beside each kernel.
class MemcpyCeiling {
public:
  explicit MemcpyCeiling(int threads)
      : threads(threads), src(kBytes, 1), dst(kBytes, 0) {}

  /// The median rate of `repeat` copies, after one warm-up copy.
  double gbps(int repeat) {
    return 2.0 * kBytes / medianSeconds(repeat, [&] { copy(); }) / 1e9;
  }
  /// The median rate of `repeat` reads of the source buffer (bytes read):
  /// the ceiling of a kernel that only reads, such as decode. It can lie
  /// below the copy's count (a Zen 5 VM: 31 GB/s read, 41 GB/s copied).
  double readGbps(int repeat) {
    return 1.0 * kBytes / medianSeconds(repeat, [&] { read(src); }) / 1e9;
  }
  /// Reads a clean 64 MiB buffer, twice the L3 of the hosts this runs on:
  /// afterwards the caches hold none of a kernel's inputs (a call then
  /// takes 1.4-1.6x as long as back to back). Reads, not the copy: on this
  /// VM memory runs slower for ~10 ms after a large copy, not after reads;
  /// and not more: after a 128 MiB sweep half the calls ran at half speed,
  /// as if one thread's vCPU had to be woken by the host first.
  void evictCaches() {
    std::vector<std::thread> pool;
    size_t chunk = kEvictBytes / threads;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        uint64_t sum = 0;
        for (size_t i = t * chunk; i < (t + 1) * chunk; i += 64)
          sum += static_cast<unsigned char>(evict[i]);
        sink += sum;
      });
    for (std::thread &th : pool)
      th.join();
  }

private:
  /// Sums every 8-byte word of `buffer`, split over the threads (a loop
  /// the compiler vectorizes: its loads, not its adds, set the pace).
  void read(const std::vector<char> &buffer) {
    std::vector<std::thread> pool;
    size_t words = buffer.size() / sizeof(uint64_t) / threads;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const auto *first =
            reinterpret_cast<const uint64_t *>(buffer.data()) + t * words;
        uint64_t sum = 0;
        for (size_t i = 0; i < words; ++i)
          sum += first[i];
        sink += sum;
      });
    for (std::thread &th : pool)
      th.join();
  }

  void copy() {
    std::vector<std::thread> pool;
    size_t chunk = kBytes / threads;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::memcpy(dst.data() + t * chunk, src.data() + t * chunk, chunk);
      });
    for (std::thread &th : pool)
      th.join();
  }

  static constexpr size_t kBytes = size_t(512) << 20;
  static constexpr size_t kEvictBytes = size_t(64) << 20;
  int threads;
  std::vector<char> src, dst, evict = std::vector<char>(kEvictBytes, 1);
  std::atomic<uint64_t> sink{0};
};

/// The command line every benchmark takes:
/// `NAME [--threads N] [--repeat N] [--quick] [--only SECTION[,SECTION...]]`.
struct BenchOptions {
  int threads = 2, repeat = 5;
  bool quick = false;
  /// Empty: every table; otherwise only the tables of these names,
  /// separated by commas.
  std::string only;

  bool runs(const char *section) const {
    if (only.empty())
      return true;
    std::string list = "," + only + ",";
    return list.find("," + std::string(section) + ",") != std::string::npos;
  }

  /// False (with the usage printed) on an unknown argument.
  bool parse(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--threads" && i + 1 < argc)
        threads = std::atoi(argv[++i]);
      else if (arg == "--repeat" && i + 1 < argc)
        repeat = std::atoi(argv[++i]);
      else if (arg == "--quick")
        quick = true;
      else if (arg == "--only" && i + 1 < argc)
        only = argv[++i];
      else {
        std::fprintf(stderr,
                     "usage: %s [--threads N] [--repeat N] [--quick] "
                     "[--only SECTION[,SECTION...]]\n",
                     argv[0]);
        return false;
      }
    }
    return true;
  }
};

/// Loads a compiled binary on `threads` threads; null (with the error
/// printed) when compiling or loading failed.
inline std::unique_ptr<attn::Model>
loadBinary(llvm::Expected<std::string> binary, int threads) {
  if (!binary) {
    std::fprintf(stderr, "%s\n", llvm::toString(binary.takeError()).c_str());
    return nullptr;
  }
  std::unique_ptr<attn::Model> model;
  attn::Status status =
      attn::Model::loadMemory(binary->data(), binary->size(), threads, model);
  if (!status.ok())
    std::fprintf(stderr, "%s\n", status.message.c_str());
  return model;
}

/// Compiles a model description for the host CPU and loads it on
/// `threads` threads; null (with the error printed) on failure.
inline std::unique_ptr<attn::Model>
compileAndLoad(const std::string &json, int threads,
               const mlir::attn::CompileOptions &options = {}) {
  return loadBinary(mlir::attn::compileModelDescription(
                        json, mlir::attn::CpuTarget::host(), options),
                    threads);
}

/// As compileAndLoad, for a module of attn IR (ops the model descriptions
/// do not build alone).
inline std::unique_ptr<attn::Model> compileIRAndLoad(const std::string &source,
                                                     int threads) {
  mlir::DialectRegistry registry;
  mlir::attn::registerCompilerDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  if (!module) {
    std::fprintf(stderr, "the benchmark's attn IR does not parse\n");
    return nullptr;
  }
  return loadBinary(mlir::attn::compile(*module,
                                        mlir::attn::CompileStage::Binary,
                                        mlir::attn::CpuTarget::host(), "bench"),
                    threads);
}

} // namespace attn::bench

#endif // ATTN_BENCH_CEILINGS_H
