#include "runtime/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <future>
#include <shared_mutex>

#include "runtime/backend_factory.h"
#include "runtime/debug_stats.h"
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/fatal_signal.h"
#include "runtime/nan_check.h"
#include "runtime/rank_failures.h"
#include "runtime/validation.h"
#include "runtime/watchdog.h"
#include "trace/flight_recorder.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt {
namespace {

std::atomic<uint64_t> next_comm_uid{0};

// Every run-to-completion communicator of the process, and how many queued tasks they hold that
// no thread has started: a thread about to block starts the others' on their workers.
struct QueuedRegistry {
  std::mutex mu;
  std::vector<Communicator*> comms;
  std::atomic<size_t> unreleased{0};
};
QueuedRegistry& queued_registry() {
  static QueuedRegistry registry;
  return registry;
}

// Adds one to a counter that only the holder of the numbering lock writes (others read it
// without a lock): a load and a store, no atomic read-modify-write. Returns the new value.
uint64_t bump(std::atomic<uint64_t>& counter) {
  const uint64_t next = counter.load(std::memory_order_relaxed) + 1;
  counter.store(next, std::memory_order_relaxed);
  return next;
}

// How a Work of a backend with `model` reaches its op.
WorkPath work_path(ExecutionModel model) {
  switch (model) {
    case ExecutionModel::kRunToCompletion:
      return WorkPath::kQueued;
    case ExecutionModel::kLaunch:
      return WorkPath::kLaunched;
    case ExecutionModel::kLaunchOnStream:
      return WorkPath::kLaunchedOnStream;
  }
  return WorkPath::kQueued;
}

}  // namespace

// The works' handle on their communicator: it may be gone by the time a work waits, so the
// communicator closes it on destruction, after any inline run in progress has finished. Every
// launched op is done by then, so progress() and wait_on_stream() never find it closed.
class Communicator::Driver : public WorkDriver {
 public:
  explicit Driver(Communicator* owner) : owner_(owner) {}
  bool run_inline(const Work& work) override {
    std::shared_lock lock(mu_);
    return owner_ != nullptr && owner_->try_run_inline(work);
  }
  void start(const Work& work) override {
    std::shared_lock lock(mu_);
    if (owner_ == nullptr) return;
    owner_->start_queued_elsewhere();
    owner_->start_on_worker(&work);
  }
  void progress(const Work& work, std::chrono::steady_clock::time_point until) override {
    owner_->progress(&work, until, /*try_only=*/false);
  }
  void wait_on_stream(const Work& work) override { owner_->wait_on_stream(work); }
  void close() {
    std::unique_lock lock(mu_);
    owner_ = nullptr;
  }

 private:
  std::shared_mutex mu_;  // Shared by inline runs and starts (which never wait for each other).
  Communicator* owner_;
};

// The watchdog's view: it scans the running op and aborts, and knows nothing else of us.
class Communicator::WatchdogView final : public Watched {
 public:
  explicit WatchdogView(Communicator& comm) : comm_(comm) {}
  std::optional<trace::OpRecord> running_record() const override { return comm_.running_record(); }
  void abort() noexcept override { comm_.abort(); }
  void progress() noexcept override {
    try {
      if (comm_.model_ == ExecutionModel::kRunToCompletion) {
        // Bounds how long an op nobody waits for stays queued.
        comm_.start_on_worker(nullptr);
        return;
      }
      comm_.progress(nullptr, std::chrono::steady_clock::time_point::min(), /*try_only=*/true);
    } catch (const std::exception& e) {
      log().error("polling '{}' failed: {}", comm_.name(), e.what());
    }
  }

 private:
  Communicator& comm_;
};

Communicator::Communicator(trace::CommInfo info, std::unique_ptr<Backend> backend,
                           std::shared_ptr<void> resources, std::shared_ptr<const JobContext> job)
    : backend_(std::move(backend)),
      model_(backend_->execution_model()),
      resources_(std::move(resources)),
      job_(std::move(job)),
      driver_(std::make_shared<Driver>(this)) {
  apply_environment(info.global_rank, info.name);
  info.uid = next_comm_uid.fetch_add(1);
  info.backend = std::string(backend_->name());
  if (info.description.empty()) info.description = info.name;
  if (info.timeout_ms <= 0) info.timeout_ms = kDefaultOpTimeout.count();
  info.backend_version = backend_->version();
  info_ = std::make_shared<const trace::CommInfo>(std::move(info));
  backend_->set_comm_info(info_);
  hooks_ = std::make_unique<OpHooks>(info_);
  if (nan_check_enabled_from_env()) nan_check_ = hooks_->add_pre_op(nan_check_hook);
  sent_.assign(info_->global_ranks.size(), 0);
  received_.assign(info_->global_ranks.size(), 0);
  trace::FlightRecorder::instance().register_comm(info_);
  watchdog_view_ = std::make_unique<WatchdogView>(*this);
  Watchdog::instance().add(watchdog_view_.get());
  if (model_ == ExecutionModel::kRunToCompletion) {
    QueuedRegistry& registry = queued_registry();
    std::lock_guard lock(registry.mu);
    registry.comms.push_back(this);
  }
  log().debug("communicator '{}' ({}): rank {} of {}, global ranks [{}]", info_->name,
              info_->backend, info_->rank, info_->global_ranks.size(),
              fmt::join(info_->global_ranks, ","));
}

