// A communicator: a group of ranks with one backend, on which collectives and point-to-point ops
// run asynchronously, in the order they were called, each validated and traced on the way.
//
// Usage (every rank runs the same code and calls the ops of a communicator in the same order):
//
//   std::shared_ptr<meshrt::Communicator> world = meshrt::init();  // Ranks from the launcher.
//   // Or a mesh dim's communicator (mesh/device_mesh.h):
//   auto mesh = meshrt::init_device_mesh(world, "cpu", {2, world->size() / 2}, {"dp", "tp"});
//   meshrt::Communicator& tp = mesh->comm("tp");
//
//   std::vector<float> grad(1024, 1.0f);
//   tp.all_reduce(meshrt::view(grad))->wait();  // Sum over the tp group, in place.
//
//   // Async: start the gather, compute meanwhile, wait before touching `shard` or `full`.
//   std::vector<float> shard(256), full(256 * world->size());
//   meshrt::WorkHandle gather = world->all_gather(meshrt::view(shard), meshrt::view(full));
//   compute_something_else();
//   gather->wait();
//
//   // Point-to-point, between group ranks; a recv matches the peer's send of the same tag (0).
//   if (world->rank() == 0) world->send(meshrt::view(grad), /*peer=*/1)->wait();
//   if (world->rank() == 1) world->recv(meshrt::view(grad), /*peer=*/0)->wait();
//
//   try {
//     world->all_reduce(meshrt::view(grad), meshrt::ReduceOp::kAvg, {std::chrono::seconds(30)})
//         ->wait();
//   } catch (const meshrt::Error& e) {
//     // Bad arguments are thrown by the call, op failures by wait() under MESHRT_ON_TIMEOUT=throw
//     // (the default policy of init() jobs exits instead). what() names rank, comm, op and seq.
//     std::fprintf(stderr, "%s\n", e.what());
//     if (e.code() != meshrt::ErrorCode::kInvalidArgument) throw;  // Recreate: see error.h.
//   }
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../trace/op_record.h"
#include "../trace/spin_lock.h"
#include "backend.h"
#include "call_site.h"
#include "hooks.h"
#include "timeout.h"
#include "work.h"

