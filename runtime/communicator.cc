#include "runtime/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <future>

#include "runtime/debug_stats.h"
#include "runtime/error.h"
#include "runtime/validation.h"
#include "runtime/watchdog.h"
#include "trace/comm_logger.h"
#include "trace/exports.h"
#include "trace/flight_recorder.h"
#include "trace/logging.h"
#include "trace/scope_tree.h"
#include "trace/straggler.h"
#include "trace/tracer.h"

namespace meshrt {
namespace {

std::atomic<uint64_t> next_comm_uid{0};

}  // namespace

// The works' handle on their communicator: it may be gone by the time a work waits, so the
// communicator closes it on destruction, after any inline run in progress has finished.
class Communicator::Runner : public InlineRunner {
 public:
  explicit Runner(Communicator* owner) : owner_(owner) {}
  bool run_inline(const Work& work) override {
    std::lock_guard lock(mu_);
    return owner_ != nullptr && owner_->try_run_inline(work);
  }
  void close() {
    std::lock_guard lock(mu_);
    owner_ = nullptr;
  }

 private:
  std::mutex mu_;
  Communicator* owner_;
};

Communicator::Communicator(trace::CommInfo info, std::unique_ptr<Backend> backend,
                           std::shared_ptr<void> resources)
    : backend_(std::move(backend)),
      resources_(std::move(resources)),
      runner_(std::make_shared<Runner>(this)) {
  trace::CommLogger::install_from_env();
  trace::Exports::install_from_env();
  trace::StragglerSink::install_from_env();
  trace::ScopeTree::install_from_env();
  info.uid = next_comm_uid.fetch_add(1);
  info.backend = std::string(backend_->name());
  if (info.description.empty()) info.description = info.name;
  if (info.timeout_ms <= 0) info.timeout_ms = kDefaultOpTimeout.count();
  info.backend_version = backend_->version();
  info_ = std::make_shared<const trace::CommInfo>(std::move(info));
  sent_.assign(info_->global_ranks.size(), 0);
  received_.assign(info_->global_ranks.size(), 0);
  trace::FlightRecorder::instance().register_comm(info_);
  Watchdog::instance().add(this);
  log().debug("communicator '{}' ({}): rank {} of {}, global ranks [{}]", info_->name,
              info_->backend, info_->rank, info_->global_ranks.size(),
              fmt::join(info_->global_ranks, ","));
}

Communicator::~Communicator() {
  Watchdog::instance().remove(this);
  trace::FlightRecorder::instance().unregister_comm(info_.get());
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  runner_->close();
}

uint64_t Communicator::collective_seq() const {
  std::lock_guard lock(mu_);
  return collective_seq_;
}
uint64_t Communicator::p2p_seq() const {
  std::lock_guard lock(mu_);
  return p2p_seq_;
}
uint64_t Communicator::op_seq() const {
  std::lock_guard lock(mu_);
  return op_seq_;
}

WorkHandle Communicator::enqueue(Op op, OpOptions options, const std::source_location& caller) {
  op.timeout = options.timeout.count() != 0 ? options.timeout : timeout();
  // "Forever" (milliseconds::max()) would overflow every deadline computed from it.
  op.timeout = std::min(op.timeout, kMaxTimeout);
  validate_op(op, *info_, /*accepts_cuda=*/false);

  trace::OpRecord rec;
  rec.comm = info_;
  rec.kind = op.kind;
  rec.op = op_kind_name(op.kind);
  rec.is_p2p = is_p2p(op.kind);
  if (op.kind != OpKind::kBarrier) {
    const BufferView& b = op.kind == OpKind::kBatchP2P ? op.p2p.front().buffer : op.input;
    rec.dtype =
        dtype_name(op.kind == OpKind::kScatter && op.root != rank() ? op.output.dtype : b.dtype);
  }
  if (op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce ||
      op.kind == OpKind::kReduceScatter) {
    rec.reduce_op = reduce_op_name(op.reduce_op);
  }
  rec.input_count = op.input.count;
  rec.output_count = op.output.count;
  rec.input_shape = dims_of(op.input);
  rec.output_shape = dims_of(op.output);
  rec.bytes = message_bytes(op, size(), rank());
  rec.root_or_peer = op.root;
  rec.timeout_ms = op.timeout.count();
  rec.scope = trace::current_scope();
  rec.thread_id = std::hash<std::thread::id>{}(std::this_thread::get_id());
  rec.caller_file = caller.file_name();
  rec.caller_line = caller.line();
  if (debug_tensor_stats_enabled()) {
    rec.debug = std::make_shared<trace::DebugStats>();
    rec.debug->input = tensor_stats(op.input);
  }
  std::shared_ptr<trace::DebugStats> debug = rec.debug;

  WorkHandle work;
  {
    std::lock_guard lock(mu_);
    // Numbered like PyTorch's Flight Recorder: collectives and p2p ops count separately, each
    // record carries the current value of the other counter.
    if (rec.is_p2p) {
      ++p2p_seq_;
    } else {
      ++collective_seq_;
    }
    rec.collective_seq = collective_seq_;
    rec.p2p_seq = p2p_seq_;
    number_channels(op, rec);
    rec.record_id = trace::next_record_id();
    rec.op_seq = ++op_seq_;
    op.op_seq = rec.op_seq;
    op.collective_seq = rec.collective_seq;
    rec.enqueue_ns = trace::steady_now_ns();
    rec.created_wall_ns = trace::wall_from_steady_ns(rec.enqueue_ns);
    // Sinks hear of the op before the worker can start it, and in sequence order.
    trace::emit_enqueue(rec);
    work = std::make_shared<Work>(std::move(rec));
    work->set_runner(runner_);
    if (aborted_) {
      work->mark_failed(Error(ErrorCode::kAborted,
                              {global_rank(), name(), std::string(op_kind_name(op.kind)),
                               static_cast<int64_t>(op.op_seq)},
                              "the communicator was aborted"));
      return work;
    }
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    queue_.push_back(Task{std::move(op), work, nullptr, std::move(debug)});
  }
  cv_.notify_one();
  return work;
}

trace::Dims Communicator::dims_of(const BufferView& b) {
  trace::Dims d;
  if (b.shape.ndim() == 0) {
    d.ndim = b.count > 0 ? 1 : 0;
    d.size[0] = static_cast<int64_t>(b.count);
    return d;
  }
  d.ndim = static_cast<uint8_t>(std::min(b.shape.ndim(), trace::Dims::kMax));
  for (size_t i = 0; i < d.ndim; ++i) d.size[i] = b.shape[i];
  return d;
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
  WorkHandle running;
  {
    std::lock_guard lock(mu_);
    running = running_;
  }
  if (!running) return std::nullopt;
  return running->record();
}

void Communicator::post_job(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    queue_.push_back(Task{Op{}, nullptr, std::move(job), nullptr});
  }
  cv_.notify_one();
}