Communicator::~Communicator() {
  // Launched ops hold the caller's buffers: finish (or time out) every one first.
  if (model_ != ExecutionModel::kRunToCompletion) {
    for (;;) {
      {
        std::lock_guard lock(inflight_mu_);
        if (inflight_.empty()) break;
      }
      progress(nullptr, std::chrono::steady_clock::time_point::min(), /*try_only=*/false);
      std::this_thread::yield();
    }
  }
  Watchdog::instance().remove(watchdog_view_.get());
  Watchdog::instance().note_comm_end(info_->store_key, static_cast<int64_t>(collective_seq()));
  trace::FlightRecorder::instance().unregister_comm(info_.get());
  if (model_ == ExecutionModel::kRunToCompletion) {
    QueuedRegistry& registry = queued_registry();
    std::lock_guard lock(registry.mu);
    std::erase(registry.comms, this);
  }
  {
    std::lock_guard lock(mu_);
    release_locked(queue_.size());  // Queued ops still run, on the worker.
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  driver_->close();
}

uint64_t Communicator::collective_seq() const {
  return collective_seq_.load(std::memory_order_relaxed);
}
uint64_t Communicator::p2p_seq() const { return p2p_seq_.load(std::memory_order_relaxed); }
uint64_t Communicator::op_seq() const { return op_seq_.load(std::memory_order_relaxed); }

WorkHandle Communicator::enqueue(Op&& op, OpOptions options, const CallSite& caller) {
  op.timeout = options.timeout.count() != 0 ? options.timeout : timeout();
  validate_op(op, *info_, backend_->accepts_cuda());  // Before the cap: it names what was passed.
  op.timeout = capped_timeout(op.timeout);
  op.algorithm = backend_->choose_algorithm(op);
  try {
    backend_->validate(op);
  } catch (const Error& e) {
    throw Error(e.code(), {global_rank(), name(), std::string(op_kind_name(op.kind)), -1},
                e.detail());
  }

  if (hooks_->has_pre_op()) {
    hooks_->run_pre_op({op.kind, op_kind_name(op.kind), rank(), op.root, op.input, op.output,
                        op.p2p, info_.get()});
  }

  // Built before any lock: numbering fills in the rest of its record under the numbering lock.
  WorkHandle work = make_work();
  trace::OpRecord& rec = work->record_;  // Nobody else sees it before publish_locked().
  fill_record(op, info_, caller, rec);
  if (debug_tensor_stats_enabled()) {
    rec.debug = std::make_shared<trace::DebugStats>();
    rec.debug->input = tensor_stats(op.input);
  }
  std::shared_ptr<trace::DebugStats> debug = rec.debug;

  int64_t enqueue_ns = 0;
  // The numbering lock. Launching backends take the op on this thread: numbering and launch()
  // under launch_mu_ keep every rank's launch order equal to its call order, and mu_ (which
  // guards only the queue they do not use) is not taken. Queued backends number under mu_.
  std::unique_lock launch_lock(launch_mu_, std::defer_lock);
  std::unique_lock queue_lock(mu_, std::defer_lock);
  if (model_ == ExecutionModel::kRunToCompletion) {
    queue_lock.lock();
  } else {
    launch_lock.lock();
  }
  // Numbered like PyTorch's Flight Recorder: collectives and p2p ops count separately, each
  // record carries the current value of the other counter.
  // A coalescing block's members share one number per counter, bumped by its first member of
  // each kind (PyTorch's start/endCoalescing).
  if (rec.is_p2p) {
    if (!coalescing_ || !std::exchange(coalesced_p2p_, true)) bump(p2p_seq_);
  } else {
    if (!coalescing_ || !std::exchange(coalesced_collective_, true)) bump(collective_seq_);
    ++backend_collective_seq_;
  }
  number_channels(op, rec);
  publish_locked(*work, op, bump(op_seq_), enqueue_ns);
  if (coalescing_) coalesced_.push_back(work);
  if (aborted_) {
    work->mark_failed(Error(ErrorCode::kAborted, context(*work), "the communicator was aborted"));
    return work;
  }
  if (model_ != ExecutionModel::kRunToCompletion) {
    launch(op, work, std::move(debug), enqueue_ns);
    return work;
  }
  // An op queued behind one not yet finished means the caller is pipelining: from then on the
  // worker runs the queue. A coalescing block's members wait for their closing entry.
  const bool pipelining = (busy_ || !queue_.empty()) && !coalescing_;
  work->op_.emplace(std::move(op));
  push_locked(Task{work, nullptr});
  if (!(options.async_op || pipelining) || !release_locked(queue_.size())) return work;
  queue_lock.unlock();
  cv_.notify_one();
  return work;
}

void Communicator::publish_locked(Work& work, Op& op, uint64_t op_seq, int64_t& enqueue_ns) {
  trace::OpRecord& rec = work.record_;
  rec.collective_seq = collective_seq_.load(std::memory_order_relaxed);
  rec.p2p_seq = p2p_seq_.load(std::memory_order_relaxed);
  rec.record_id = trace::next_record_id();
  rec.op_seq = op.op_seq = op_seq;
  op.collective_seq = backend_collective_seq_;
  rec.enqueue_ns = enqueue_ns = trace::steady_now_ns();
  rec.created_wall_ns = trace::wall_from_steady_ns(rec.enqueue_ns);
  // Sinks hear of the op before it can start, and in sequence order.
  trace::emit_enqueue(rec);
  // A barrier's wait() blocks the host on every backend, as PyTorch's NCCL barrier does: a
  // barrier that only ordered the caller's stream would let the host run ahead of its peers.
  const bool host_barrier =
      op.kind == OpKind::kBarrier && model_ == ExecutionModel::kLaunchOnStream;
  work.set_driver(driver_, host_barrier ? WorkPath::kLaunched : work_path(model_));
}

ErrorContext Communicator::context(const Work& work) const {
  const trace::OpRecord& r = work.record_;
  ErrorContext c{global_rank(), name(), std::string(r.op),
                 static_cast<int64_t>(trace::trace_seq(r)), static_cast<int64_t>(r.op_seq)};
  if (r.is_p2p && r.root_or_peer >= 0 &&
      r.root_or_peer < static_cast<int>(info_->global_ranks.size())) {
    c.peer = info_->global_ranks[r.root_or_peer];
    c.channel_seq = static_cast<int64_t>(r.p2p_channel_seq);
  }
  return c;
}

void Communicator::launch(const Op& op, const WorkHandle& work,
                          std::shared_ptr<trace::DebugStats> debug, int64_t enqueue_ns) {
  launch_pending(op, work, std::move(debug), enqueue_ns, [&] { return backend_->launch(op); });
}

void Communicator::launch_pending(const Op& op, const WorkHandle& work,
                                  std::shared_ptr<trace::DebugStats> debug, int64_t enqueue_ns,
                                  const std::function<std::unique_ptr<PendingOp>()>& make) {
  Launched* entry;
  {
    std::lock_guard lock(inflight_mu_);
    // Listed before launch() so that the watchdog sees an op whose launch blocks.
    entry = &add_inflight_locked();
    entry->work = work.get();
    entry->deadline_ns = enqueue_ns + op.timeout.count() * 1'000'000;
    entry->timeout_ms = op.timeout.count();
    entry->debug = std::move(debug);
    entry->output = op.output;
  }
  // A host library has begun the op once called; a stream's op begins when the stream gets to
  // it, which poll() reports.
  if (model_ == ExecutionModel::kLaunch) work->mark_started(enqueue_ns);
  std::unique_ptr<PendingOp> pending;
  std::optional<Error> failure;
  std::vector<std::pair<WorkHandle, Error>> retired;
  try {
    pending = make();
  } catch (const Error& e) {
    failure.emplace(e.code(), context(*work), e.detail());
  } catch (const std::exception& e) {
    failure.emplace(ErrorCode::kBackend, context(*work), e.what());
  }
  // No pending op: the backend finished it inside launch() (MPI's blocking path). It completes
  // now and leaves no list entry for wait() to poll.
  const bool done_now = !failure && !pending;
  if (const uint64_t graph = pending ? pending->cuda_graph_id() : 0; graph != 0) {
    // Captured into a CUDA graph: the record says which, before its completion is seen.
    std::lock_guard lock(work->record_mu_);
    work->record_.cuda_graph_id = graph;
  }
  {
    // List entries never move, and pollers skip an entry without `pending`, so `entry` is
    // still ours.
    std::lock_guard lock(inflight_mu_);
    entry->started = model_ == ExecutionModel::kLaunch;
    entry->done = failure.has_value() || done_now;
    if (!entry->done) {
      entry->pending = std::move(pending);
      entry->owner = work;
    }
    if (done_now) debug = std::move(entry->debug);
    if (model_ == ExecutionModel::kLaunchOnStream) retire_launched_locked(retired);
    trim_inflight_locked();
  }
  finish_failed(retired);

  if (failure) fail(*work, std::move(*failure));
  if (done_now) {
    if (debug) debug->output = tensor_stats(op.output);
    work->mark_completed();
  }
}

void Communicator::progress(const Work* target, std::chrono::steady_clock::time_point until,
                            bool try_only) {
  // Polls back to back before yielding: on a busy machine a yield can give the CPU away for a
  // time slice (20-30 us measured with MPI over shared memory, 8 B), many times what a small
  // op takes. MPI_Wait spins the same way.
  constexpr int kPollsBeforeYield = 2000;
  // A caller about to block (not one polling once) cannot run its queued ops elsewhere.
  if (target != nullptr && until != std::chrono::steady_clock::time_point::min()) {
    start_queued_elsewhere();
  }
  for (int polls = 1;; ++polls) {
    std::vector<std::pair<WorkHandle, Error>> failed;
    {
      std::unique_lock lock(inflight_mu_, std::defer_lock);
      if (try_only) {
        if (!lock.try_lock()) return;
      } else {
        lock.lock();
      }
      poll_launched(failed);
    }
    finish_failed(failed);
    if (target == nullptr || target->done_now() || std::chrono::steady_clock::now() >= until) {
      return;
    }
    if (polls >= kPollsBeforeYield) std::this_thread::yield();
  }
}

void Communicator::finish_failed(std::vector<std::pair<WorkHandle, Error>>& failed) {
  // Outside inflight_mu_: the watchdog may dump, exit, or call back into running_record().
  bool timed_out = false;
  for (auto& [work, error] : failed) {
    timed_out |= error.code() == ErrorCode::kTimeout;
    fail(*work, std::move(error));
  }
  // A timed-out op is still inside the backend: nothing after it can run in order. Abort, as
  // PyTorch's watchdog aborts a NCCL communicator.
  if (timed_out) abort();
}

bool Communicator::poll_entry_locked(Launched& e, int64_t& now_ns,
                                     std::vector<std::pair<WorkHandle, Error>>& failed) {
  if (aborted_.load(std::memory_order_relaxed)) {
    e.pending->abandon();
    e.done = true;
    failed.emplace_back(
        e.owner, Error(ErrorCode::kAborted, context(*e.work), "the communicator was aborted"));
    return true;
  }
  try {
    const PollResult r = e.pending->poll();
    if (r.state != PollResult::State::kScheduled && !e.started) {
      e.started = true;
      e.work->mark_started(r.start_ns);
    }
    if (r.state == PollResult::State::kDone) {
      e.done = true;
      if (e.debug) e.debug->output = tensor_stats(e.output);
      e.work->mark_completed(r.end_ns);
      return true;
    }
  } catch (const Error& err) {
    e.done = true;
    failed.emplace_back(e.owner, Error(err.code(), context(*e.work), err.detail()));
    return true;
  } catch (const std::exception& err) {
    e.done = true;
    failed.emplace_back(e.owner, Error(ErrorCode::kBackend, context(*e.work), err.what()));
    return true;
  }
  if (now_ns == 0) now_ns = trace::steady_now_ns();
  if (now_ns <= e.deadline_ns) return false;
  e.pending->abandon();
  e.done = true;
  failed.emplace_back(
      e.owner, Error(ErrorCode::kTimeout, context(*e.work),
                     fmt::format("not finished after its timeout of {} ms ({})", e.timeout_ms,
                                 e.started ? "started" : "still scheduled: never began")));
  return true;
}

void Communicator::poll_launched(std::vector<std::pair<WorkHandle, Error>>& failed) {
  int64_t now_ns = 0;
  for (Launched& e : inflight_) {
    if (!e.done && e.pending) poll_entry_locked(e, now_ns, failed);
  }
  trim_inflight_locked();
}

void Communicator::retire_launched_locked(std::vector<std::pair<WorkHandle, Error>>& failed) {
  // Keeps the list (and the events it holds) short however rarely anyone waits, at a fraction of
  // a query per launch: an event query costs about as much as the rest of a launch. The newest
  // ops are left alone (a query of an op just launched is wasted).
  constexpr size_t kUnpolled = 8;
  if (inflight_.size() < 2 * kUnpolled) return;
  int64_t now_ns = 0;
  // The op kUnpolled back from the newest, once done, vouches for every older op of its stream,
  // unless their records want measured times.
  const auto vouch = std::prev(inflight_.end(), kUnpolled);
  const void* order = vouch->pending ? vouch->pending->completion_order() : nullptr;
  if (order == nullptr || trace::timing_enabled()) {
    // Each op answers for itself: poll the oldest unfinished one.
    for (Launched& e : inflight_) {
      if (e.done) continue;
      if (e.pending) poll_entry_locked(e, now_ns, failed);
      return;
    }
    return;
  }
  if (vouch->done) return;
  const size_t failures = failed.size();
  if (!poll_entry_locked(*vouch, now_ns, failed) || failed.size() != failures) return;
  for (auto it = inflight_.begin(); it != vouch; ++it) {
    if (it->done || !it->pending || it->pending->completion_order() != order) continue;
    it->done = true;
    if (!it->started) it->work->mark_started(0);
    if (it->debug) it->debug->output = tensor_stats(it->output);
    it->work->mark_completed(0);
  }
}

Communicator::Launched& Communicator::add_inflight_locked() {
  if (spare_launched_.empty()) return inflight_.emplace_back();
  inflight_.splice(inflight_.end(), spare_launched_, spare_launched_.begin());
  return inflight_.back();
}

void Communicator::trim_inflight_locked() {
  // A few spare nodes cover the ops a program keeps in flight at once.
  constexpr size_t kMaxSpare = 16;
  while (!inflight_.empty() && inflight_.front().done) {
    if (spare_launched_.size() >= kMaxSpare) {
      inflight_.pop_front();
      continue;
    }
    Launched& e = inflight_.front();
    e.work = nullptr;
    e.owner.reset();
    e.pending.reset();
    e.debug.reset();
    e.started = e.done = false;
    spare_launched_.splice(spare_launched_.end(), inflight_, inflight_.begin());
  }
}

void Communicator::wait_on_stream(const Work& work) {
  std::lock_guard lock(inflight_mu_);
  // Newest first: a caller usually waits on the op it just launched.
  for (auto it = inflight_.rbegin(); it != inflight_.rend(); ++it) {
    Launched& e = *it;
    if (e.work == &work) {
      if (!e.done && e.pending) e.pending->wait_on_stream();
      return;
    }
  }
}

void Communicator::number_channels(const Op& op, trace::OpRecord& rec) {
  // Per-(peer, direction) counts let an analyzer pair each send with its recv in pipelines,
  // where the group-wide p2p count differs from rank to rank.
  auto next = [&](bool is_send, int peer) -> uint64_t {
    auto& counts = is_send ? sent_ : received_;
    return peer >= 0 && peer < static_cast<int>(counts.size()) ? ++counts[peer] : 0;
  };
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
    rec.p2p_channel_seq = next(op.kind == OpKind::kSend, op.root);
  } else if (op.kind == OpKind::kBatchP2P) {
    auto members = std::make_shared<std::vector<trace::P2PMember>>();
    members->reserve(op.p2p.size());
    for (const P2POp& p : op.p2p) {
      const bool is_send = p.dir == P2POp::Dir::kSend;
      members->push_back(
          {is_send, p.peer, p.buffer.count, next(is_send, p.peer), dtype_name(p.buffer.dtype)});
    }
    rec.batch = std::move(members);
  }
}