namespace meshrt {

struct JobContext;  // runtime/backend_factory.h

// The default op timeout of a communicator: 10 minutes, as PyTorch's NCCL groups (its Gloo groups
// default to 30).
inline constexpr std::chrono::milliseconds kDefaultOpTimeout{std::chrono::minutes(10)};

// Options of a communicator created by split().
struct CommOptions {
  // Name in logs, errors and traces. Default: "<parent name>/split<N>.<color>".
  std::string name;
  std::string description;  // In dumps (PyTorch's pg_desc), e.g. "mesh_tp". Default: the name.
  // The mesh dim it serves, for tracing. Empty: the parent's (a split of a dim's communicator
  // is part of that dim); none for splits of communicators outside a mesh.
  std::string mesh_dim;
  std::chrono::milliseconds timeout{0};  // Default op timeout; 0 (or less) inherits the parent's.
  // The new communicator's backend ("gloo", "mpi", "nccl"); empty: the parent's. Like PyTorch's
  // backend_override.
  std::string backend;
};

// Per-call options.
struct OpOptions {
  // Bound of this op; 0 = the communicator's default. Negative fails with kInvalidArgument;
  // longer than kMaxTimeout is cut to it.
  std::chrono::milliseconds timeout{0};
  // Gloo and in-process: start the op on the communicator's worker thread at once, so that it
  // overlaps the caller's own work (PyTorch's async_op=True). Without it, a queued op starts on
  // the thread that first waits for it, with no thread hand-off (see Communicator). NCCL and MPI
  // launch every op at once and ignore it.
  bool async_op = false;
};

// Passed as split()'s color by ranks that join no new communicator (like NCCL_SPLIT_NOCOLOR).
inline constexpr int kNoColor = -1;

// How Communicator::shrink() treats the ranks it leaves out and the ops in flight (PyTorch's
// SHRINK_DEFAULT and SHRINK_ABORT).
enum class ShrinkMode : uint8_t {
  // A planned removal: every rank calls shrink(), the excluded ones too (they get nullptr), in op
  // order like split(), after the ops queued before it. Every backend.
  kDefault,
  // Repair around dead ranks: only the survivors call it. It fails every op of this communicator
  // in flight or queued at once, never waiting one out, then connects the survivors without the
  // dead (Gloo and in-process through the store or memory, NCCL by ncclCommShrink; MPI refuses).
  // This communicator stays aborted.
  kAbort,
};

// A group of ranks on which ops run asynchronously: each op call validates its arguments (throwing
// Error(kInvalidArgument) at once when they are wrong), then hands the op to its backend and
// returns its WorkHandle; Work::wait() throws the op's failure. NCCL and MPI ops are launched on
// the calling thread, in call order, and polled to completion. Gloo and in-process ops queue, in
// call order, and run on the first thread that waits for them (no thread hand-off on the latency
// path); they move to the communicator's worker thread, to overlap the caller's work, when
// OpOptions::async_op asks, when a second op queues behind one not yet started (the caller is
// pipelining), when Work::test() or a timed wait polls them, when this process blocks on any
// other op or split, or at the latest at the watchdog's next poll (MESHRT_WATCHDOG_POLL_MS).
// Buffers must stay valid and untouched until the op's work is done: for GPU ops, until the op has
// completed on its stream (Work::synchronize() or test()), not merely until wait() returned. Any
// thread may call ops; every rank must call the collectives in the same order. Every op records the
// scope it was called in (trace/scope.h) and its caller's file and line; the defaulted `caller`
// argument captures the latter at no cost.
class Communicator {
 public:
  // Used by init(), make_inproc_world() and split(); users get communicators from those.
  // `resources` is kept alive as long as the communicator or any communicator split from it (the
  // store, a listening server); `job` lets split() make a backend of another kind (init() worlds).
  // Throws Error(kInvalidArgument) naming a malformed MESHRT_* variable (sinks, watchdog, debug
  // statistics are read with the first communicator).
  Communicator(trace::CommInfo info, std::unique_ptr<Backend> backend,
               std::shared_ptr<void> resources, std::shared_ptr<const JobContext> job = nullptr);
  // Lets queued ops finish (each is bounded by its timeout), then stops the worker.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This process's rank in the group, in [0, size()).
  int rank() const { return info_->rank; }
  // Number of ranks in the group.
  int size() const { return static_cast<int>(info_->global_ranks.size()); }
  // Global rank of this process.
  int global_rank() const { return info_->global_rank; }
  // Name in logs, errors and traces, e.g. "world" or "mesh0/tp".
  const std::string& name() const { return info_->name; }
  // PyTorch-style description for dumps, e.g. "default_pg" or "mesh_tp".
  const std::string& description() const { return info_->description; }
  // Global rank of each group rank.
  std::span<const int> global_ranks() const { return info_->global_ranks; }
  // Default op timeout, used when OpOptions::timeout is 0.
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(info_->timeout_ms); }
  // The backend's name: "gloo", "inproc", ...
  std::string_view backend_name() const { return backend_->name(); }
  // The backend library's version, for dumps and reports.
  std::string backend_version() const { return backend_->version(); }
  // The identity that every trace record of this communicator carries.
  const std::shared_ptr<const trace::CommInfo>& info() const { return info_; }
  // Collectives enqueued so far, split()'s and DeviceMesh's setup all_gathers included.
  uint64_t collective_seq() const;
  // Point-to-point ops (send, recv, batch_isend_irecv) enqueued so far.
  uint64_t p2p_seq() const;
  // All ops enqueued so far: collective_seq() + p2p_seq().
  uint64_t op_seq() const;