void Communicator::worker_loop() {
  set_log_thread_rank(global_rank());
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !busy_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      running_ = task.work;
    }
    run_claimed(task);
  }
}

bool Communicator::try_run_inline(const Work& work) {
  Task task;
  {
    std::lock_guard lock(mu_);
    if (busy_ || queue_.empty() || queue_.front().work.get() != &work) return false;
    task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    running_ = task.work;
  }
  run_claimed(task);
  return true;
}

void Communicator::run_claimed(Task& task) {
  run_task(task);
  {
    std::lock_guard lock(mu_);
    busy_ = false;
    running_ = nullptr;
  }
  cv_.notify_all();
}

void Communicator::run_task(Task& task) {
  if (task.job) {
    task.job();
    return;
  }
  Work& work = *task.work;
  const Op& op = task.op;
  auto context = [&] {
    return ErrorContext{global_rank(), name(), std::string(op_kind_name(op.kind)),
                        static_cast<int64_t>(op.op_seq)};
  };
  {
    std::lock_guard lock(mu_);
    if (aborted_) {
      work.mark_failed(Error(ErrorCode::kAborted, context(), "the communicator was aborted"));
      return;
    }
  }
  work.mark_started();
  try {
    backend_->run(op);
    if (task.debug) task.debug->output = tensor_stats(op.output);
    work.mark_completed();
  } catch (const Error& e) {
    // Backends know the failure but not the op's identity: add it.
    fail(work, Error(e.code(), context(), e.detail()));
  } catch (const std::exception& e) {
    fail(work, Error(ErrorCode::kBackend, context(), e.what()));
  }
}

void Communicator::fail(Work& work, Error error) {
  log().error("{}", error.what());
  // The watchdog dumps (and under its abort policy exits) before anyone can see the error, so
  // a program that ends on it still leaves its flight recorder behind. An abort is no failure
  // of the job's own: whoever aborted has already reported why.
  const bool report = error.code() != ErrorCode::kAborted;
  const bool timed_out = error.code() == ErrorCode::kTimeout;
  const std::string message = error.what();
  work.record_failure(std::move(error));
  if (report) Watchdog::instance().on_op_failed(*this, work, message, timed_out);
  work.release();
}