std::optional<trace::OpRecord> Communicator::running_record() const {
  if (model_ != ExecutionModel::kRunToCompletion) {
    // Read under inflight_mu_: an entry not done has a live work (its launching caller or the
    // entry's owner holds it).
    std::lock_guard lock(inflight_mu_);
    for (const Launched& e : inflight_) {
      if (!e.done) return e.work->record();
    }
    return std::nullopt;
  }
  // Under mu_: the runner clears running_ under it before it lets go of the work.
  std::lock_guard lock(mu_);
  if (running_ == nullptr) return std::nullopt;
  return running_->record();
}

void Communicator::post_job(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    push_locked(Task{nullptr, std::move(job)});
    release_locked(queue_.size());
  }
  cv_.notify_one();
}

void Communicator::push_locked(Task&& task) {
  queue_.push_back(std::move(task));
  unreleased_.fetch_add(1, std::memory_order_relaxed);
  queued_registry().unreleased.fetch_add(1, std::memory_order_relaxed);
}

bool Communicator::release_locked(size_t count) {
  count = std::min(count, queue_.size());
  if (count <= released_) return false;
  const size_t released = count - released_;
  released_ = count;
  unreleased_.fetch_sub(released, std::memory_order_relaxed);
  queued_registry().unreleased.fetch_sub(released, std::memory_order_relaxed);
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  return true;
}

