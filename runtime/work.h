// The handle of an asynchronous op: wait for it, poll it, read its error and its trace record.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "runtime/error.h"
#include "trace/op_record.h"

namespace meshrt {

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

  // Called by the runtime: the op began executing / finished.
  void mark_started();
  void mark_completed();
  void mark_failed(Error error);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  trace::OpRecord record_;
  std::optional<Error> error_;
  bool done_ = false;
};

// Shared ownership: the caller and the worker both hold the handle.
using WorkHandle = std::shared_ptr<Work>;

}  // namespace meshrt