  // Reduces `data` across the group in place, by a built-in op or a Reducer (reduce_op.h).
  WorkHandle all_reduce(BufferView data, ReduceBy op = ReduceOp::kSum, OpOptions options = {},
                        CallSite caller = std::source_location::current());
  // Copies `data` of rank `root` into `data` of every rank.
  WorkHandle broadcast(BufferView data, int root, OpOptions options = {},
                       CallSite caller = std::source_location::current());
  // Reduces `data` into `data` of rank `root`; other ranks' buffers are left unchanged.
  WorkHandle reduce(BufferView data, int root, ReduceBy op = ReduceOp::kSum, OpOptions options = {},
                    CallSite caller = std::source_location::current());
  // Concatenates every rank's `input`, in rank order, into `output` (size() x input.count). In
  // place when `input` is block rank() of `output`; any other overlap is rejected.
  WorkHandle all_gather(BufferView input, BufferView output, OpOptions options = {},
                        CallSite caller = std::source_location::current());
  // Reduces `input` (size() x output.count) and leaves block rank() of the result in `output`. In
  // place when `output` is block rank() of `input`; any other overlap is rejected.
  WorkHandle reduce_scatter(BufferView input, BufferView output, ReduceBy op = ReduceOp::kSum,
                            OpOptions options = {},
                            CallSite caller = std::source_location::current());
  // Sends block j of `input` to rank j and receives rank j's block into block j of `output`; blocks
  // are count / size() elements, and input and output have the same count.
  WorkHandle all_to_all(BufferView input, BufferView output, OpOptions options = {},
                        CallSite caller = std::source_location::current());
  // Uneven all_to_all: input_splits[j] elements go to rank j; output_splits[j] come from rank j.
  // Give both splits or neither (throws kInvalidArgument); each has size() entries.
  WorkHandle all_to_all(BufferView input, std::span<const size_t> input_splits, BufferView output,
                        std::span<const size_t> output_splits, OpOptions options = {},
                        CallSite caller = std::source_location::current());
  // all_gather with a block of its own size per rank (MPI_Allgatherv): rank q's `input`
  // (counts[q] elements) lands in `output` at element offsets[q]; no offsets: each block right
  // after the one before. counts and offsets have size() entries, equal on every rank; blocks may
  // be empty, never overlap. In place when `input` is this rank's block of `output`.
  WorkHandle all_gather_v(BufferView input, BufferView output, std::span<const size_t> counts,
                          std::span<const size_t> offsets = {}, OpOptions options = {},
                          CallSite caller = std::source_location::current());
  // reduce_scatter with a block of its own size per rank: block q of `input` (counts[q] elements
  // at element offsets[q]; no offsets: one after the other), reduced over the group, lands in
  // `output` of rank q (counts[q] elements). In place when `output` is this rank's block of
  // `input`.
  WorkHandle reduce_scatter_v(BufferView input, BufferView output, std::span<const size_t> counts,
                              std::span<const size_t> offsets = {}, ReduceBy op = ReduceOp::kSum,
                              OpOptions options = {},
                              CallSite caller = std::source_location::current());
  // Concatenates every rank's `input` into `output` on rank `root` (ignored elsewhere).
  WorkHandle gather(BufferView input, BufferView output, int root, OpOptions options = {},
                    CallSite caller = std::source_location::current());
  // Sends block j of `input` on rank `root` (ignored elsewhere) to `output` of rank j.
  WorkHandle scatter(BufferView input, BufferView output, int root, OpOptions options = {},
                     CallSite caller = std::source_location::current());
  // Completes once every rank has entered it.
  WorkHandle barrier(OpOptions options = {}, CallSite caller = std::source_location::current());
  // Sends `data` to group rank `peer` (not this rank); matched, in order, with the peer's recvs of
  // the same tag. A size mismatch fails the recv with kInvalidArgument.
  WorkHandle send(BufferView data, int peer, int tag = 0, OpOptions options = {},
                  CallSite caller = std::source_location::current());
  // Receives into `data` the next message of `tag` from group rank `peer` (not this rank).
  WorkHandle recv(BufferView data, int peer, int tag = 0, OpOptions options = {},
                  CallSite caller = std::source_location::current());
  // Posts all sends and receives of `ops` together (no ordering deadlock between them) as one op.
  // `ops` must not be empty.
  WorkHandle batch_isend_irecv(std::span<const P2POp> ops, OpOptions options = {},
                               CallSite caller = std::source_location::current());

