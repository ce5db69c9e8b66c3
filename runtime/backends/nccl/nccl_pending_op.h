// One NCCL op launched onto a stream, as the communicator polls it: its end event (always) and
// start event (only when timing is on), and the communicator's asynchronous error.
#pragma once

#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/backends/nccl/cuda_resources.h"
#include "runtime/pending_op.h"

namespace meshrt::cuda {

// An NCCL communicator shared by its backend and the backend's pending ops. Every call that uses
// `comm` (launches, polls of ncclCommGetAsyncError) holds `mu`, and abort clears `comm` under it,
// so no call ever touches an aborted (freed) communicator.
struct CommHandle {
  std::mutex mu;                     // Guards `comm`.
  ncclComm_t comm = nullptr;         // Null once aborted or destroyed.
  std::atomic<bool> aborted{false};  // abort_async() was called.
  int device = 0;                    // The communicator's CUDA device.
  std::string name;                  // The meshrt communicator's name, for logs.

  // Throws Error if the communicator failed asynchronously (or was aborted); returns the
  // state: ncclSuccess or ncclInProgress.
  ncclResult_t check_async();
  // Marks the communicator aborted and runs ncclCommAbort on a thread of its own: since NCCL
  // 2.26 it waits until every CUDA graph that holds the communicator is destroyed, which a hung
  // replay never allows, so no caller (the watchdog, a failing launch) may block on it. `why`
  // goes into the log. Does nothing if already aborted.
  void abort_async(std::string_view why) noexcept;
};

// The members of a coalesced group share its end event, recorded by end_coalescing().
struct GroupEnd {
  std::mutex mu;
  Event end;                        // Recorded after ncclGroupEnd; empty until then.
  bool failed = false;              // ncclGroupEnd failed: members fail too.
  std::shared_ptr<EventPool> pool;  // Where `end` goes back.
  ~GroupEnd() {
    if (pool) pool->give(std::move(end), false);
  }
};

// A launched op. Events come from `pool` and go back to it when the op is destroyed.
class NcclPendingOp final : public PendingOp {
 public:
  // An op whose completion `end` marks (recorded on `stream`); `start` is empty unless timing
  // is on. `graph_id` != 0: captured into that CUDA graph, not run (done at once).
  NcclPendingOp(std::shared_ptr<CommHandle> comm, std::shared_ptr<EventPool> pool, Event start,
                Event end, bool end_timing, uint64_t graph_id, cudaStream_t stream);
  // A member of a coalesced group, or its closing op: done when the group's end event is.
  NcclPendingOp(std::shared_ptr<CommHandle> comm, std::shared_ptr<GroupEnd> group);
  ~NcclPendingOp() override;

  PollResult poll() override;
  void wait_on_stream() override;
  void abandon() noexcept override {}
  uint64_t cuda_graph_id() const override { return graph_id_; }
  // Its stream (the legacy stream 0 and coalesced members: none).
  const void* completion_order() const override { return group_ ? nullptr : stream_; }

 private:
  cudaEvent_t end_event();

  std::shared_ptr<CommHandle> comm_;
  std::shared_ptr<EventPool> pool_;
  std::shared_ptr<GroupEnd> group_;
  Event start_;
  Event end_;
  bool end_timing_ = false;
  uint64_t graph_id_ = 0;
  cudaStream_t stream_ = nullptr;  // Where it ran; a caller on that stream needs no wait.
  bool started_ = false;
  int64_t started_seen_ns_ = 0;
};

}  // namespace meshrt::cuda
