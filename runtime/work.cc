#include "runtime/work.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/timeout.h"
#include "trace/tracer.h"

namespace meshrt {

void Work::wait() {
  switch (path_) {
    case WorkPath::kQueued:
      if (driver_ && !done_now()) driver_->run_inline(*this);
      break;
    case WorkPath::kLaunched:
      driver_->progress(*this, std::chrono::steady_clock::time_point::max());
      break;
    case WorkPath::kLaunchedOnStream: {
      driver_->wait_on_stream(*this);
      std::lock_guard lock(mu_);
      if (error_) throw *error_;
      return;
    }
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) throw *error_;
}

void Work::synchronize() {
  if (path_ == WorkPath::kQueued) return wait();
  driver_->progress(*this, std::chrono::steady_clock::time_point::max());
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) throw *error_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + capped_timeout(timeout);
  if (path_ != WorkPath::kQueued) {
    driver_->progress(*this, until);
  } else if (driver_ && !done_now()) {
    driver_->start(*this);
  }
  std::unique_lock lock(mu_);
  if (!cv_.wait_until(lock, until, [this] { return done_; })) {
    throw Error(
        ErrorCode::kTimeout,
        {record_.comm ? record_.comm->global_rank : -1, record_.comm ? record_.comm->name : "",
         std::string(record_.op), static_cast<int64_t>(record_.op_seq)},
        fmt::format("not finished after waiting {} ms (state {})", capped_timeout(timeout).count(),
                    trace::op_state_name(record_.state)));
  }
  if (error_) throw *error_;
}

bool Work::test() const {
  {
    std::lock_guard lock(mu_);
    if (done_ || !driver_) return done_;
  }
  if (path_ == WorkPath::kQueued) {
    driver_->start(*this);
  } else {
    driver_->progress(*this, std::chrono::steady_clock::time_point::min());
  }
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

void Work::mark_started(int64_t start_ns) {
  {
    std::lock_guard lock(mu_);
    record_.start_ns = start_ns != 0 ? start_ns : trace::steady_now_ns();
    record_.state = trace::OpState::kStarted;
  }
  trace::emit_start(record_);
}

void Work::mark_completed(int64_t end_ns) {
  {
    std::lock_guard lock(mu_);
    record_.end_ns = end_ns != 0 ? end_ns : trace::steady_now_ns();
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