  // Opens a coalescing block: the ops this communicator is given until end_coalescing() are
  // launched as one group (NCCL: one ncclGroupStart/End, so their kernels run together and p2p
  // members cannot deadlock on each other's order). Each member is still its own op with its own
  // Work and flight-recorder entry; members share one collective_seq (and p2p_seq), as in
  // PyTorch. On Gloo and in-process backends members run one by one as usual. GPU members' Works
  // complete with the group: wait on end_coalescing()'s Work. Throws Error(kInvalidArgument) if
  // a block is already open.
  void start_coalescing();
  // Closes the block and returns the Work of its closing `coalesced` entry, done once every
  // member is; it fails if a member failed. Throws Error(kInvalidArgument) without an open block,
  // and the backend's Error if the group could not be launched.
  WorkHandle end_coalescing(CallSite caller = std::source_location::current());

  // Collective over this communicator: ranks passing the same `color` form a new communicator,
  // ordered by `key`, then by rank here. Ranks passing kNoColor get nullptr. Every rank must call
  // split in the same order relative to its other ops. Blocks until the new communicator is
  // connected; throws its exchange's or connection's Error, kInvalidArgument for color < -1, and
  // for options.backend naming a backend not built in or a world not made by init().
  std::shared_ptr<Communicator> split(int color, int key, CommOptions options = {});

  // A communicator of this one's ranks but `excluded` (group ranks), renumbered in order, named
  // "<name>@<epoch>" in the next repair epoch (options.name overrides). Every survivor must
  // pass the same ranks (docs/repair.md). Throws kInvalidArgument for ranks out of range or
  // given twice, for excluding every rank and, under kAbort, on an excluded rank; kNotSupported
  // where the backend cannot (MPI under kAbort); the connection's Error.
  std::shared_ptr<Communicator> shrink(std::span<const int> excluded,
                                       ShrinkMode mode = ShrinkMode::kDefault,
                                       CommOptions options = {});
  // Group ranks known to have died, ascending: processes that ended without their exit barrier
  // (meshrun records each in the job store within 100 ms of its end, on any node), peers whose
  // process exited (Gloo shared memory), ranks that aborted the group (in-process). One store
  // request when nothing changed. Never throws: a store it cannot read adds no rank.
  std::vector<int> failed_ranks() const;
  // The repair epoch: 0 at first, one more for each shrink (CommInfo::epoch).
  int epoch() const { return info_->epoch; }

  // Fails every op not started yet, and every later one, with kAborted. Any thread may call it.
  // An op already running ends as its backend allows: in-process fails it (and the peers' ops)
  // with kPeerFailure; Gloo fails one through shared memory with kAborted, and one over TCP with
  // kPeerFailure by shutting its connections down (the peers' ops on them fail too).
  void abort() noexcept;

  // Registers `hook` to run before each later op of this communicator is numbered and launched
  // (runtime/hooks.h says what it sees and what throwing does). Kept until the handle goes.
  HookHandle add_pre_op_hook(PreOpHook hook) { return hooks_->add_pre_op(std::move(hook)); }
  // Registers `hook` to run when each later op has completed or failed, before its waiters wake.
  HookHandle add_post_op_hook(PostOpHook hook) { return hooks_->add_post_op(std::move(hook)); }
  // Registers `hook` to run when the communicator is aborted (by abort() or a timeout).
  HookHandle add_abort_hook(AbortHook hook) { return hooks_->add_abort(std::move(hook)); }

  // A snapshot of the record of the op executing now (launched: the oldest unfinished), if any
  // (for the watchdog).
  std::optional<trace::OpRecord> running_record() const;

 private:
  // A launched op (kLaunch backends) until it completed or failed.
  struct Launched {
    // The op's work; its handle is held (owner) only once launch() returned with the op still
    // pending: while launch() runs, the launching caller holds it, which saves two atomic
    // reference counts on an op that finishes inside launch().
    Work* work = nullptr;
    WorkHandle owner;
    std::unique_ptr<PendingOp> pending;  // Null while launch() runs.
    int64_t deadline_ns = 0;             // Steady clock; the op fails with kTimeout after it.
    int64_t timeout_ms = 0;
    bool started = false;
    bool done = false;
    std::shared_ptr<trace::DebugStats> debug;  // With the output to measure, in debug mode.
    BufferView output;
  };

