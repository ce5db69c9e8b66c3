// Per-communicator hooks: code of the program's that runs before each op is launched (and may
// inspect or change its input), after each op ended, and when the communicator is aborted. The
// flight recorder, comm logger and exports do not use them; MESHRT_NAN_CHECK does
// (runtime/nan_check.h). A communicator without hooks pays one relaxed atomic load per op.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "../trace/op_record.h"
#include "buffer.h"
#include "op.h"

namespace meshrt {

// What a pre-op hook sees of an op: validated, not yet numbered or launched. The buffers are the
// caller's; a hook may write into `input` (and p2p send buffers) to change what is sent.
struct OpHookArgs {
  OpKind kind = OpKind::kBarrier;
  std::string_view op;          // op_kind_name(kind): "all_reduce", ...
  int rank = -1;                // This process's rank in the group.
  int root_or_peer = -1;        // Group rank of the root or peer; -1 when none.
  BufferView input;             // Empty for ops without one (barrier, batch_p2p: see p2p).
  BufferView output;            // In-place ops: the same view as input.
  std::span<const P2POp> p2p;   // batch_isend_irecv's members; empty otherwise.
  const trace::CommInfo* comm;  // The communicator's identity (name, mesh dim, ranks).
};

// Runs on the calling thread before the op is numbered; throwing fails the op on this rank only
// (meshrt::Error keeps its code, other exceptions become kInvalidArgument), with the communicator's
// rank, name and op added to the message. Peers that entered the op then wait for this rank.
using PreOpHook = std::function<void(const OpHookArgs& args)>;
// Runs once the op completed or failed (record.state says which), on the thread that saw it end,
// before its waiters wake. Must not throw (an exception is logged and dropped) or block long.
using PostOpHook = std::function<void(const trace::OpRecord& record)>;
// Runs in Communicator::abort(), once, on the aborting thread (the watchdog's on a timeout).
using AbortHook = std::function<void()>;

class OpHooks;
struct HookState;  // A communicator's hook lists (hooks.cc).

// Keeps a hook registered: destroying it (or remove()) unregisters the hook. Move-only. A hook
// running on another thread when it is removed finishes that call.
class HookHandle {
 public:
  HookHandle() = default;
  ~HookHandle() { remove(); }
  HookHandle(HookHandle&& other) noexcept;
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;

  // Unregisters the hook now; idempotent.
  void remove() noexcept;
  // Whether a hook is still registered through this handle.
  bool active() const { return id_ != 0; }

 private:
  friend struct HookState;
  HookHandle(std::shared_ptr<HookState> state, uint64_t id) : state_(std::move(state)), id_(id) {}
  std::shared_ptr<HookState> state_;
  uint64_t id_ = 0;
};

// A communicator's hooks. Thread-safe: hooks may be added and removed while ops run.
class OpHooks {
 public:
  explicit OpHooks(std::shared_ptr<const trace::CommInfo> comm);
  ~OpHooks();
  OpHooks(const OpHooks&) = delete;
  OpHooks& operator=(const OpHooks&) = delete;

  HookHandle add_pre_op(PreOpHook hook);
  HookHandle add_post_op(PostOpHook hook);
  HookHandle add_abort(AbortHook hook);

  // Whether any pre-op hook is registered (one relaxed load: the op path asks it every op).
  bool has_pre_op() const;
  // Runs the pre-op hooks in registration order; rethrows the first failure as the class comment
  // of PreOpHook says.
  void run_pre_op(const OpHookArgs& args) const;
  // Runs the abort hooks; never throws (failures are logged).
  void run_abort() const noexcept;

 private:
  std::shared_ptr<HookState> state_;
};

}  // namespace meshrt
