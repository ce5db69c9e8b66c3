// A bench-only model of meshrt::Communicator's op handoff, to measure what the handoff itself
// costs (bench/collective_bench --handoff-experiment, bench/op_overhead_bench) and to try
// candidate fixes without touching the runtime.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace meshrt::bench {

// Runs jobs in FIFO order, one at a time.
//   kHandoff  like meshrt::Communicator today: submit() queues under a mutex and notifies the
//             worker after unlocking; the worker pops, runs, and completes the job under the job's
//             own mutex + condition variable, which wait() sleeps on. Two thread wake-ups per op.
//   kSteal    the same, but wait() runs the job on the calling thread if the worker has not
//             taken it yet. The worker is still notified by every submit().
//   kInline   a synchronous fast path: submit() runs the job on the calling thread when nothing
//             is queued or running (else it queues as kHandoff). No wake-up at all; the bound of
//             what removing the handoff can gain. (A runtime would offer this only where the
//             caller waits right away, e.g. an explicit blocking call.)
class HandoffRunner {
 public:
  enum class Mode { kHandoff, kSteal, kInline };

  struct Job {
    std::function<void()> fn;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };

  explicit HandoffRunner(Mode mode) : mode_(mode) {}
  ~HandoffRunner() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  HandoffRunner(const HandoffRunner&) = delete;
  HandoffRunner& operator=(const HandoffRunner&) = delete;

  std::shared_ptr<Job> submit(std::function<void()> fn) {
    auto job = std::make_shared<Job>();
    job->fn = std::move(fn);
    {
      std::unique_lock lock(mu_);
      if (mode_ == Mode::kInline && queue_.empty() && !busy_) {
        busy_ = true;
        lock.unlock();
        run_here(*job);
        return job;
      }
      if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
      queue_.push_back(job);
    }
    cv_.notify_one();
    return job;
  }

  void wait(const std::shared_ptr<Job>& job) {
    if (mode_ == Mode::kSteal) {
      std::unique_lock lock(mu_);
      if (!busy_ && !queue_.empty() && queue_.front() == job) {
        queue_.pop_front();
        busy_ = true;
        lock.unlock();
        run_here(*job);
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

  // Runs `job` on the calling thread (busy_ already set), then lets the worker go on.
  void run_here(Job& job) {
    complete(job);
    std::unique_lock lock(mu_);
    busy_ = false;
    const bool more = !queue_.empty();
    lock.unlock();
    if (more) cv_.notify_all();
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

  const Mode mode_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool busy_ = false;  // A job is running (on the worker or a caller).
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace meshrt::bench