  // A queued op (its Op and, for a kCoalesced closing entry, its members are in the Work), or
  // internal work.
  struct Task {
    WorkHandle work;
    std::function<void()> job;  // Internal work (split) run on the worker, untraced.
  };

  class Driver;
  class WatchdogView;
  class CoalescedPending;
  // Whether `work` completed or failed, without polling (for CoalescedPending).
  static bool work_done(const Work& work) { return work.done_now(); }

  WorkHandle enqueue(Op&& op, OpOptions options, const CallSite& caller);
  void post_job(std::function<void()> job);
  void worker_loop();
  void run_task(Task& task);
  // Runs a task this thread took off the queue (busy_ set), then frees the queue.
  void run_claimed(Task& task);
  // Work::wait() of a queued op: runs the queue up to `work` on this thread while nothing else
  // runs; if the worker or another caller is running, lets the worker take `work` and returns
  // false. Returns true once `work` is done.
  bool try_run_inline(const Work& work);
  // Lets the worker take every queued task up to `work` (all tasks if null); starts it if needed.
  void start_on_worker(const Work* work);
  // How many queued tasks, from the front, up to and including `work`'s (0: not queued); mu_ held.
  size_t queued_through_locked(const Work& work) const;
  // Lets the worker take the first `count` queued tasks; mu_ held. Returns whether that released
  // any (the caller then notifies cv_ after unlocking).
  bool release_locked(size_t count);
  // Queues `task`, not yet released to the worker; mu_ held.
  void push_locked(Task&& task);
  // Takes the queue's first task for this thread (busy_ set); mu_ held.
  Task take_front_locked();
  // Before this thread blocks: starts the queued ops of every other communicator of the process
  // on their workers, since this thread cannot run them until it returns.
  void start_queued_elsewhere() const;
  // kLaunch: launches `op` on this thread (launch_mu_ held, numbering done).
  // `enqueue_ns` is the op's enqueue time, taken just before under launch_mu_: it doubles as the
  // launch time, which saves two clock reads per op (~60 ns each here).
  void launch(const Op& op, const WorkHandle& work, std::shared_ptr<trace::DebugStats> debug,
              int64_t enqueue_ns);
  // launch()'s body: lists the op, then calls `make` for its PendingOp (backend_->launch(op), or
  // a coalesced group's closing op).
  void launch_pending(const Op& op, const WorkHandle& work,
                      std::shared_ptr<trace::DebugStats> debug, int64_t enqueue_ns,
                      const std::function<std::unique_ptr<PendingOp>()>& make);
  // Completes or fails a kCoalesced closing task once its members are done (run-to-completion).
  void finish_coalesced(Task& task);
  // kLaunch: polls the launched ops until `target` is done (null: once) or `until` passes. With
  // `try_only`, gives up at once if another thread is polling.
  void progress(const Work* target, std::chrono::steady_clock::time_point until, bool try_only);
  // A new entry at the end of inflight_, from a recycled node when there is one; inflight_mu_
  // held.
  Launched& add_inflight_locked();
  // Moves the done entries at the front of inflight_ to the spare list; inflight_mu_ held.
  void trim_inflight_locked();
  // One round over the launched ops, inflight_mu_ held; failures go to `failed`.
  void poll_launched(std::vector<std::pair<WorkHandle, Error>>& failed);
  // Retires finished ops from the front of inflight_ on the launching thread, inflight_mu_ held;
  // failures go to `failed`.
  void retire_launched_locked(std::vector<std::pair<WorkHandle, Error>>& failed);
  // Polls entry `e` (not done, has a pending op), inflight_mu_ held: completes it, or fails it
  // into `failed` (error, abort, past its deadline). `now_ns` is read once per round. Returns
  // whether it is done now.
  bool poll_entry_locked(Launched& e, int64_t& now_ns,
                         std::vector<std::pair<WorkHandle, Error>>& failed);
  // Fails the works in `failed`, outside inflight_mu_, and aborts the communicator if one timed
  // out.
  void finish_failed(std::vector<std::pair<WorkHandle, Error>>& failed);
  // kLaunchOnStream: orders the caller's stream after `work`'s op.
  void wait_on_stream(const Work& work);
  // Names `work`'s op in errors: rank, communicator, op, trace_seq() and op_id. Reads only the
  // record's fields fixed at numbering, so it takes no lock.
  ErrorContext context(const Work& work) const;
  // Stamps `work`'s record and `op` with `op_seq`, the counters and the enqueue time (also
  // returned in `enqueue_ns`), tells the sinks, and sets the work's driver. Call under the
  // numbering lock (see collective_seq_), numbering done, before the work is shared.
  void publish_locked(Work& work, Op& op, uint64_t op_seq, int64_t& enqueue_ns);
  // split() and a default-mode shrink(): the new communicator is in repair epoch `epoch`.
  std::shared_ptr<Communicator> split_into(int color, int key, CommOptions options, int epoch);
  // split(): the new group's backend, of options.backend when it names another kind.
  std::unique_ptr<Backend> make_child_backend(const SplitSpec& spec, const CommOptions& options,
                                              const trace::CommInfo& child) const;
  // Reports a failed op to the watchdog, then fails its work.
  void fail(Work& work, Error error);
  // Numbers the op's p2p channels (peer, direction) in `rec`. Call under the numbering lock.
  void number_channels(const Op& op, trace::OpRecord& rec);

