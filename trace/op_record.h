// The record of one communication op as the tracing layer sees it. Filled by the runtime from the
// op's description; read by sinks (comm logger, flight recorder, exporters). It owns no heap
// memory of its own: names are static strings, the communicator's identity is shared.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trace/scope.h"

namespace meshrt::trace {

// Identity of a communicator, shared by all of its records.
struct CommInfo {
  uint64_t uid = 0;               // Process-unique creation counter (0 = first created).
  std::string store_key;          // Identity shared by all members, e.g. "world/split1.c0".
  std::string name;               // e.g. "world" or "mesh0/tp".
  std::string description;        // e.g. "default_pg" or "mesh_tp".
  std::string mesh_dim;           // The mesh dim it serves ("tp", "dp_tp"); empty for none.
  std::string backend;            // "gloo", "inproc", ...
  std::vector<int> global_ranks;  // Group rank i is global rank global_ranks[i].
  int rank = -1;                  // This process's rank in the group.
  int global_rank = -1;           // This process's global rank.
  int64_t timeout_ms = 0;         // Default op timeout.
};

// Life-cycle state of a recorded op.
enum class OpState : uint8_t { kScheduled, kStarted, kCompleted, kFailed };

// Returns "scheduled", "started", "completed" or "failed".
std::string_view op_state_name(OpState state);

// One op. Times are nanoseconds on the steady clock (comparable within a process), except
// created_wall_ns (system clock, comparable across hosts within clock skew).
struct OpRecord {
  std::shared_ptr<const CommInfo> comm;
  std::string_view op;          // "all_reduce", "send", ...: static storage.
  std::string_view dtype;       // "f32", ...: static storage; empty for barrier.
  std::string_view reduce_op;   // "sum", ...: empty when the op does not reduce.
  uint64_t collective_seq = 0;  // Per-communicator collective count at this op (first = 1).
  uint64_t p2p_seq = 0;         // Per-communicator p2p count at this op (first = 1).
  uint64_t op_seq = 0;          // Per-communicator count of all ops (first = 1).
  bool is_p2p = false;
  uint64_t input_count = 0;   // Elements.
  uint64_t output_count = 0;  // Elements.
  uint64_t bytes = 0;         // Message size S as nccl-tests defines it.
  int root_or_peer = -1;      // Group rank of the root or peer; -1 when none.
  int64_t timeout_ms = 0;
  int64_t created_wall_ns = 0;
  int64_t enqueue_ns = 0;
  int64_t start_ns = 0;  // 0 until started.
  int64_t end_ns = 0;    // 0 until completed or failed.
  OpState state = OpState::kScheduled;
  const ScopeNode* scope = nullptr;  // The caller's scope and phase at enqueue (interned).
  uint64_t thread_id = 0;            // The enqueuing thread (a hash of its std::thread::id).
  const char* caller_file = "";      // Where the op was called (static storage).
  uint32_t caller_line = 0;
};

}  // namespace meshrt::trace
