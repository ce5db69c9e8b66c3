#include "runtime/backends/nccl/nccl_pending_op.h"

#include <thread>

#include "runtime/backends/nccl/cuda_check.h"
#include "runtime/backends/nccl/cuda_stream.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt::cuda {

ncclResult_t CommHandle::check_async() {
  std::lock_guard lock(mu);
  if (aborted.load() || comm == nullptr) {
    throw Error(ErrorCode::kAborted, {}, "the NCCL communicator was aborted");
  }
  ncclResult_t state = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
  if (state != ncclSuccess && state != ncclInProgress) {
    throw nccl_error(state, "NCCL communicator failed asynchronously", comm);
  }
  return state;
}

void CommHandle::abort_async(std::string_view why) noexcept {
  ncclComm_t c = nullptr;
  {
    std::lock_guard lock(mu);
    if (aborted.exchange(true) || comm == nullptr) return;
    c = std::exchange(comm, nullptr);
  }
  try {
    log().warn("aborting NCCL communicator '{}' ({})", name, why);
    std::thread([c, device = device, name = name] {
      (void)cudaSetDevice(device);
      const ncclResult_t r = ncclCommAbort(c);
      if (r != ncclSuccess) {
        log().warn("ncclCommAbort of '{}': {}", name, ncclGetErrorString(r));
      }
    }).detach();
  } catch (const std::exception&) {
    // No thread to be had: abort here, blocking if a graph still holds the communicator.
    (void)ncclCommAbort(c);
  }
}

NcclPendingOp::NcclPendingOp(std::shared_ptr<CommHandle> comm, std::shared_ptr<EventPool> pool,
                             Event start, Event end, bool end_timing, uint64_t graph_id,
                             cudaStream_t stream)
    : comm_(std::move(comm)),
      pool_(std::move(pool)),
      start_(std::move(start)),
      end_(std::move(end)),
      end_timing_(end_timing),
      graph_id_(graph_id),
      stream_(stream) {}

NcclPendingOp::NcclPendingOp(std::shared_ptr<CommHandle> comm, std::shared_ptr<GroupEnd> group)
    : comm_(std::move(comm)), group_(std::move(group)) {}

NcclPendingOp::~NcclPendingOp() {
  // An aborted op's events may never fire; they are still valid to reuse (re-recorded first).
  if (pool_) {
    pool_->give(std::move(start_), true);
    pool_->give(std::move(end_), end_timing_);
  }
}

cudaEvent_t NcclPendingOp::end_event() {
  if (!group_) return end_.get();
  std::lock_guard lock(group_->mu);
  if (group_->failed) throw Error(ErrorCode::kBackend, {}, "its coalesced group failed to launch");
  return group_->end.get();
}

PollResult NcclPendingOp::poll() {
  // Captured into a graph: nothing ran; the graph's replays are watched (cuda_graph_watch.h).
  if (graph_id_ != 0) return {PollResult::State::kDone};
  // The watchdog's thread has no device of its own (querying from it would create a context on
  // GPU 0), and a capture elsewhere must not be invalidated by these queries.
  DeviceGuard device(comm_->device);
  RelaxedCaptureGuard capture_mode;
  const cudaEvent_t end = end_event();
  if (end == nullptr) {  // A coalesced member before end_coalescing().
    comm_->check_async();
    return {PollResult::State::kScheduled};
  }
  if (!started_ && start_.get() != nullptr) {
    const cudaError_t q = cudaEventQuery(start_.get());
    if (q == cudaSuccess) {
      started_ = true;
      started_seen_ns_ = trace::steady_now_ns();
    } else if (q != cudaErrorNotReady) {
      throw cuda_error(q, "cudaEventQuery(start)");
    }
  }
  const cudaError_t q = cudaEventQuery(end);
  if (q == cudaSuccess) {
    PollResult r{PollResult::State::kDone};
    if (start_.get() != nullptr) {
      // Times off the hot path: the end as seen now, the start from the device's own elapsed
      // time, which is exact where discovery times are as late as the last poll.
      r.end_ns = trace::steady_now_ns();
      float ms = 0;
      if (cudaEventElapsedTime(&ms, start_.get(), end) == cudaSuccess) {
        r.start_ns = r.end_ns - static_cast<int64_t>(static_cast<double>(ms) * 1e6);
      } else {
        (void)cudaGetLastError();
        r.start_ns = started_seen_ns_;
      }
    }
    return r;
  }
  if (q != cudaErrorNotReady) throw cuda_error(q, "cudaEventQuery(end)");
  comm_->check_async();
  PollResult r{started_ ? PollResult::State::kStarted : PollResult::State::kScheduled};
  r.start_ns = started_seen_ns_;
  return r;
}

void NcclPendingOp::wait_on_stream() {
  if (graph_id_ != 0) return;  // Joined at capture (see NcclBackend::launch).
  const cudaStream_t caller = current_stream();
  if (caller == stream_ && stream_ != nullptr) return;  // Already in order (caller's stream).
  const cudaEvent_t end = end_event();
  if (end == nullptr) return;  // A member before end_coalescing(): wait on the group's Work.
  check_cuda(cudaStreamWaitEvent(caller, end, 0), "cudaStreamWaitEvent");
}

}  // namespace meshrt::cuda
