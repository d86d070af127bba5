//===- ThreadPool.h - Workgroups on a fixed set of threads ------*- C++ -*-===//
//
// The CPU side of the dispatch model: a dispatch of N workgroups runs
// workgroup ids [0, N) on the pool's threads and the caller's, each thread
// taking the next id from the dispatch's own counter.
//
// Any number of threads may call parallelFor at once (a serving engine
// calls one model from many threads): each call is a job of its own in a
// queue, the caller always works on its own job, and idle workers help the
// oldest job that still has ids to hand out. A job's state lives as long as
// any thread holds it, so a worker that claims an id late never reads a
// finished call's memory.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_THREADPOOL_H
#define ATTN_RUNTIME_THREADPOOL_H

#include "runtime/attn_runtime.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace attn {

class ThreadPool {
public:
  /// The most threads a pool may have (attn_model_load_* refuses more).
  static constexpr int kMaxThreads = ATTN_MAX_THREADS;

  /// Starts `threads` - 1 workers (`threads` <= 0: one per core). Fails,
  /// with `error` saying why, when the system cannot start them.
  static std::unique_ptr<ThreadPool> create(int threads, std::string &error);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return static_cast<int>(workers.size()) + 1; }

  /// Calls `body(id)` for every id in [0, count) and returns when all are
  /// done. Safe to call from several threads at once.
  void parallelFor(int64_t count, const std::function<void(int64_t)> &body);

private:
  struct Job;
  ThreadPool() = default;
  void work();
  void stop();

  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake;
  /// Jobs with ids left to hand out, oldest first.
  std::deque<std::shared_ptr<Job>> jobs;
  bool stopping = false;
};

} // namespace attn

#endif // ATTN_RUNTIME_THREADPOOL_H