Communicator::Task Communicator::take_front_locked() {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  if (released_ > 0) {
    --released_;
  } else {
    unreleased_.fetch_sub(1, std::memory_order_relaxed);
    queued_registry().unreleased.fetch_sub(1, std::memory_order_relaxed);
  }
  busy_ = true;
  running_ = task.work.get();
  return task;
}

size_t Communicator::queued_through_locked(const Work& work) const {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [&work](const Task& t) { return t.work.get() == &work; });
  return it == queue_.end() ? 0 : static_cast<size_t>(it - queue_.begin()) + 1;
}

void Communicator::start_on_worker(const Work* work) {
  bool released = false;
  {
    std::lock_guard lock(mu_);
    released = release_locked(work == nullptr ? queue_.size() : queued_through_locked(*work));
  }
  if (released) cv_.notify_one();
}

void Communicator::start_queued_elsewhere() const {
  QueuedRegistry& registry = queued_registry();
  // The common case, one relaxed load each: nothing is queued but (maybe) our own.
  if (registry.unreleased.load(std::memory_order_relaxed) ==
      unreleased_.load(std::memory_order_relaxed)) {
    return;
  }
  std::lock_guard lock(registry.mu);
  for (Communicator* comm : registry.comms) {
    if (comm != this && comm->unreleased_.load(std::memory_order_relaxed) > 0) {
      comm->start_on_worker(nullptr);
    }
  }
}