WorkHandle Communicator::all_reduce(BufferView data, ReduceOp op, OpOptions options,
                                    std::source_location caller) {
  Op o;
  o.kind = OpKind::kAllReduce;
  o.input = o.output = data;
  o.reduce_op = op;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::broadcast(BufferView data, int root, OpOptions options,
                                   std::source_location caller) {
  Op o;
  o.kind = OpKind::kBroadcast;
  o.input = o.output = data;
  o.root = root;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::reduce(BufferView data, int root, ReduceOp op, OpOptions options,
                                std::source_location caller) {
  Op o;
  o.kind = OpKind::kReduce;
  o.input = o.output = data;
  o.root = root;
  o.reduce_op = op;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::all_gather(BufferView input, BufferView output, OpOptions options,
                                    std::source_location caller) {
  Op o;
  o.kind = OpKind::kAllGather;
  o.input = input;
  o.output = output;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::reduce_scatter(BufferView input, BufferView output, ReduceOp op,
                                        OpOptions options, std::source_location caller) {
  Op o;
  o.kind = OpKind::kReduceScatter;
  o.input = input;
  o.output = output;
  o.reduce_op = op;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::all_to_all(BufferView input, BufferView output, OpOptions options,
                                    std::source_location caller) {
  Op o;
  o.kind = OpKind::kAllToAll;
  o.input = input;
  o.output = output;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::all_to_all(BufferView input, std::span<const size_t> input_splits,
                                    BufferView output, std::span<const size_t> output_splits,
                                    OpOptions options, std::source_location caller) {
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
                                std::source_location caller) {
  Op o;
  o.kind = OpKind::kGather;
  o.input = input;
  o.output = output;
  o.root = root;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::scatter(BufferView input, BufferView output, int root, OpOptions options,
                                 std::source_location caller) {
  Op o;
  o.kind = OpKind::kScatter;
  o.input = input;
  o.output = output;
  o.root = root;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::barrier(OpOptions options, std::source_location caller) {
  Op o;
  o.kind = OpKind::kBarrier;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::send(BufferView data, int peer, int tag, OpOptions options,
                              std::source_location caller) {
  Op o;
  o.kind = OpKind::kSend;
  o.input = o.output = data;
  o.root = peer;
  o.tag = tag;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::recv(BufferView data, int peer, int tag, OpOptions options,
                              std::source_location caller) {
  Op o;
  o.kind = OpKind::kRecv;
  o.input = o.output = data;
  o.root = peer;
  o.tag = tag;
  return enqueue(std::move(o), options, caller);
}

WorkHandle Communicator::batch_isend_irecv(std::span<const P2POp> ops, OpOptions options,
                                           std::source_location caller) {
  Op o;
  o.kind = OpKind::kBatchP2P;
  o.p2p.assign(ops.begin(), ops.end());
  return enqueue(std::move(o), options, caller);
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, CommOptions options) {
  if (color < kNoColor) {
    throw Error(ErrorCode::kInvalidArgument, {global_rank(), name(), "split", -1},
                fmt::format("color {} is negative (use kNoColor to join no group)", color));
  }
  uint64_t index;
  {
    std::lock_guard lock(mu_);
    index = ++splits_;
  }
  const auto timeout_ms =
      std::min(options.timeout.count() > 0 ? options.timeout : timeout(), kMaxTimeout);
  // The (color, key) exchange is an ordinary all_gather: numbered, traced, failed by abort. The
  // child's creation then runs on the worker right behind it, so split is ordered like any
  // collective on this communicator.
  auto mine = std::make_shared<std::array<int64_t, 2>>(std::array<int64_t, 2>{color, key});
  auto all = std::make_shared<std::vector<int64_t>>(2 * static_cast<size_t>(size()));
  WorkHandle exchange = all_gather(view(std::span<int64_t>(*mine)), view(*all), {timeout_ms});
  auto result = std::make_shared<std::promise<std::shared_ptr<Communicator>>>();
  auto future = result->get_future();
  post_job([this, result, exchange, mine, all, index, timeout_ms, color, options] {
    try {
      exchange->wait();
      if (color == kNoColor) {
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
      spec.parent_ranks = members;
      spec.rank =
          static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
      spec.timeout = timeout_ms;
      trace::CommInfo child;
      child.store_key = spec.store_key;
      child.name =
          options.name.empty() ? fmt::format("{}/split{}.{}", name(), index, color) : options.name;
      child.description = options.description;
      child.mesh_dim = options.mesh_dim;
      for (int r : members) child.global_ranks.push_back(info_->global_ranks[r]);
      child.rank = spec.rank;
      child.global_rank = global_rank();
      child.timeout_ms = timeout_ms.count();
      result->set_value(
          std::make_shared<Communicator>(std::move(child), backend_->split(spec), resources_));
    } catch (const Error& e) {
      result->set_exception(std::make_exception_ptr(
          Error(e.code(), {global_rank(), name(), "split", -1}, e.detail())));
    } catch (const std::exception& e) {
      result->set_exception(std::make_exception_ptr(
          Error(ErrorCode::kBackend, {global_rank(), name(), "split", -1}, e.what())));
    }
  });
  return future.get();
}

void Communicator::abort() noexcept {
  {
    std::lock_guard lock(mu_);
    aborted_ = true;
  }
  backend_->abort();
}

}  // namespace meshrt
