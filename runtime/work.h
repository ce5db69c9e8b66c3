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

// The state of one enqueued op, shared by the caller and the communicator's worker. Thread-safe:
// any thread may wait on, poll or read it.
class Work {
 public:
  // Created by the communicator for each op it enqueues, from the op's trace record.
  explicit Work(trace::OpRecord record) : record_(std::move(record)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the op finished; throws its Error if it failed. The backend bounds every op by its
  // timeout, so this returns or throws within about that time. When the op is next in line and
  // the communicator is idle, runs it on the calling thread (see InlineRunner).
  void wait();
  // Like wait(), but throws Error(kTimeout) if the op has not finished after `timeout` (capped to
  // kMaxTimeout). The op itself runs on: waiting again is safe. Never runs the op inline.
  void wait(std::chrono::milliseconds timeout);
  // True once the op completed or failed; never blocks.
  bool test() const;
  // The failure, if the op failed.
  std::optional<Error> error() const;
  // A snapshot of the op's trace record (state and times as of now).
  trace::OpRecord record() const;

  // Called by the runtime, before the work is shared: who may run the op for a waiting caller.
  void set_runner(std::shared_ptr<InlineRunner> runner) { runner_ = std::move(runner); }
  // Called by the runtime: the op began executing (state kStarted, start time, trace event).
  void mark_started();
  // Called by the runtime: the op succeeded (state kCompleted, end time, trace event); wakes the
  // waiters.
  void mark_completed();
  // Called by the runtime: the op failed with `error`; record_failure() then release().
  void mark_failed(Error error);
  // mark_failed's first step, so that the watchdog can dump the failure before any waiter sees
  // it: records state kFailed, the error and the end time, and emits the trace event.
  void record_failure(Error error);
  // mark_failed's second step: marks the work done and wakes the waiters.
  void release();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  trace::OpRecord record_;
  std::optional<Error> error_;
  bool done_ = false;
  std::shared_ptr<InlineRunner> runner_;
};

// What every op call returns. Shared ownership: the caller and the worker both hold the handle,
// so dropping it does not cancel the op.
using WorkHandle = std::shared_ptr<Work>;

}  // namespace meshrt