void Communicator::worker_loop() {
  set_log_thread_rank(global_rank());
  use_signal_stack_on_this_thread();
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !busy_ && (released_ > 0 || stopping_); });
      if (released_ == 0) return;
      task = take_front_locked();
    }
    run_claimed(task);
  }
}

bool Communicator::try_run_inline(const Work& work) {
  start_queued_elsewhere();
  for (;;) {
    Task task;
    {
      std::lock_guard lock(mu_);
      const size_t through = queued_through_locked(work);
      if (through == 0) return false;  // Running elsewhere, or done.
      if (busy_) {
        // Whoever runs now frees the queue for the worker, not for us: hand our op over.
        if (!release_locked(through)) return false;
      } else {
        task = take_front_locked();
      }
    }
    if (!task.work && !task.job) {
      cv_.notify_one();
      return false;
    }
    const bool mine = task.work.get() == &work;
    run_claimed(task);
    if (mine) return true;
  }
}

void Communicator::run_claimed(Task& task) {
  run_task(task);
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    busy_ = false;
    running_ = nullptr;
    // The worker sleeps until it has a task it may take: waking it for nothing would cost the
    // very hand-off an inline run saves.
    wake = released_ > 0 || stopping_;
  }
  if (wake) cv_.notify_one();
}

void Communicator::run_task(Task& task) {
  if (task.job) {
    task.job();
    return;
  }
  Work& work = *task.work;
  Op& op = *work.op_;
  if (op.kind == OpKind::kCoalesced) return finish_coalesced(task);
  if (aborted_.load(std::memory_order_relaxed)) {
    work.mark_failed(Error(ErrorCode::kAborted, context(work), "the communicator was aborted"));
    return;
  }
  const int64_t start_ns = trace::steady_now_ns();
  op.started = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(start_ns));
  work.mark_started(start_ns);
  try {
    if (op.reducer) take_reducer_failure();  // Left by an op of this thread that failed.
    backend_->run(op);
    // The op ran to its end on every rank (its peers stay in step); only then does it fail.
    if (op.reducer) {
      if (auto failure = take_reducer_failure())
        throw Error(ErrorCode::kInvalidArgument, {}, *failure);
    }
    // Set before the work was queued, and never after: read without the record's lock.
    if (work.record_.debug) work.record_.debug->output = tensor_stats(op.output);
    work.mark_completed();
  } catch (const Error& e) {
    // Backends know the failure but not the op's identity: add it.
    fail(work, Error(e.code(), context(work), e.detail()));
  } catch (const std::exception& e) {
    fail(work, Error(ErrorCode::kBackend, context(work), e.what()));
  }
}

void Communicator::fail(Work& work, Error error) {
  log().error("{}", error.what());
  // The watchdog dumps (and under its abort policy exits) before anyone can see the error, so
  // a program that ends on it still leaves its flight recorder behind. An abort is no failure
  // of the job's own: whoever aborted has already reported why, and an aborted communicator's
  // ops fail as its consequence. A dead peer, when the job repairs around dead ranks, is the
  // program's to handle (MESHRT_ON_RANK_FAILURE=continue).
  const bool report =
      error.code() != ErrorCode::kAborted && !aborted_.load() &&
      !(error.code() == ErrorCode::kPeerFailure && Watchdog::instance().repairs_in_place());
  const bool timed_out = error.code() == ErrorCode::kTimeout;
  const std::string message = error.what();
  work.record_failure(std::move(error));
  if (report) Watchdog::instance().on_op_failed(work.record(), message, timed_out);
  work.release();
}

