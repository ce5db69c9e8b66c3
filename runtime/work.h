// The handle of an asynchronous op: wait for it, poll it, read its error and its trace record.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "../trace/op_record.h"
#include "../trace/spin_lock.h"
#include "error.h"
#include "op.h"

namespace meshrt {

class Work;

// How a Work reaches its communicator. Run-to-completion backends: a caller blocked in
// Work::wait() runs the queue up to its op on its own thread while nothing else runs, which saves
// the two thread wake-ups of a hand-off to the worker. Launching backends: the caller polls the
// launched ops itself.
class WorkDriver {
 public:
  virtual ~WorkDriver() = default;
  // Runs `work`'s op now if it is next in line and the communicator is idle; returns whether it
  // did (the op then finished).
  virtual bool run_inline(const Work& work) = 0;
  // Lets the communicator's worker start `work`'s op (and the ops queued before it) now, for a
  // caller that polls or waits with a bound instead of running it.
  virtual void start(const Work& work) = 0;
  // Polls the communicator's launched ops (completing, failing and timing them out) until
  // `work` is done or `until` passed; `until` in the past polls once.
  virtual void progress(const Work& work, std::chrono::steady_clock::time_point until) = 0;
  // Makes the caller's current device stream wait for `work`'s launched op.
  virtual void wait_on_stream(const Work& work) = 0;
};

// How the op of a Work executes (the backend's ExecutionModel, seen from the Work).
enum class WorkPath : uint8_t {
  kQueued,            // Queued; run by the first waiter, or by the communicator's worker.
  kLaunched,          // Launched into a host library; polled to completion.
  kLaunchedOnStream,  // Launched onto a device stream; wait() orders the caller's stream.
};

// The state of one enqueued op, shared by the caller and the communicator's worker. Thread-safe:
// any thread may wait on, poll or read it.
class Work {
 public:
  // Created by the communicator for each op it enqueues (through make_work(), which recycles
  // the memory of finished works), which then fills in its record.
  Work() = default;
  // For an op whose record is made elsewhere.
  explicit Work(trace::OpRecord record) : record_(std::move(record)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the op finished; throws its Error if it failed. Every op is bounded by its
  // timeout, so this returns or throws within about that time. A queued op (Gloo, in-process)
  // runs on the calling thread when nothing else runs on its communicator. GPU ops (NCCL)
  // instead make the caller's current CUDA stream wait for the op and return at once, as
  // PyTorch's Work::wait does; they throw only a failure already seen. Use synchronize() to
  // block the host.
  void wait();
  // Blocks the host until the op finished, on every backend; throws its Error if it failed.
  void synchronize();
  // Like synchronize(), but throws Error(kTimeout) if the op has not finished after `timeout`
  // (capped to kMaxTimeout). The op itself runs on: waiting again is safe. Never runs the op
  // inline: a queued op starts on its communicator's worker.
  void wait(std::chrono::milliseconds timeout);
  // True once the op completed or failed; never blocks (a launched op is polled once, a queued
  // op is started on its communicator's worker).
  bool test() const;
  // PyTorch's name for test().
  bool is_completed() const { return test(); }
  // The failure, if the op failed.
  std::optional<Error> error() const;
  // A snapshot of the op's trace record (state and times as of now).
  trace::OpRecord record() const;

  // Called by the runtime, before the work is shared: how the op executes and who drives it.
  void set_driver(std::shared_ptr<WorkDriver> driver, WorkPath path) {
    driver_ = std::move(driver);
    path_ = path;
  }
  // Called by the runtime: the op began executing (state kStarted, trace event) at `start_ns`
  // (steady clock; 0 = now).
  void mark_started(int64_t start_ns = 0);
  // Called by the runtime: the op succeeded (state kCompleted, trace event) at `end_ns` (0 =
  // now); wakes the waiters.
  void mark_completed(int64_t end_ns = 0);
  // Called by the runtime: the op failed with `error`; record_failure() then release().
  void mark_failed(Error error);
  // mark_failed's first step, so that the watchdog can dump the failure before any waiter sees
  // it: records state kFailed, the error and the end time, and emits the trace event.
  void record_failure(Error error);
  // mark_failed's second step: marks the work done and wakes the waiters.
  void release();

 private:
  friend class Communicator;
  // Whether the op completed or failed, without polling or locking.
  bool done_now() const { return done_.load(std::memory_order_acquire); }
  // Marks the work done and wakes the waiters; error_ and record_ are final by then.
  void set_done();
  // Blocks on cv_ until done_ (set by another thread); then throws the failure, if any.
  void block_until_done();

  // Guards record_ and error_: taken once or twice per op by the thread driving it, and by
  // readers of a snapshot (the watchdog, record()), so a spin lock (not mu_) keeps it cheap.
  mutable trace::SpinLock record_mu_;
  trace::OpRecord record_;
  std::optional<Error> error_;  // Written before done_, never after: readable once done_now().
  // Only for sleepers: waits on cv_ until done_.
  std::mutex mu_;
  std::condition_variable cv_;
  // Set once, after record_ and error_ are final. Atomic so that a finished op's wait() takes
  // no lock; sleepers_ says whether set_done() must take mu_ to wake anyone (the usual case on
  // the launched path is a waiter that polled the op to completion itself).
  std::atomic<bool> done_{false};
  std::atomic<int> sleepers_{0};
  std::shared_ptr<WorkDriver> driver_;
  WorkPath path_ = WorkPath::kQueued;
  // A queued op, from enqueue on (unset for launched ops), so that the communicator's queue
  // holds only handles: moving each Op into the queue and out again cost about a sixth of an
  // 8 B all_reduce's instructions.
  std::optional<Op> op_;
  std::vector<std::shared_ptr<Work>> members_;  // A kCoalesced closing entry's members.
};

// What every op call returns. Shared ownership: the caller and the worker both hold the handle,
// so dropping it does not cancel the op.
using WorkHandle = std::shared_ptr<Work>;

// A new Work with an empty record. Its memory comes from, and returns to, a small cache of the
// thread that drops the last handle: malloc and free of a Work showed as ~200 instructions per op.
WorkHandle make_work();

}  // namespace meshrt
