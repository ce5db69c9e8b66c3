// A bench-only model of meshrt::Communicator's op handoff, to measure what the handoff itself
// costs (bench/collective_bench --handoff-experiment, bench/op_overhead_bench) and to try a
// candidate fix without touching the runtime.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace meshrt::bench {

// Runs ops on a worker thread with the same handoff as meshrt::Communicator: the caller queues
// under a mutex and notifies after unlocking; the worker pops, runs, and completes the job under
// the job's own mutex + condition variable, which wait() sleeps on. With `steal`, wait() runs the
// job on the calling thread if the worker has not taken it yet (FIFO order kept: one job runs at
// a time, always the queue's front) -- a candidate fix for meshrt's small-op latency.
class HandoffRunner {
 public:
  struct Job {
    std::function<void()> fn;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };

  explicit HandoffRunner(bool steal) : steal_(steal) {}
  ~HandoffRunner() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  std::shared_ptr<Job> submit(std::function<void()> fn) {
    auto job = std::make_shared<Job>();
    job->fn = std::move(fn);
    {
      std::lock_guard lock(mu_);
      if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
      queue_.push_back(job);
    }
    cv_.notify_one();
    return job;
  }

  void wait(const std::shared_ptr<Job>& job) {
    if (steal_) {
      std::unique_lock lock(mu_);
      if (!busy_ && !queue_.empty() && queue_.front() == job) {
        queue_.pop_front();
        busy_ = true;
        lock.unlock();
        complete(*job);
        lock.lock();
        busy_ = false;
        const bool more = !queue_.empty();
        lock.unlock();
        if (more) cv_.notify_all();
        return;
      }
    }
    std::unique_lock lock(job->mu);
    job->cv.wait(lock, [&] { return job->done; });
  }

 private:
  static void complete(Job& job) {
    job.fn();
    {
      std::lock_guard lock(job.mu);
      job.done = true;
    }
    job.cv.notify_all();
  }

  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || (!queue_.empty() && !busy_); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      complete(*job);
      std::lock_guard lock(mu_);
      busy_ = false;
    }
  }

  const bool steal_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace meshrt::bench
