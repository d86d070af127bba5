//===- ThreadPool.h - Workgroups on a fixed set of threads ------*- C++ -*-===//
//
// The CPU side of the dispatch model: a dispatch of N workgroups runs
// workgroup ids [0, N) on `size()` threads (the caller's thread is one of
// them), each thread taking the next id from a shared counter.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_THREADPOOL_H
#define ATTN_RUNTIME_THREADPOOL_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attn {

class ThreadPool {
public:
  /// `threads` <= 0: one per core.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return static_cast<int>(workers.size()) + 1; }

  /// Calls `body(id)` for every id in [0, count) and returns when all are
  /// done. Not reentrant: one parallelFor at a time per pool.
  void parallelFor(int64_t count, const std::function<void(int64_t)> &body);

private:
  void work();
  void drain();

  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t)> *job = nullptr;
  int64_t jobCount = 0;
  std::atomic<int64_t> next{0};
  uint64_t generation = 0;
  int busy = 0;
  bool stopping = false;
};

} // namespace attn

#endif // ATTN_RUNTIME_THREADPOOL_H
