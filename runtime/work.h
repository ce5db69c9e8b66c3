// The handle of an asynchronous op: wait for it, poll it, read its error and its trace record.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "../trace/op_record.h"
#include "error.h"

namespace meshrt {

class Work;

// Lets a caller blocked in Work::wait() run its op on its own thread when the op is next in line
// and nothing else runs: that saves the two thread wake-ups of a hand-off to the worker, most of
// the latency of a small collective.
class InlineRunner {
 public:
  virtual ~InlineRunner() = default;
  // Runs `work`'s op now if it is next in line and the communicator is idle; returns whether it
  // did (the op then finished).
  virtual bool run_inline(const Work& work) = 0;
};

// The state of one enqueued op, shared by the caller and the communicator's worker.
class Work {
 public:
  explicit Work(trace::OpRecord record) : record_(std::move(record)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the op finished; throws its Error if it failed. The backend bounds every op by its
  // timeout, so this returns or throws within about that time.
  void wait();
  // Like wait(), but throws Error(kTimeout) if the op has not finished after `timeout`.
  void wait(std::chrono::milliseconds timeout);
  // True once the op completed or failed; never blocks.
  bool test() const;
  // The failure, if the op failed.
  std::optional<Error> error() const;
  // A snapshot of the op's trace record (state and times as of now).
  trace::OpRecord record() const;

  // Called by the runtime: who may run the op for a waiting caller.
  void set_runner(std::shared_ptr<InlineRunner> runner) { runner_ = std::move(runner); }
  // Called by the runtime: the op began executing / finished.
  void mark_started();
  void mark_completed();
  void mark_failed(Error error);
  // mark_failed in two steps, so that the watchdog can dump the failure before any waiter sees
  // it: record (state, error, trace event), then release the waiters.
  void record_failure(Error error);
  void release();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  trace::OpRecord record_;
  std::optional<Error> error_;
  bool done_ = false;
  std::shared_ptr<InlineRunner> runner_;
};

// Shared ownership: the caller and the worker both hold the handle.
using WorkHandle = std::shared_ptr<Work>;

}  // namespace meshrt
