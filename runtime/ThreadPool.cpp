//===- ThreadPool.cpp - Workgroups on a fixed set of threads --------------===//

#include "runtime/ThreadPool.h"

using namespace attn;

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0)
    threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0)
    threads = 1;
  for (int i = 1; i < threads; ++i)
    workers.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  for (std::thread &worker : workers)
    worker.join();
}

void ThreadPool::drain() {
  for (int64_t id = next.fetch_add(1); id < jobCount; id = next.fetch_add(1))
    (*job)(id);
}

void ThreadPool::work() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping)
        return;
      seen = generation;
      ++busy;
    }
    drain();
    {
      std::lock_guard<std::mutex> lock(mutex);
      --busy;
    }
    done.notify_all();
  }
}

void ThreadPool::parallelFor(int64_t count,
                             const std::function<void(int64_t)> &body) {
  if (count <= 0)
    return;
  if (workers.empty() || count == 1) {
    for (int64_t id = 0; id < count; ++id)
      body(id);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    job = &body;
    jobCount = count;
    next.store(0);
    ++generation;
  }
  wake.notify_all();
  drain();
  // Every id was handed out; wait for the workers still running theirs.
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return busy == 0; });
  job = nullptr;
}