  std::shared_ptr<const trace::CommInfo> info_;
  std::unique_ptr<Backend> backend_;
  const ExecutionModel model_;
  std::shared_ptr<void> resources_;
  std::shared_ptr<const JobContext> job_;

  // kLaunch: held from numbering an op until its launch() returned, so ops launch in order.
  std::mutex launch_mu_;
  // kLaunch: one poller at a time; guards inflight_. Never held while calling the watchdog. A
  // spin lock: an op that finishes inside launch() takes it twice (docs/performance.md).
  mutable trace::SpinLock inflight_mu_;
  // Launched ops, oldest first; done ones leave from the front. A list, so that an entry stays
  // put while others come and go, with its nodes recycled through spare_launched_ (a deque
  // allocated and freed a node every other op).
  std::list<Launched> inflight_;
  std::list<Launched> spare_launched_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;    // A task is running, on the worker or inline on a waiting caller.
  size_t released_ = 0;  // The worker may take the first released_ tasks of queue_.
  // queue_.size() - released_: tasks no thread has started, read without mu_.
  std::atomic<size_t> unreleased_{0};
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};  // Read without mu_ by pollers.
  // The numbering state, below, is written under the numbering lock: launch_mu_ for launching
  // backends, mu_ for queued ones. The counters are also read without it (accessors).
  std::atomic<uint64_t> collective_seq_{0};
  std::atomic<uint64_t> p2p_seq_{0};
  std::atomic<uint64_t> op_seq_{0};
  uint64_t splits_ = 0;
  // Backends' count of collectives: collective_seq_ may repeat inside a coalescing block, but
  // backends derive message tags from Op::collective_seq, which must differ per collective.
  uint64_t backend_collective_seq_ = 0;
  bool coalescing_ = false;            // Between start_coalescing() and end_coalescing().
  bool coalesced_collective_ = false;  // The block has bumped collective_seq_.
  bool coalesced_p2p_ = false;         // The block has bumped p2p_seq_.
  std::vector<WorkHandle> coalesced_;  // The open block's members.
  Work* running_ = nullptr;            // The op executing now, on the worker or inline.
  std::vector<uint64_t> sent_;         // Sends so far to each group rank.
  std::vector<uint64_t> received_;     // Receives so far from each group rank.
  std::thread worker_;              // Started by the first op: idle communicators cost no thread.
  std::shared_ptr<Driver> driver_;  // Shared with this communicator's works.
  std::unique_ptr<WatchdogView> watchdog_view_;  // What the watchdog sees of this communicator.
  std::unique_ptr<OpHooks> hooks_;               // Made with info_.
  HookHandle nan_check_;                         // MESHRT_NAN_CHECK's pre-op hook, when asked for.
};

}  // namespace meshrt
