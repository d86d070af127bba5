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

#include <cblas.h>

#include <algorithm>
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
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
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

/// memcpy of 512 MiB split over `threads` threads, in GB/s counted as
/// STREAM does (bytes read + bytes written).
inline double memcpyGbps(int threads, int repeat) {
  const size_t bytes = size_t(512) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double seconds = medianSeconds(repeat, [&] {
    std::vector<std::thread> pool;
    size_t chunk = bytes / threads;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::memcpy(dst.data() + t * chunk, src.data() + t * chunk, chunk);
      });
    for (std::thread &th : pool)
      th.join();
  });
  return 2.0 * bytes / seconds / 1e9;
}

/// The command line every benchmark takes:
/// `NAME [--threads N] [--repeat N] [--quick]`.
struct BenchOptions {
  int threads = 2, repeat = 5;
  bool quick = false;

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
      else {
        std::fprintf(stderr, "usage: %s [--threads N] [--repeat N] [--quick]\n",
                     argv[0]);
        return false;
      }
    }
    return true;
  }
};

/// Compiles a model description for the host CPU and loads it on
/// `threads` threads; null (with the error printed) on failure.
inline std::unique_ptr<attn::Model>
compileAndLoad(const std::string &json, int threads,
               const mlir::attn::CompileOptions &options = {}) {
  llvm::Expected<std::string> binary = mlir::attn::compileModelDescription(
      json, mlir::attn::CpuTarget::host(), options);
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

} // namespace attn::bench

#endif // ATTN_BENCH_CEILINGS_H