WorkHandle Communicator::all_reduce(BufferView data, ReduceBy op, OpOptions options,
                                    CallSite caller) {
  Op o;
  o.kind = OpKind::kAllReduce;
  o.input = o.output = data;
  o.reduce_op = op.op;
  o.reducer = std::move(op.reducer);
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::broadcast(BufferView data, int root, OpOptions options, CallSite caller) {
  Op o;
  o.kind = OpKind::kBroadcast;
  o.input = o.output = data;
  o.root = root;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::reduce(BufferView data, int root, ReduceBy op, OpOptions options,
                                CallSite caller) {
  Op o;
  o.kind = OpKind::kReduce;
  o.input = o.output = data;
  o.root = root;
  o.reduce_op = op.op;
  o.reducer = std::move(op.reducer);
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::all_gather(BufferView input, BufferView output, OpOptions options,
                                    CallSite caller) {
  Op o;
  o.kind = OpKind::kAllGather;
  o.input = input;
  o.output = output;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::reduce_scatter(BufferView input, BufferView output, ReduceBy op,
                                        OpOptions options, CallSite caller) {
  Op o;
  o.kind = OpKind::kReduceScatter;
  o.input = input;
  o.output = output;
  o.reduce_op = op.op;
  o.reducer = std::move(op.reducer);
  return enqueue(std::move(o), options, caller);
}

namespace {

// The v-collectives' blocks: the caller's counts, and its offsets or each block after the one
// before. Validation checks them against the group and the buffers.
void set_blocks(Op& o, std::span<const size_t> counts, std::span<const size_t> offsets) {
  o.block_counts.assign(counts.begin(), counts.end());
  if (!offsets.empty()) {
    o.block_offsets.assign(offsets.begin(), offsets.end());
    return;
  }
  o.block_offsets.resize(counts.size());
  size_t next = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    o.block_offsets[q] = next;
    next += counts[q];  // Wraps only on counts validation refuses as overflowing.
  }
}

}  // namespace

WorkHandle Communicator::all_gather_v(BufferView input, BufferView output,
                                      std::span<const size_t> counts,
                                      std::span<const size_t> offsets, OpOptions options,
                                      CallSite caller) {
  Op o;
  o.kind = OpKind::kAllGatherV;
  o.input = input;
  o.output = output;
  set_blocks(o, counts, offsets);
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::reduce_scatter_v(BufferView input, BufferView output,
                                          std::span<const size_t> counts,
                                          std::span<const size_t> offsets, ReduceBy op,
                                          OpOptions options, CallSite caller) {
  Op o;
  o.kind = OpKind::kReduceScatterV;
  o.input = input;
  o.output = output;
  o.reduce_op = op.op;
  o.reducer = std::move(op.reducer);
  set_blocks(o, counts, offsets);
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::all_to_all(BufferView input, BufferView output, OpOptions options,
                                    CallSite caller) {
  Op o;
  o.kind = OpKind::kAllToAll;
  o.input = input;
  o.output = output;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::all_to_all(BufferView input, std::span<const size_t> input_splits,
                                    BufferView output, std::span<const size_t> output_splits,
                                    OpOptions options, CallSite caller) {
  Op o;
  o.kind = OpKind::kAllToAll;
  o.input = input;
  o.output = output;
  o.input_splits.assign(input_splits.begin(), input_splits.end());
  o.output_splits.assign(output_splits.begin(), output_splits.end());
  if (o.input_splits.empty() != o.output_splits.empty()) {
    throw Error(ErrorCode::kInvalidArgument, {global_rank(), name(), "all_to_all", -1},
                "give both input and output splits, or neither");
  }
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::gather(BufferView input, BufferView output, int root, OpOptions options,
                                CallSite caller) {
  Op o;
  o.kind = OpKind::kGather;
  o.input = input;
  o.output = output;
  o.root = root;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::scatter(BufferView input, BufferView output, int root, OpOptions options,
                                 CallSite caller) {
  Op o;
  o.kind = OpKind::kScatter;
  o.input = input;
  o.output = output;
  o.root = root;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::barrier(OpOptions options, CallSite caller) {
  Op o;
  o.kind = OpKind::kBarrier;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::send(BufferView data, int peer, int tag, OpOptions options,
                              CallSite caller) {
  Op o;
  o.kind = OpKind::kSend;
  o.input = o.output = data;
  o.root = peer;
  o.tag = tag;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::recv(BufferView data, int peer, int tag, OpOptions options,
                              CallSite caller) {
  Op o;
  o.kind = OpKind::kRecv;
  o.input = o.output = data;
  o.root = peer;
  o.tag = tag;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::batch_isend_irecv(std::span<const P2POp> ops, OpOptions options,
                                           CallSite caller) {
  Op o;
  o.kind = OpKind::kBatchP2P;
  o.p2p.assign(ops.begin(), ops.end());
  return enqueue(std::move(o), options, caller);
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, CommOptions options) {
  return split_into(color, key, std::move(options), info_->epoch);
}

std::shared_ptr<Communicator> Communicator::split_into(int color, int key, CommOptions options,
                                                       int epoch) {
  if (color < kNoColor) {
    throw Error(ErrorCode::kInvalidArgument, {global_rank(), name(), "split", -1},
                fmt::format("color {} is negative (use kNoColor to join no group)", color));
  }
  uint64_t index;
  {
    std::lock_guard lock(mu_);
    index = ++splits_;
  }
  const auto timeout_ms = capped_timeout(options.timeout.count() > 0 ? options.timeout : timeout());
  // The (color, key) exchange is an ordinary all_gather: numbered, traced, failed by abort. The
  // child's creation then runs on the worker right behind it, so split is ordered like any
  // collective on this communicator.
  auto mine = std::make_shared<std::array<int64_t, 2>>(std::array<int64_t, 2>{color, key});
  auto all = std::make_shared<std::vector<int64_t>>(2 * static_cast<size_t>(size()));
  WorkHandle exchange = [&] {
    const trace::SetupOps setup;  // Reports tell meshrt's own ops from the program's.
    return all_gather(view(std::span<int64_t>(*mine)), view(*all), {timeout_ms});
  }();
  auto result = std::make_shared<std::promise<std::shared_ptr<Communicator>>>();
  auto future = result->get_future();
  auto job = [this, result, exchange, mine, all, index, timeout_ms, color, options, epoch] {
    try {
      exchange->wait();
      if (color == kNoColor) {
        // The members' split is the parent backend's only when no other backend was asked for.
        if (options.backend.empty() || options.backend == backend_->name()) {
          backend_->split_excluded();
        }
        result->set_value(nullptr);
        return;
      }
      std::vector<int> members;
      for (int r = 0; r < size(); ++r) {
        if ((*all)[2 * r] == color) members.push_back(r);
      }
      std::stable_sort(members.begin(), members.end(),
                       [&](int a, int b) { return (*all)[2 * a + 1] < (*all)[2 * b + 1]; });
      SplitSpec spec;
      spec.store_key = fmt::format("{}/split{}.c{}", info_->store_key, index, color);
      spec.name =
          options.name.empty() ? fmt::format("{}/split{}.{}", name(), index, color) : options.name;
      spec.parent_ranks = members;
      spec.rank =
          static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
      spec.timeout = timeout_ms;
      trace::CommInfo child;
      child.store_key = spec.store_key;
      child.name = spec.name;
      child.description = options.description;
      child.mesh_dim = options.mesh_dim.empty() ? info_->mesh_dim : options.mesh_dim;
      for (int r : members) child.global_ranks.push_back(info_->global_ranks[r]);
      child.rank = spec.rank;
      child.global_rank = global_rank();
      child.timeout_ms = timeout_ms.count();
      child.epoch = epoch;
      result->set_value(std::make_shared<Communicator>(
          std::move(child), make_child_backend(spec, options, child), resources_, job_));
    } catch (const Error& e) {
      result->set_exception(std::make_exception_ptr(
          Error(e.code(), {global_rank(), name(), "split", -1}, e.detail())));
    } catch (const std::exception& e) {
      result->set_exception(std::make_exception_ptr(
          Error(ErrorCode::kBackend, {global_rank(), name(), "split", -1}, e.what())));
    }
  };
  // A launching backend takes split on the caller's thread, in call order, like its ops.
  if (model_ == ExecutionModel::kRunToCompletion) {
    post_job(std::move(job));
  } else {
    job();
  }
  start_queued_elsewhere();
  return future.get();
}

std::shared_ptr<Communicator> Communicator::shrink(std::span<const int> excluded, ShrinkMode mode,
                                                   CommOptions options) {
  const ErrorContext where{global_rank(), name(), "shrink", -1};
  std::vector<int> out(excluded.begin(), excluded.end());
  std::sort(out.begin(), out.end());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= size()) {
      throw Error(ErrorCode::kInvalidArgument, where,
                  fmt::format("excluded rank {} is not a group rank of this {}-rank communicator",
                              out[i], size()));
    }
    if (i > 0 && out[i] == out[i - 1]) {
      throw Error(ErrorCode::kInvalidArgument, where,
                  fmt::format("rank {} is excluded twice", out[i]));
    }
  }
  if (static_cast<int>(out.size()) == size()) {
    throw Error(
        ErrorCode::kInvalidArgument, where,
        fmt::format("every one of the {} ranks is excluded: no communicator is left", size()));
  }
  const bool left_out = std::binary_search(out.begin(), out.end(), rank());
  if (options.name.empty()) {
    // "mesh0/dp" -> "mesh0/dp@1" -> "mesh0/dp@2": the name says which repair made it.
    std::string base = name();
    if (const size_t at = base.rfind('@');
        at != std::string::npos &&
        base.find_first_not_of("0123456789", at + 1) == std::string::npos) {
      base.resize(at);
    }
    options.name = fmt::format("{}@{}", base, info_->epoch + 1);
  }
  if (options.description.empty()) options.description = description();
  if (mode == ShrinkMode::kDefault) {
    // Every rank is alive: a split, collective over all of them, with the excluded left out.
    return split_into(left_out ? kNoColor : 0, rank(), std::move(options), info_->epoch + 1);
  }
  if (left_out) {
    throw Error(ErrorCode::kInvalidArgument, where,
                fmt::format("rank {} is among the excluded ranks [{}]: under ShrinkMode::kAbort "
                            "only the survivors call shrink()",
                            rank(), fmt::join(out, ", ")));
  }
  try {
    backend_->check_can_shrink();
  } catch (const Error& e) {
    throw Error(e.code(), where, e.detail());
  }
  // Every op queued or issued from now on fails; the backend fails the one in flight.
  if (!aborted_.exchange(true)) hooks_->run_abort();
  SplitSpec spec;
  for (int r = 0; r < size(); ++r) {
    if (!std::binary_search(out.begin(), out.end(), r)) spec.parent_ranks.push_back(r);
  }
  spec.excluded = out;
  spec.rank =
      static_cast<int>(std::find(spec.parent_ranks.begin(), spec.parent_ranks.end(), rank()) -
                       spec.parent_ranks.begin());
  // Survivors that disagree on the excluded ranks wait under different keys and time out, rather
  // than connect a group of the wrong size.
  spec.store_key = fmt::format("{}/shrink-{}", info_->store_key, fmt::join(out, "."));
  spec.name = options.name;
  spec.timeout = capped_timeout(options.timeout.count() > 0 ? options.timeout : timeout());
  trace::CommInfo child;
  child.store_key = spec.store_key;
  child.name = spec.name;
  child.description = options.description;
  child.mesh_dim = options.mesh_dim.empty() ? info_->mesh_dim : options.mesh_dim;
  for (int r : spec.parent_ranks) child.global_ranks.push_back(info_->global_ranks[r]);
  child.rank = spec.rank;
  child.global_rank = global_rank();
  child.timeout_ms = spec.timeout.count();
  child.epoch = info_->epoch + 1;
  std::vector<int> out_global;
  for (int r : out) out_global.push_back(info_->global_ranks[r]);
  log().warn("'{}': shrinking around ranks [{}] (global [{}]) into '{}' of {} ranks", name(),
             fmt::join(out, ", "), fmt::join(out_global, ", "), spec.name,
             spec.parent_ranks.size());
  try {
    start_queued_elsewhere();
    auto backend = backend_->shrink(spec);
    return std::make_shared<Communicator>(std::move(child), std::move(backend), resources_, job_);
  } catch (const Error& e) {
    throw Error(e.code(), where, e.detail());
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kBackend, where, e.what());
  }
}

std::vector<int> Communicator::failed_ranks() const {
  std::vector<int> failed = backend_->failed_peers();
  if (job_ && job_->store) {
    try {
      for (int g : DeadRanks::instance().among(*job_->store, info_->global_ranks)) {
        const auto it = std::find(info_->global_ranks.begin(), info_->global_ranks.end(), g);
        failed.push_back(static_cast<int>(it - info_->global_ranks.begin()));
      }
    } catch (const std::exception& e) {
      log().debug("'{}': reading the job's dead ranks failed: {}", name(), e.what());
    }
  }
  std::sort(failed.begin(), failed.end());
  failed.erase(std::unique(failed.begin(), failed.end()), failed.end());
  return failed;
}

std::unique_ptr<Backend> Communicator::make_child_backend(const SplitSpec& spec,
                                                          const CommOptions& options,
                                                          const trace::CommInfo& child) const {
  if (options.backend.empty() || options.backend == backend_->name()) return backend_->split(spec);
  if (!job_) {
    throw Error(ErrorCode::kInvalidArgument, {global_rank(), name(), "split", -1},
                fmt::format("a '{}' group split from this '{}' communicator needs a job store: "
                            "only communicators of an init() world can change backend",
                            options.backend, backend_->name()));
  }
  GroupSpec g;
  g.name = child.name;
  g.store_key = spec.store_key + "/" + options.backend;
  g.global_ranks = child.global_ranks;
  g.rank = spec.rank;
  g.timeout = spec.timeout;
  g.store = job_->store;
  g.hostname = job_->hostname;
  g.iface = job_->iface;
  g.local_rank = job_->local_rank;
  return make_backend(options.backend, g);
}

// The closing op of a coalesced group on a launching backend without groups of its own: done once
// every member is, failed if one failed. Members sit before it in inflight_, so they are polled
// first.
class Communicator::CoalescedPending final : public PendingOp {
 public:
  explicit CoalescedPending(std::vector<WorkHandle> members) : members_(std::move(members)) {}
  PollResult poll() override {
    for (const WorkHandle& m : members_) {
      if (!work_done(*m)) return {PollResult::State::kStarted};
    }
    for (const WorkHandle& m : members_) {
      if (auto e = m->error()) throw member_failed(*m, *e);
    }
    return {PollResult::State::kDone};
  }

  // The closing entry's failure: the first failed member's code, naming it.
  static Error member_failed(const Work& member, const Error& e) {
    const trace::OpRecord r = member.record();
    return Error(e.code(), {},
                 fmt::format("member {} #{} failed: {}", r.op, trace::trace_seq(r), e.detail()));
  }

 private:
  std::vector<WorkHandle> members_;
};

void Communicator::start_coalescing() {
  std::unique_lock launch_lock(launch_mu_, std::defer_lock);
  if (model_ != ExecutionModel::kRunToCompletion) launch_lock.lock();
  {
    std::lock_guard lock(mu_);
    if (coalescing_) {
      throw Error(ErrorCode::kInvalidArgument, {global_rank(), name(), "start_coalescing", -1},
                  "a coalescing block is already open: call end_coalescing() first");
    }
    coalescing_ = true;
    coalesced_collective_ = false;
    coalesced_p2p_ = false;
    coalesced_.clear();
  }
  if (model_ == ExecutionModel::kRunToCompletion) return;
  try {
    backend_->start_coalescing();
  } catch (const Error& e) {
    std::lock_guard lock(mu_);
    coalescing_ = false;
    throw Error(e.code(), {global_rank(), name(), "start_coalescing", -1}, e.detail());
  }
}

WorkHandle Communicator::end_coalescing(CallSite caller) {
  std::unique_lock launch_lock(launch_mu_, std::defer_lock);
  if (model_ != ExecutionModel::kRunToCompletion) launch_lock.lock();
  Op op;
  op.kind = OpKind::kCoalesced;
  op.algorithm = Algorithm::kNone;
  op.timeout = timeout();
  WorkHandle work = make_work();
  trace::OpRecord& rec = work->record_;
  fill_record(op, info_, caller, rec);
  std::vector<WorkHandle> members;
  int64_t enqueue_ns = 0;
  {
    std::lock_guard lock(mu_);
    if (!coalescing_) {
      throw Error(ErrorCode::kInvalidArgument, {global_rank(), name(), "end_coalescing", -1},
                  "no coalescing block is open: call start_coalescing() first");
    }
    coalescing_ = false;
    members = std::move(coalesced_);
    coalesced_.clear();
    // PyTorch's closing entry: p2p when every member is, numbered with the members' shared
    // sequence numbers (no op_id of its own), bounded by the longest member timeout.
    rec.is_p2p = !members.empty();
    for (const WorkHandle& m : members) {
      const trace::OpRecord& r = m->record_;  // Immutable fields: read without its lock.
      rec.is_p2p = rec.is_p2p && r.is_p2p;
      op.timeout = std::max(op.timeout, std::chrono::milliseconds(r.timeout_ms));
    }
    rec.timeout_ms = op.timeout.count();
    publish_locked(*work, op, op_seq_.load(std::memory_order_relaxed), enqueue_ns);
    if (model_ == ExecutionModel::kRunToCompletion) {
      // Behind every member on the one queue: they are done when it runs, which happens like a
      // member's (on the first waiter, or the worker).
      work->op_.emplace(std::move(op));
      work->members_ = std::move(members);
      push_locked(Task{work, nullptr});
      return work;
    }
  }
  // The backend's group ends even on an aborted communicator: its members were launched into it.
  launch_pending(op, work, nullptr, enqueue_ns, [&]() -> std::unique_ptr<PendingOp> {
    if (auto group = backend_->end_coalescing()) return group;
    return std::make_unique<CoalescedPending>(members);
  });
  return work;
}

void Communicator::finish_coalesced(Task& task) {
  Work& work = *task.work;
  work.mark_started();
  for (const WorkHandle& m : work.members_) {
    if (auto e = m->error()) {
      // The member has reported its own failure to the watchdog already.
      const Error failed = CoalescedPending::member_failed(*m, *e);
      work.mark_failed(Error(failed.code(), context(work), failed.detail()));
      return;
    }
  }
  work.mark_completed();
}

void Communicator::abort() noexcept {
  // Once is enough: a timed-out launch and the watchdog may both get here.
  if (aborted_.exchange(true)) return;
  backend_->abort();
  hooks_->run_abort();
}

}  // namespace meshrt
