//===- ThreadPool.cpp - Workgroups on a fixed set of threads --------------===//

#include "runtime/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <system_error>

using namespace attn;

/// One parallelFor call. `body` lives on the caller's stack: it is called
/// only for ids claimed below `count`, and the caller returns only after
/// every claimed id has finished.
struct ThreadPool::Job {
  const std::function<void(int64_t)> *body;
  int64_t count;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::mutex mutex;
  std::condition_variable done;

  /// Runs ids until none is left; false once the job has none to hand out.
  void runAvailable() {
    for (int64_t id = next.fetch_add(1); id < count; id = next.fetch_add(1)) {
      (*body)(id);
      if (finished.fetch_add(1) + 1 == count) {
        std::lock_guard<std::mutex> lock(mutex);
        done.notify_all();
      }
    }
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return finished.load() == count; });
  }
};

std::unique_ptr<ThreadPool> ThreadPool::create(int threads,
                                               std::string &error) {
  if (threads <= 0)
    threads = static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(threads, 1);
  if (threads > kMaxThreads) {
    error = "a pool of " + std::to_string(threads) +
            " threads was asked for; at most " + std::to_string(kMaxThreads) +
            " are allowed";
    return nullptr;
  }
  std::unique_ptr<ThreadPool> pool(new ThreadPool());
  try {
    for (int i = 1; i < threads; ++i)
      pool->workers.emplace_back([p = pool.get()] { p->work(); });
  } catch (const std::system_error &e) {
    error = "starting thread " + std::to_string(pool->workers.size() + 1) +
            " of " + std::to_string(threads) + " failed: " + e.what();
    return nullptr; // the destructor stops the workers already started
  }
  return pool;
}

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  for (std::thread &worker : workers)
    worker.join();
  workers.clear();
}

void ThreadPool::work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (stopping)
        return;
      job = jobs.front();
    }
    job->runAvailable();
    // Every id of this job is handed out: stop offering it.
    std::lock_guard<std::mutex> lock(mutex);
    auto it = std::find(jobs.begin(), jobs.end(), job);
    if (it != jobs.end())
      jobs.erase(it);
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
  auto job = std::make_shared<Job>();
  job->body = &body;
  job->count = count;
  {
    std::lock_guard<std::mutex> lock(mutex);
    jobs.push_back(job);
  }
  wake.notify_all();
  job->runAvailable();
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = std::find(jobs.begin(), jobs.end(), job);
    if (it != jobs.end())
      jobs.erase(it);
  }
  // Every id was handed out; wait for the threads still running theirs.
  job->wait();
}
