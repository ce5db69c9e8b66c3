// The stacks of every thread of this process, symbolised (function, file:line where debug info
// exists) with GCC's libbacktrace, for dumps and the live verdict: where each thread of a stalled
// rank is (issue #15, "Stacks"). Frames of system libraries and of meshrt's own waiting are
// folded away, so what is left is the program's own code.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meshrt::trace {

// One frame, innermost first.
struct StackFrame {
  std::string function;  // Demangled; empty when unknown.
  std::string file;      // Source file when debug info has it; else the object file.
  int line = 0;          // 0 when unknown.
};

// One thread's stack.
struct ThreadStack {
  int tid = 0;
  std::string name;       // /proc/self/task/<tid>/comm.
  bool main = false;      // The process's main thread (tid == pid).
  bool answered = false;  // False when the thread did not answer in time (its frames are empty).
  std::vector<StackFrame> frames;  // Folded: the program's own frames only.
};

// Captures every thread's stack: the other threads are asked at once by a real-time signal
// (SIGRTMIN + 4, where the program keeps its default action) to record their return addresses,
// and waited for together, at most `budget`; then the addresses are symbolised here. Thread-safe
// (captures are serialised); never throws (a thread that cannot be asked is reported unanswered).
std::vector<ThreadStack> capture_thread_stacks(
    std::chrono::milliseconds budget = std::chrono::milliseconds(1000));

// The frames of return addresses `pcs` (innermost first), symbolised and folded as above; used
// for the flight recorder's per-op stacks (trace/op_stack.h). Thread-safe; never throws.
std::vector<StackFrame> symbolise_stack(std::span<void* const> pcs);

// "run_rank (fault_worker.cc:58) <- main (fault_worker.cc:90)": up to `max_frames`, innermost
// first, file names without their directories; "(no frames of the program)" when empty.
std::string format_stack(const ThreadStack& stack, size_t max_frames = 6);

}  // namespace meshrt::trace
