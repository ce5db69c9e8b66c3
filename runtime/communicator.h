// A communicator: a group of ranks with one backend, on which collectives and point-to-point ops
// run asynchronously, in the order they were called, each validated and traced on the way.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../trace/op_record.h"
#include "backend.h"
#include "timeout.h"
#include "work.h"

namespace meshrt {

// The default op timeout of a communicator, as in PyTorch's Gloo and NCCL groups.
inline constexpr std::chrono::milliseconds kDefaultOpTimeout{std::chrono::minutes(10)};

// Options of a communicator created by split().
struct CommOptions {
  std::string name;                      // Default: "<parent name>/split<N>.<color>".
  std::string description;               // Default: the name.
  std::string mesh_dim;                  // The mesh dim it serves, for tracing; empty for none.
  std::chrono::milliseconds timeout{0};  // Default op timeout; 0 inherits the parent's.
};

// Per-call options.
struct OpOptions {
  std::chrono::milliseconds timeout{0};  // 0 = the communicator's default.
};

// Passed as split()'s color by ranks that join no new communicator (like NCCL_SPLIT_NOCOLOR).
inline constexpr int kNoColor = -1;

// Every op records the scope it was called in (trace/scope.h) and its caller's file and line;
// the defaulted `caller` argument captures the latter at no cost.
class Communicator {
 public:
  // Used by init() and split(); users get communicators from those. `resources` is kept alive as
  // long as the communicator or any communicator split from it (the store, a listening server).
  Communicator(trace::CommInfo info, std::unique_ptr<Backend> backend,
               std::shared_ptr<void> resources);
  // Lets queued ops finish (each is bounded by its timeout), then stops the worker.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return info_->rank; }
  int size() const { return static_cast<int>(info_->global_ranks.size()); }
  // Global rank of this process.
  int global_rank() const { return info_->global_rank; }
  const std::string& name() const { return info_->name; }
  const std::string& description() const { return info_->description; }
  // Global rank of each group rank.
  std::span<const int> global_ranks() const { return info_->global_ranks; }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(info_->timeout_ms); }
  std::string_view backend_name() const { return backend_->name(); }
  std::string backend_version() const { return backend_->version(); }
  // The identity that every trace record of this communicator carries.
  const std::shared_ptr<const trace::CommInfo>& info() const { return info_; }
  // Per-communicator counters: ops enqueued so far (collectives, p2p ops, all ops).
  uint64_t collective_seq() const;
  uint64_t p2p_seq() const;
  uint64_t op_seq() const;

