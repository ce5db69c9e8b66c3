// Waiting on a 32-bit word, for the collectives' transports: futexes (with a timeout, which
// std::atomic::wait lacks), the spin hint and when to spin at all. Shared, not private, futexes:
// the word may lie in a segment that other processes map.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace meshrt {

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "futex words must be plain 32-bit words");

// Wakes every thread asleep in futex_wait on `word`.
inline void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps while `word` holds `seen`, at most `timeout`; may return early (spuriously).
inline void futex_wait(std::atomic<uint32_t>& word, uint32_t seen,
                       std::chrono::nanoseconds timeout) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{static_cast<time_t>(s.count()), static_cast<long>((timeout - s).count())};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

// Tells the core this thread is spinning (x86 pause, arm yield).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether a waiter spins before it sleeps, learnt from how its last spins went. A spin that runs
// out means the peer was busy elsewhere or not running: spinning then keeps taking a core it may
// need (another process busy, more ranks than cores). After each miss the next 1, 3, 7, ... 63
// waits skip the spin, the more the longer spins keep missing; a spin that succeeds starts over.
class SpinBackoff {
 public:
  // Whether this wait may spin; counts down the skipped waits.
  bool may_spin() {
    if (skipped_ == 0) return true;
    --skipped_;
    return false;
  }
  // The spin this wait made caught its event (true) or ran out.
  void record(bool hit) {
    if (hit) {
      misses_ = 0;
      return;
    }
    misses_ = misses_ < kMaxMisses ? misses_ + 1 : kMaxMisses;
    skipped_ = (1u << misses_) - 1;
  }

 private:
  // A spin that runs out costs its whole length: with 2^6 - 1 = 63 waits skipping it, spinning
  // takes under 1% of the waits while the peer is descheduled again and again.
  static constexpr uint32_t kMaxMisses = 6;
  uint32_t misses_ = 0;   // Spins in a row that ran out.
  uint32_t skipped_ = 0;  // Waits left that skip the spin.
};

}  // namespace meshrt
