//===- amx-peak.cpp - The CPU's AMX bf16 tile product rate ---------------===//
//
// The ceiling of the flash kernel on AMX (bench/cpu-bf16-dot.sh): each
// thread repeats tdpbf16ps on 4 independent 16 x 16 accumulators with
// operands that stay in tile registers, so nothing but the tile unit
// limits it. Prints GFLOP/s (2 per multiply-add) over the threads.
//
//   amx-peak [THREADS]       (exit status 1 on a CPU without AMX-BF16)
//
//===----------------------------------------------------------------------===//

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

struct TileConfig {
  uint8_t palette = 1;
  uint8_t startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t bytesPerRow[16] = {};
  uint8_t rows[16] = {};
};

constexpr int64_t kRounds = 1 << 20;

/// Multiply-adds of kRounds rounds of 4 tile products on this thread.
__attribute__((target("amx-tile,amx-bf16"))) int64_t multiplyTiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytesPerRow[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
  alignas(64) static const uint16_t zeros[16 * 32] = {};
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t round = 0; round < kRounds; ++round) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sums[16 * 16];
  _tile_stored(0, sums, 64);
  _tile_release();
  if (sums[0] != 0.0f)
    std::abort(); // products of zeros: keeps the loop and its result
  return kRounds * 4 * 16 * 16 * 32;
}

} // namespace

int main(int argc, char **argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  if (threads < 1) {
    std::fprintf(stderr, "amx-peak: THREADS must be at least 1\n");
    return 2;
  }
  if (!__builtin_cpu_supports("amx-bf16")) {
    std::fprintf(stderr, "amx-peak: this CPU has no AMX-BF16\n");
    return 1;
  }
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    std::fprintf(stderr, "amx-peak: Linux refused the AMX tile state: %s\n",
                 std::strerror(errno));
    return 1;
  }
  std::atomic<int64_t> madds{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] { madds += multiplyTiles(); });
  for (std::thread &worker : workers)
    worker.join();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf("amx_bf16_gflops=%.1f threads=%d\n", 2.0 * madds / seconds / 1e9,
              threads);
  return 0;
}
