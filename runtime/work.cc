#include "runtime/work.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/timeout.h"
#include "trace/tracer.h"

namespace meshrt {

void Work::wait() {
  if (runner_ && !test()) runner_->run_inline(*this);
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) throw *error_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  timeout = capped_timeout(timeout);
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    throw Error(
        ErrorCode::kTimeout,
        {record_.comm ? record_.comm->global_rank : -1, record_.comm ? record_.comm->name : "",
         std::string(record_.op), static_cast<int64_t>(record_.op_seq)},
        fmt::format("not finished after waiting {} ms (state {})", timeout.count(),
                    trace::op_state_name(record_.state)));
  }
  if (error_) throw *error_;
}

bool Work::test() const {
  std::lock_guard lock(mu_);
  return done_;
}

std::optional<Error> Work::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

trace::OpRecord Work::record() const {
  std::lock_guard lock(mu_);
  return record_;
}

void Work::mark_started() {
  {
    std::lock_guard lock(mu_);
    record_.start_ns = trace::steady_now_ns();
    record_.state = trace::OpState::kStarted;
  }
  trace::emit_start(record_);
}

void Work::mark_completed() {
  {
    std::lock_guard lock(mu_);
    record_.end_ns = trace::steady_now_ns();
    record_.state = trace::OpState::kCompleted;
  }
  trace::emit_end(record_);
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void Work::mark_failed(Error error) {
  record_failure(std::move(error));
  release();
}

void Work::record_failure(Error error) {
  {
    std::lock_guard lock(mu_);
    record_.end_ns = trace::steady_now_ns();
    record_.state = trace::OpState::kFailed;
    record_.error = error.what();
    error_ = std::move(error);
  }
  trace::emit_end(record_);
}

void Work::release() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace meshrt
