#include "trace/thread_stacks.h"

#include <backtrace.h>
#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

namespace meshrt::trace {
namespace {

constexpr int kMaxDepth = 64;

// Where an asked thread leaves its return addresses. Every thread of a capture is asked at once
// (up to kSlots at a time), so a busy machine costs one wait, not one per thread, and the main
// thread gets the whole budget. A slot's key is (capture << 32 | tid): a late answer to an earlier
// capture finds its key gone and writes nothing.
struct Slot {
  static constexpr uint64_t kClaimed = uint64_t{1} << 63;  // The thread is writing `pcs`.
  std::atomic<uint64_t> key{0};
  std::atomic<int> depth{-1};  // Set after `pcs`, once the claimed thread has written them.
  bool retired = false;        // Claimed but never finished (the thread stopped mid-copy).
  std::array<void*, kMaxDepth> pcs{};
};
constexpr int kSlots = 64;
std::array<Slot, kSlots> slots;
uint32_t capture_number = 0;  // Under capture_mu.
std::mutex capture_mu;

int this_tid() { return static_cast<int>(::syscall(SYS_gettid)); }

void on_stack_signal(int) {
  const int saved_errno = errno;
  const auto tid = static_cast<uint32_t>(this_tid());
  for (Slot& slot : slots) {
    uint64_t key = slot.key.load(std::memory_order_acquire);
    if (key == 0 || static_cast<uint32_t>(key) != tid || (key & Slot::kClaimed) != 0) continue;
    // glibc's backtrace() allocates only on its first call, made in stack_signal() beforehand.
    std::array<void*, kMaxDepth> pcs;
    const int depth = ::backtrace(pcs.data(), kMaxDepth);
    if (slot.key.compare_exchange_strong(key, key | Slot::kClaimed, std::memory_order_acq_rel)) {
      slot.pcs = pcs;
      slot.depth.store(depth, std::memory_order_release);
    }
    break;
  }
  errno = saved_errno;
}

// The signal used to ask threads, installed once; 0 when the program uses it for itself.
int stack_signal() {
  static const int sig = [] {
    const int s = SIGRTMIN + 4;
    struct sigaction current {};
    if (::sigaction(s, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return 0;
    std::array<void*, 4> warm{};
    ::backtrace(warm.data(), static_cast<int>(warm.size()));
    struct sigaction sa {};
    sa.sa_handler = on_stack_signal;
    sa.sa_flags = SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return ::sigaction(s, &sa, nullptr) == 0 ? s : 0;
  }();
  return sig;
}

backtrace_state* symbol_state() {
  // Built once, kept for the process: libbacktrace caches the debug info it read.
  static backtrace_state* state = backtrace_create_state(
      nullptr, /*threaded=*/1, [](void*, const char*, int) {}, nullptr);
  return state;
}

std::string demangle(const char* name) {
  if (name == nullptr) return "";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

// Code of the C and C++ runtimes and other system libraries, and meshrt's own (its waiting, this
// signal handler: libmeshrt*), says nothing about where the program is. Skipped before they are
// symbolised: reading their debug info would only slow the dump down.
bool folded_object(const std::string& object) {
  const std::string_view base = std::string_view(object).substr(object.rfind('/') + 1);
  return base.rfind("libmeshrt", 0) == 0 || object.rfind("/lib/", 0) == 0 ||
         object.rfind("/usr/lib/", 0) == 0 || object.rfind("/lib64/", 0) == 0;
}

void symbolise(void* pc, std::vector<StackFrame>& out) {
  Dl_info info{};
  const std::string object = ::dladdr(pc, &info) != 0 && info.dli_fname ? info.dli_fname : "";
  if (folded_object(object)) return;
  // A return address points after the call: look up the call itself.
  const uintptr_t at = reinterpret_cast<uintptr_t>(pc) - 1;
  std::vector<StackFrame> here;  // Innermost inlined function first.
  backtrace_pcinfo(
      symbol_state(), at,
      [](void* data, uintptr_t, const char* file, int line, const char* function) {
        if (function == nullptr) return 0;
        static_cast<std::vector<StackFrame>*>(data)->push_back(
            {demangle(function), file ? file : "", line});
        return 0;
      },
      [](void*, const char*, int) {}, &here);
  if (here.empty() && info.dli_sname != nullptr) here.push_back({demangle(info.dli_sname), object});
  for (StackFrame& f : here) {
    // Templates inlined from system headers (std::condition_variable::wait) are the runtime's.
    if (f.file.rfind("/usr/include/", 0) != 0) out.push_back(std::move(f));
  }
}

std::vector<int> thread_ids() {
  std::vector<int> tids;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(dir)) {
      if (const int tid = std::atoi(e->d_name); tid > 0) tids.push_back(tid);
    }
    ::closedir(dir);
  }
  std::sort(tids.begin(), tids.end());
  return tids;
}

std::string thread_name(int tid) {
  std::ifstream in(fmt::format("/proc/self/task/{}/comm", tid));
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

std::vector<ThreadStack> capture_thread_stacks(std::chrono::milliseconds budget) {
  std::vector<ThreadStack> stacks;
  try {
    std::lock_guard lock(capture_mu);
    const uint64_t capture = uint64_t{++capture_number & 0x7fffffffu} << 32;
    const int self = this_tid();
    const int pid = static_cast<int>(::getpid());
    const int sig = stack_signal();
    const std::vector<int> tids = thread_ids();
    std::vector<std::array<void*, kMaxDepth>> pcs(tids.size());
    std::vector<int> depths(tids.size(), -1);
    for (size_t first = 0; first < tids.size(); first += kSlots) {
      const size_t last = std::min(tids.size(), first + kSlots);
      // Ask every thread of this batch, then wait for all of them together.
      std::vector<std::pair<size_t, Slot*>> asked;
      for (size_t i = first, s = 0; i < last; ++i) {
        if (tids[i] == self) {
          depths[i] = ::backtrace(pcs[i].data(), kMaxDepth);
          continue;
        }
        while (s < slots.size() && slots[s].retired) ++s;
        if (sig == 0 || s == slots.size()) continue;
        Slot& slot = slots[s++];
        slot.depth.store(-1, std::memory_order_relaxed);
        slot.key.store(capture | static_cast<uint32_t>(tids[i]), std::memory_order_release);
        if (::syscall(SYS_tgkill, pid, tids[i], sig) == 0) {
          asked.emplace_back(i, &slot);
        } else {
          slot.key.store(0, std::memory_order_release);  // The thread has exited.
        }
      }
      const auto deadline = std::chrono::steady_clock::now() + budget;
      for (const auto& [i, slot] : asked) {
        while (slot->depth.load(std::memory_order_acquire) < 0 &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        uint64_t key = capture | static_cast<uint32_t>(tids[i]);
        if (!slot->key.compare_exchange_strong(key, 0, std::memory_order_acq_rel)) {
          // Claimed: the thread is copying its few addresses now, or has.
          const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
          while (slot->depth.load(std::memory_order_acquire) < 0 &&
                 std::chrono::steady_clock::now() < grace) {
            std::this_thread::yield();
          }
          if (const int depth = slot->depth.load(std::memory_order_acquire); depth >= 0) {
            pcs[i] = slot->pcs;
            depths[i] = depth;
            slot->key.store(0, std::memory_order_release);
          } else {
            slot->retired = true;  // Its late write must not land in a later capture.
          }
        }
      }
    }
    for (size_t i = 0; i < tids.size(); ++i) {
      ThreadStack t;
      t.tid = tids[i];
      t.name = thread_name(tids[i]);
      t.main = tids[i] == pid;
      t.answered = depths[i] >= 0;
      for (int d = 0; d < depths[i]; ++d) symbolise(pcs[i][d], t.frames);
      stacks.push_back(std::move(t));
    }
  } catch (...) {
    // Best effort: a dump goes on with what was captured.
  }
  return stacks;
}

std::vector<StackFrame> symbolise_stack(std::span<void* const> pcs) {
  std::vector<StackFrame> frames;
  try {
    for (void* pc : pcs) symbolise(pc, frames);
  } catch (...) {
    // Best effort, as for threads: what was symbolised so far.
  }
  return frames;
}

std::string format_stack(const ThreadStack& stack, size_t max_frames) {
  if (stack.frames.empty()) {
    return stack.answered ? "(no frames of the program)" : "(the thread did not answer)";
  }
  std::string out;
  for (size_t i = 0; i < stack.frames.size() && i < max_frames; ++i) {
    const StackFrame& f = stack.frames[i];
    if (!out.empty()) out += " <- ";
    const std::string_view file = std::string_view(f.file).substr(f.file.rfind('/') + 1);
    out += f.function.empty() ? "??" : f.function;
    if (f.line > 0) out += fmt::format(" ({}:{})", file, f.line);
  }
  return out;
}

}  // namespace meshrt::trace
