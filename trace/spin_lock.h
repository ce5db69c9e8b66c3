// A lock for a few fields held for a few instructions, on paths that run once per op: one atomic
// exchange to take it and a plain store to give it back, where a std::mutex costs two atomic
// read-modify-writes and a library call each way (measured on the MPI op path,
// docs/performance.md).
#pragma once

#include <atomic>
#include <thread>

namespace meshrt::trace {

// Meets Lockable (std::lock_guard works). Waiters yield rather than spin hard: on a busy machine
// the holder may be descheduled, and spinning would only delay it.
class SpinLock {
 public:
  void lock() noexcept {
    while (busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  }
  bool try_lock() noexcept { return !busy_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { busy_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> busy_{false};
};

}  // namespace meshrt::trace