  // Reduces `data` across the group in place.
  WorkHandle all_reduce(BufferView data, ReduceOp op = ReduceOp::kSum, OpOptions options = {},
                        std::source_location caller = std::source_location::current());
  // Copies `data` of rank `root` into `data` of every rank.
  WorkHandle broadcast(BufferView data, int root, OpOptions options = {},
                       std::source_location caller = std::source_location::current());
  // Reduces `data` into `data` of rank `root`; other ranks' buffers are left unchanged.
  WorkHandle reduce(BufferView data, int root, ReduceOp op = ReduceOp::kSum, OpOptions options = {},
                    std::source_location caller = std::source_location::current());
  // Concatenates every rank's `input`, in rank order, into `output` (size() x input.count).
  WorkHandle all_gather(BufferView input, BufferView output, OpOptions options = {},
                        std::source_location caller = std::source_location::current());
  // Reduces `input` (size() x output.count) and leaves block rank() of the result in `output`.
  WorkHandle reduce_scatter(BufferView input, BufferView output, ReduceOp op = ReduceOp::kSum,
                            OpOptions options = {},
                            std::source_location caller = std::source_location::current());
  // Sends block j of `input` to rank j and receives rank j's block into block j of `output`; blocks
  // are count / size() elements.
  WorkHandle all_to_all(BufferView input, BufferView output, OpOptions options = {},
                        std::source_location caller = std::source_location::current());
  // Uneven all_to_all: input_splits[j] elements go to rank j; output_splits[j] come from rank j.
  WorkHandle all_to_all(BufferView input, std::span<const size_t> input_splits, BufferView output,
                        std::span<const size_t> output_splits, OpOptions options = {},
                        std::source_location caller = std::source_location::current());
  // Concatenates every rank's `input` into `output` on rank `root` (ignored elsewhere).
  WorkHandle gather(BufferView input, BufferView output, int root, OpOptions options = {},
                    std::source_location caller = std::source_location::current());
  // Sends block j of `input` on rank `root` (ignored elsewhere) to `output` of rank j.
  WorkHandle scatter(BufferView input, BufferView output, int root, OpOptions options = {},
                     std::source_location caller = std::source_location::current());
  // Completes once every rank has entered it.
  WorkHandle barrier(OpOptions options = {},
                     std::source_location caller = std::source_location::current());
  // Sends `data` to group rank `peer`; matched with the peer's recv of the same tag.
  WorkHandle send(BufferView data, int peer, int tag = 0, OpOptions options = {},
                  std::source_location caller = std::source_location::current());
  // Receives into `data` from group rank `peer`.
  WorkHandle recv(BufferView data, int peer, int tag = 0, OpOptions options = {},
                  std::source_location caller = std::source_location::current());
  // Posts all sends and receives of `ops` together (no ordering deadlock between them) as one op.
  WorkHandle batch_isend_irecv(std::span<const P2POp> ops, OpOptions options = {},
                               std::source_location caller = std::source_location::current());

  // Collective over this communicator: ranks passing the same `color` form a new communicator,
  // ordered by `key`, then by rank here. Ranks passing kNoColor get nullptr. Every rank must call
  // split in the same order relative to its other ops.
  std::shared_ptr<Communicator> split(int color, int key, CommOptions options = {});

  // Fails ops in flight and every later op with kAborted. Any thread may call it.
  void abort() noexcept;
  // The record of the op executing now, if any (for the watchdog).
  std::optional<trace::OpRecord> running_record() const;

 private:
  struct Task {
    Op op;
    WorkHandle work;
    std::function<void()> job;                 // Internal work (split) run on the worker, untraced.
    std::shared_ptr<trace::DebugStats> debug;  // Shared with the record in debug mode.
  };

  class Runner;
  class WatchdogView;

  WorkHandle enqueue(Op op, OpOptions options, const std::source_location& caller);
  void post_job(std::function<void()> job);
  void worker_loop();
  void run_task(Task& task);
  // Runs a task this thread took off the queue (busy_ set), then frees the queue.
  void run_claimed(Task& task);
  bool try_run_inline(const Work& work);
  // Reports a failed op to the watchdog, then fails its work.
  void fail(Work& work, Error error);
  // Numbers the op's p2p channels (peer, direction) in `rec`. Call under mu_.
  void number_channels(const Op& op, trace::OpRecord& rec);

  std::shared_ptr<const trace::CommInfo> info_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<void> resources_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;  // A task is running, on the worker or inline on a waiting caller.
  bool stopping_ = false;
  bool aborted_ = false;
  uint64_t collective_seq_ = 0;
  uint64_t p2p_seq_ = 0;
  uint64_t op_seq_ = 0;
  uint64_t splits_ = 0;
  WorkHandle running_;              // The op executing now, on the worker or inline.
  std::vector<uint64_t> sent_;      // Sends so far to each group rank.
  std::vector<uint64_t> received_;  // Receives so far from each group rank.
  std::thread worker_;              // Started by the first op: idle communicators cost no thread.
  std::shared_ptr<Runner> runner_;  // Shared with this communicator's works.
  std::unique_ptr<WatchdogView> watchdog_view_;  // What the watchdog sees of this communicator.
};

}  // namespace meshrt
