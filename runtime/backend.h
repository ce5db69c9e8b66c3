// The backend interface: what Gloo, the in-process backend and later NCCL and MPI implement.
// One Backend object serves one communicator. The communicator validates and traces every op
// before a backend sees it, so backends assume valid input.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "op.h"
#include "pending_op.h"

namespace meshrt {

// What a member of a new communicator needs to create its backend (see Communicator::split).
struct SplitSpec {
  std::string name;                      // The new communicator's name, e.g. "mesh0/tp".
  std::string store_key;                 // Identity of the new group, equal on all of its members.
  std::vector<int> parent_ranks;         // Members, as parent ranks, in new-rank order.
  std::vector<int> excluded;             // Backend::shrink(): the parent ranks left out.
  int rank = -1;                         // This process's rank in the new group.
  std::chrono::milliseconds timeout{0};  // Bound of the connection; the group's op timeout.
};

// How a backend executes ops; the communicator picks its path from it.
enum class ExecutionModel : uint8_t {
  // run() executes an op to completion. The communicator calls it on its worker thread, or on a
  // caller blocked in Work::wait() when nothing else is queued (Gloo, in-process).
  kRunToCompletion,
  // launch() starts an op inside a host library on the caller's thread and returns; the op has
  // begun once launched. The communicator polls its PendingOp from Work::wait()/test() and from
  // the watchdog thread, and fails it at its timeout (MPI). No worker thread, no hand-off.
  kLaunch,
  // As kLaunch, onto a device stream: the op is scheduled until the stream reaches it, and
  // Work::wait() orders the caller's current stream after it instead of blocking (NCCL).
  kLaunchOnStream,
};

// Executes ops of one communicator. The communicator calls run(), launch() and split() one at a
// time, in op order: under kRunToCompletion run() and split() on its worker thread (or run() on
// a caller blocked in Work::wait(), see WorkDriver); under kLaunch launch() and split() on the
// thread that called the op. abort() may come from any thread, while an op runs.
class Backend {
 public:
  virtual ~Backend() = default;

  // The backend's name: "gloo", "inproc", ...
  virtual std::string_view name() const = 0;
  // A version string of the library underneath, for dumps and reports.
  virtual std::string version() const = 0;
  // Executes `op` to completion or throws Error (timeouts and peer failures included). Must end
  // within op.timeout plus a small margin: the watchdog reports an op a second past it. The
  // default throws Error(kNotSupported): launching backends are never asked to run.
  virtual void run(const Op& op);
  // The algorithm `op` will run by (collectives/algorithm_table.h), asked once per op at enqueue on
  // the calling thread; run() follows Op::algorithm. The default: the library does every op.
  virtual Algorithm choose_algorithm(const Op& op) const {
    return op.kind == OpKind::kCoalesced ? Algorithm::kNone : Algorithm::kLibrary;
  }
  // Which of run() and launch() the communicator calls for the program's ops.
  virtual ExecutionModel execution_model() const { return ExecutionModel::kRunToCompletion; }
  // kLaunch backends: starts `op` and returns its handle without waiting for it; throws Error if
  // it cannot be launched (nothing was started then). Returns null when it completed the op
  // before returning. The default throws Error(kNotSupported).
  virtual std::unique_ptr<PendingOp> launch(const Op& op);
  // Whether ops may take CUDA buffers (NCCL); validation refuses them elsewhere.
  virtual bool accepts_cuda() const { return false; }
  // Checks what the communicator's validation cannot know (NCCL: that every buffer is device
  // memory, through cudaPointerGetAttributes); throws Error(kInvalidArgument), which the op call
  // throws before anything was launched. Called on the calling thread of every op.
  virtual void validate(const Op& op) const { (void)op; }
  // The identity of the communicator this backend serves, given once by its constructor (NCCL
  // records the replays of CUDA graphs with it).
  virtual void set_comm_info(std::shared_ptr<const trace::CommInfo> info) { (void)info; }
  // Creates the backend of a new group, connected to its members; throws Error. Called on members
  // only, after the parent ranks agreed on `spec` (through the parent's all_gather).
  virtual std::unique_ptr<Backend> split(const SplitSpec& spec) = 0;
  // Communicator::shrink(), abort mode: fails what runs on this backend, then connects the
  // survivors in `spec` (parent_ranks: every member but the excluded) without any collective of
  // the parent, whose excluded ranks may be dead. Each survivor computes `spec` alike. Called on
  // the survivors' threads after check_can_shrink(); the default throws Error(kNotSupported).
  virtual std::unique_ptr<Backend> shrink(const SplitSpec& spec);
  // Throws Error(kNotSupported) saying why when shrink() cannot run here, before the
  // communicator aborts anything. The default refuses; Gloo and in-process accept.
  virtual void check_can_shrink() const;
  // Group ranks this backend has seen die (Gloo: a pidfd of its shared-memory peers; in-process:
  // a rank that aborted the group), for Communicator::failed_ranks(). Any thread.
  virtual std::vector<int> failed_peers() const { return {}; }
  // Called instead of split() on a parent rank that joins no new group (kNoColor), in the same
  // order. NCCL's split is collective over the whole parent, so NCCL takes part with
  // NCCL_SPLIT_NOCOLOR; other backends do nothing. Throws Error.
  virtual void split_excluded() {}
  // Communicator::start_coalescing(): the ops launched until end_coalescing() form one group (NCCL:
  // one ncclGroupStart/End). Called by launching backends only, on the thread that launches.
  virtual void start_coalescing() {}
  // Closes the group opened by start_coalescing() and returns the group's PendingOp (done when
  // every member is), or nullptr when the backend has no group of its own: the communicator then
  // completes the closing entry once every member completed. Throws Error if the group failed to
  // launch.
  virtual std::unique_ptr<PendingOp> end_coalescing() { return nullptr; }
  // Makes an op in flight fail fast where the backend can interrupt it (in-process fails it with
  // kPeerFailure on every member; Gloo fails a shared-memory exchange with kAborted on this rank
  // and shuts its TCP connections down, failing the waits on them here and on the peers). The
  // communicator itself fails later ops with kAborted.
  virtual void abort() noexcept = 0;
};

}  // namespace meshrt
