#include "runtime/work.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <new>

#include "runtime/timeout.h"
#include "trace/tracer.h"

namespace meshrt {
namespace {

// A thread's few spare blocks of one size. Blocks come from operator new and go back to it, so a
// block freed on another thread than the one that allocated it is fine.
template <size_t kBytes>
class BlockCache {
 public:
  // A work dropped later in the thread's exit (a static's destructor) goes straight to the heap.
  ~BlockCache() {
    for (size_t i = 0; i < count_; ++i) ::operator delete(blocks_[i], kBytes);
    count_ = 0;
    closed_ = true;
  }
  void* take() { return count_ > 0 ? blocks_[--count_] : ::operator new(kBytes); }
  void give(void* block) {
    if (!closed_ && count_ < blocks_.size()) {
      blocks_[count_++] = block;
    } else {
      ::operator delete(block, kBytes);
    }
  }

 private:
  // A program keeps a few ops of a thread in flight at once; more go back to the heap.
  std::array<void*, 8> blocks_{};
  size_t count_ = 0;
  bool closed_ = false;
};

// Gives std::allocate_shared the thread's cached blocks for its one allocation (the control
// block with the Work inside).
template <typename T>
struct RecyclingAllocator {
  using value_type = T;
  RecyclingAllocator() = default;
  template <typename U>
  RecyclingAllocator(const RecyclingAllocator<U>&) {}  // NOLINT: rebinding must be implicit.
  T* allocate(size_t n) {
    if (n != 1) return std::allocator<T>{}.allocate(n);
    return static_cast<T*>(cache().take());
  }
  void deallocate(T* p, size_t n) {
    if (n != 1) return std::allocator<T>{}.deallocate(p, n);
    cache().give(p);
  }
  static BlockCache<sizeof(T)>& cache() {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    // Initial-exec: no __tls_get_addr call per op (see trace/scope.cc).
    [[gnu::tls_model("initial-exec")]] thread_local BlockCache<sizeof(T)> blocks;
    return blocks;
  }
  template <typename U>
  bool operator==(const RecyclingAllocator<U>&) const {
    return true;
  }
};

}  // namespace

WorkHandle make_work() { return std::allocate_shared<Work>(RecyclingAllocator<Work>{}); }

void Work::wait() {
  switch (path_) {
    case WorkPath::kQueued:
      if (driver_ && !done_now()) driver_->run_inline(*this);
      break;
    case WorkPath::kLaunched:
      // An op that finished at launch (MPI's blocking path) needs no poll and no lock.
      if (!done_now()) driver_->progress(*this, std::chrono::steady_clock::time_point::max());
      break;
    case WorkPath::kLaunchedOnStream: {
      driver_->wait_on_stream(*this);
      std::lock_guard lock(record_mu_);
      if (error_) throw *error_;
      return;
    }
  }
  block_until_done();
}

void Work::synchronize() {
  if (path_ == WorkPath::kQueued) return wait();
  if (!done_now()) driver_->progress(*this, std::chrono::steady_clock::time_point::max());
  block_until_done();
}

void Work::block_until_done() {
  if (!done_now()) {
    std::unique_lock lock(mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, [this] { return done_.load(std::memory_order_seq_cst); });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (error_) throw *error_;
}

void Work::set_done() {
  // Pairs with block_until_done(): a sleeper counts itself before testing done_ under mu_, so
  // either it sees done_ or this sees it and wakes it under mu_ (no lost wake-up).
  done_.store(true, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  { std::lock_guard lock(mu_); }
  cv_.notify_all();
}

void Work::wait(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + capped_timeout(timeout);
  if (path_ != WorkPath::kQueued) {
    driver_->progress(*this, until);
  } else if (driver_ && !done_now()) {
    driver_->start(*this);
  }
  std::unique_lock lock(mu_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  const bool done =
      cv_.wait_until(lock, until, [this] { return done_.load(std::memory_order_seq_cst); });
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  lock.unlock();
  if (!done) {
    std::lock_guard record_lock(record_mu_);
    throw Error(
        ErrorCode::kTimeout,
        {record_.comm ? record_.comm->global_rank : -1, record_.comm ? record_.comm->name : "",
         std::string(record_.op), static_cast<int64_t>(trace::trace_seq(record_)),
         static_cast<int64_t>(record_.op_seq)},
        fmt::format("not finished after waiting {} ms (state {})", capped_timeout(timeout).count(),
                    trace::op_state_name(record_.state)));
  }
  if (error_) throw *error_;
}

bool Work::test() const {
  if (done_now() || !driver_) return done_now();
  if (path_ == WorkPath::kQueued) {
    driver_->start(*this);
  } else {
    driver_->progress(*this, std::chrono::steady_clock::time_point::min());
  }
  return done_now();
}

std::optional<Error> Work::error() const {
  std::lock_guard lock(record_mu_);
  return error_;
}

trace::OpRecord Work::record() const {
  std::lock_guard lock(record_mu_);
  return record_;
}

void Work::mark_started(int64_t start_ns) {
  {
    std::lock_guard lock(record_mu_);
    record_.start_ns = start_ns != 0 ? start_ns : trace::steady_now_ns();
    record_.state = trace::OpState::kStarted;
  }
  trace::emit_start(record_);
}

void Work::mark_completed(int64_t end_ns) {
  {
    std::lock_guard lock(record_mu_);
    record_.end_ns = end_ns != 0 ? end_ns : trace::steady_now_ns();
    record_.state = trace::OpState::kCompleted;
  }
  trace::emit_end(record_);
  set_done();
}

void Work::mark_failed(Error error) {
  record_failure(std::move(error));
  release();
}

void Work::record_failure(Error error) {
  {
    std::lock_guard lock(record_mu_);
    record_.end_ns = trace::steady_now_ns();
    record_.state = trace::OpState::kFailed;
    record_.error = error.what();
    error_ = std::move(error);
  }
  trace::emit_end(record_);
}

void Work::release() { set_done(); }

}  // namespace meshrt
