// Per-op call stacks (MESHRT_TRACE_STACKS=1, docs/flight-recorder.md): the flight recorder can
// keep, with each op, the return addresses of the call that enqueued it, so that a dump shows
// how the program got to a collective, not only the line that called it. Captured on the
// caller's thread as raw addresses (libunwind's unw_backtrace, no symbol lookup: 0.2 to 0.8 µs);
// symbolised only when a dump is rendered, with the folding of trace/thread_stacks.h.
#pragma once

#include <array>
#include <memory>

namespace meshrt::trace {

// The return addresses of one enqueuing call, innermost first.
struct OpStack {
  static constexpr int kMaxFrames = 24;
  std::array<void*, kMaxFrames> pcs{};
  int depth = 0;
};

// Whether per-op stacks are on: MESHRT_TRACE_STACKS, read once.
bool op_stacks_enabled();

// The calling thread's stack now, or null when per-op stacks are off.
std::shared_ptr<const OpStack> capture_op_stack();

}  // namespace meshrt::trace
