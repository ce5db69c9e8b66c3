// An op that a backend launched on the caller's thread and that completes later: on the device
// (NCCL) or inside the library (MPI's non-blocking calls). The communicator polls it; nobody
// hands it to another thread.
#pragma once

#include <cstdint>

namespace meshrt {

// What PendingOp::poll() saw. Times are steady-clock ns (trace::steady_now_ns()); 0 = unknown,
// and the communicator then uses the time it noticed the change.
struct PollResult {
  // Where the op is.
  enum class State : uint8_t {
    kScheduled,  // Launched, not begun (a GPU op queued behind earlier work on its stream).
    kStarted,    // Begun, not finished.
    kDone,       // Finished successfully.
  };
  State state = State::kScheduled;
  int64_t start_ns = 0;  // When it began, if the backend measured it (a CUDA start event).
  int64_t end_ns = 0;    // When it ended, if measured.
};

// One launched op. The communicator calls poll(), wait_on_stream() and abandon() one thread at a
// time; the op's buffers stay valid until poll() reported kDone or threw.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Checks without blocking; throws Error (with the failure's code) if the op failed. Once it
  // returned kDone or threw, it is not called again.
  virtual PollResult poll() = 0;
  // Makes the caller's current stream wait for the op's end; returns at once. Called by
  // Work::wait() for ops of kLaunchOnStream backends only.
  virtual void wait_on_stream() {}
  // The op timed out or its communicator was aborted: release what can be released without
  // completing it (the backend's abort() has been or will be called). Never blocks.
  virtual void abandon() noexcept {}
  // Ops of one communicator with the same non-null key finish in launch order (NCCL: ops on one
  // stream), so that one found done vouches for every older op with its key; null: no order.
  virtual const void* completion_order() const { return nullptr; }
  // The CUDA graph capture id when the op was captured into a graph instead of run (it then
  // reports kDone at once and its replays are watched by the backend); 0 otherwise.
  virtual uint64_t cuda_graph_id() const { return 0; }
};

}  // namespace meshrt
