// The record of one communication op as the tracing layer sees it. Filled by the runtime from the
// op's description; read by sinks (comm logger, flight recorder, exporters). It allocates nothing
// while the op succeeds: names are static strings, shapes inline, the communicator's identity
// shared; only a failure's message and a batch's member list are allocated.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "op_kind.h"
#include "scope.h"

namespace meshrt::trace {

struct OpStack;  // trace/op_stack.h: per-op call stacks.

// Progress of one communicator, updated by the flight recorder while it records: the last
// collective sequence number enqueued, started and completed (-1 for none), as PyTorch's
// pg_status reports them. P2p ops do not count.
struct CommProgress {
  std::atomic<int64_t> last_enqueued_collective{-1};   // collective_seq of the last enqueued.
  std::atomic<int64_t> last_started_collective{-1};    // collective_seq of the last started.
  std::atomic<int64_t> last_completed_collective{-1};  // collective_seq of the last completed.
};

// Identity of a communicator, shared by all of its records.
struct CommInfo {
  uint64_t uid = 0;               // Process-unique creation counter (0 = first created).
  std::string store_key;          // Identity shared by all members, e.g. "world/split1.c0".
  std::string name;               // e.g. "world" or "mesh0/tp".
  std::string description;        // e.g. "default_pg" or "mesh_tp".
  std::string mesh_dim;           // The mesh dim it serves ("tp", "dp_tp"); empty for none.
  std::string backend;            // "gloo", "inproc", ...
  std::string backend_version;    // The backend library's version.
  std::vector<int> global_ranks;  // Group rank i is global rank global_ranks[i].
  int rank = -1;                  // This process's rank in the group.
  int global_rank = -1;           // This process's global rank.
  int64_t timeout_ms = 0;         // Default op timeout.
  // Repair generation: 0 for the job's first communicators; a shrink's is its parent's + 1, and
  // splits inherit their parent's. Dumps list each epoch's members; meshtrace never matches ops
  // across epochs.
  int epoch = 0;
  // Shared so that the flight recorder can update it through a const CommInfo.
  std::shared_ptr<CommProgress> progress = std::make_shared<CommProgress>();
};

// A buffer's shape, inline (no allocation). A buffer given without a shape is 1-D (0-D when it
// has no elements).
struct Dims {
  static constexpr size_t kMax = 8;  // The most dims kept, as Shape::kMaxDims.
  std::array<int64_t, kMax> size{};  // size[i] for i < ndim; outermost first.
  uint8_t ndim = 0;                  // Number of dims.
};

// Statistics of one host buffer's elements (debug mode: MESHRT_DEBUG_TENSOR_STATS=1).
struct TensorStats {
  bool valid = false;      // False for device buffers and empty ones.
  uint64_t count = 0;      // Elements.
  double min = 0;          // Over the non-NaN elements; NaN when all are NaN.
  double max = 0;          // Over the non-NaN elements; NaN when all are NaN.
  double mean = 0;         // Over the finite elements; NaN when none is.
  uint64_t nan_count = 0;  // NaN elements.
  uint64_t inf_count = 0;  // Infinite elements, either sign.
};

// An op's buffers before and after it ran.
struct DebugStats {
  TensorStats input;   // At enqueue.
  TensorStats output;  // At completion (left invalid if the op failed).
};

// "count=12 min=0 max=3 mean=1.5 nan=0 inf=0", or "n/a" when not valid.
std::string format_tensor_stats(const TensorStats& stats);

// One send or receive of a batch_isend_irecv.
struct P2PMember {
  bool is_send = true;       // A send; false for a receive.
  int peer = -1;             // Group rank.
  uint64_t count = 0;        // Elements.
  uint64_t channel_seq = 0;  // n-th op on the channel (this rank, peer) in its direction.
  std::string_view dtype;    // "f32", ...: static storage (members may differ).
};

// Life-cycle state of a recorded op.
enum class OpState : uint8_t {
  kScheduled,  // Enqueued, not started yet.
  kStarted,    // Running on the backend.
  kCompleted,  // Finished successfully.
  kFailed      // Failed (OpRecord::error says why), possibly before it started.
};

// Returns "scheduled", "started", "completed" or "failed".
std::string_view op_state_name(OpState state);

// One op. Times are nanoseconds on the steady clock (comparable within a process), except
// created_wall_ns (system clock, comparable across hosts within clock skew).
struct OpRecord {
  uint64_t record_id = 0;  // Process-wide, rising across all communicators (first = 1).
  std::shared_ptr<const CommInfo> comm;  // The communicator it ran on.
  OpKind kind = OpKind::kBarrier;        // Which op; `op` spells it.
  std::string_view op;                   // op_kind_name(kind): "all_reduce", "send", ...
  std::string_view dtype;                // "f32", ...: static storage; empty for barrier.
  std::string_view reduce_op;            // "sum", ...: empty when the op does not reduce.
  std::string_view algorithm;            // How it ran: "slots", "ring", ... (static storage).
  uint64_t collective_seq = 0;   // Per-communicator collective count at this op (first = 1).
  uint64_t p2p_seq = 0;          // Per-communicator p2p count at this op (first = 1).
  uint64_t op_seq = 0;           // Per-communicator count of all ops (first = 1).
  bool is_p2p = false;           // is_p2p(kind).
  uint64_t input_count = 0;      // Elements.
  uint64_t output_count = 0;     // Elements.
  Dims input_shape;              // The input view's shape, or [input_count].
  Dims output_shape;             // The output view's shape, or [output_count].
  uint64_t bytes = 0;            // Message size S as nccl-tests defines it.
  int root_or_peer = -1;         // Group rank of the root or peer; -1 when none.
  uint64_t p2p_channel_seq = 0;  // send/recv: n-th op on channel (this rank, peer), 0 otherwise.
  // batch_p2p: its members (the only per-op allocation, and only for batches).
  std::shared_ptr<const std::vector<P2PMember>> batch;
  int64_t timeout_ms = 0;               // The op's own timeout, as resolved at enqueue.
  int64_t created_wall_ns = 0;          // System-clock time of the enqueue.
  int64_t enqueue_ns = 0;               // When the op was enqueued.
  int64_t start_ns = 0;                 // 0 until started; stays 0 for an op that failed before.
  int64_t end_ns = 0;                   // 0 until completed or failed.
  OpState state = OpState::kScheduled;  // As of the snapshot.
  const ScopeNode* scope = nullptr;     // The caller's scope and phase at enqueue (interned).
  uint64_t thread_id = 0;               // The enqueuing thread (a hash of its std::thread::id).
  const char* caller_file = "";         // Where the op was called (static storage).
  uint32_t caller_line = 0;             // Line in caller_file.
  // MESHRT_TRACE_STACKS=1: the enqueuing call's return addresses (trace/op_stack.h); else null.
  std::shared_ptr<const OpStack> stack;
  // Issued by meshrt itself to set up communicators (split's exchange, DeviceMesh's agreement
  // check), not by the program: reports set these apart (trace::SetupOps marks them).
  bool setup = false;
  std::string error;  // The failure's message once state is kFailed; empty otherwise.
  // The CUDA graph capture id (cudaStreamGetCaptureInfo) when the op was captured into a graph
  // rather than run (NCCL); its replays are watched separately. 0 otherwise.
  uint64_t cuda_graph_id = 0;
  // Debug mode only (null otherwise): written by the runtime before the event that shows it.
  std::shared_ptr<DebugStats> debug;
};

// The op's number as dumps, errors, logs and meshtrace name it: its collective_seq, or its
// p2p_seq for a p2p op (PyTorch's Flight Recorder numbering).
inline uint64_t trace_seq(const OpRecord& record) {
  return record.is_p2p ? record.p2p_seq : record.collective_seq;
}

// The op as people read it in logs, errors and live views: "all_reduce #5", or for a p2p op its
// number on its channel with the peer, "send #2 to rank 3", which both ends of the channel give
// it (p2p_seq counts every p2p op of the communicator, so it differs between the two ranks).
// docs/diagnosis.md, "Numbering".
inline std::string op_text(const OpRecord& record) {
  const bool known_peer = record.is_p2p && record.comm && record.root_or_peer >= 0 &&
                          record.root_or_peer < static_cast<int>(record.comm->global_ranks.size());
  if (!known_peer) return std::string(record.op) + " #" + std::to_string(trace_seq(record));
  return p2p_op_text(record.op, static_cast<int64_t>(record.p2p_channel_seq),
                     record.comm->global_ranks[record.root_or_peer]);
}

// How long the op ran, start to end, in nanoseconds; 0 when it never started or has not ended
// (an op that fails while queued has no start).
inline int64_t run_ns(const OpRecord& record) {
  return record.start_ns > 0 && record.end_ns > record.start_ns ? record.end_ns - record.start_ns
                                                                : 0;
}

}  // namespace meshrt::trace
