#include "runtime/backends/nccl/nccl_backend.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/backends/nccl/cuda_check.h"
#include "runtime/backends/nccl/cuda_graph_watch.h"
#include "runtime/backends/nccl/cuda_resources.h"
#include "runtime/backends/nccl/cuda_stream.h"
#include "runtime/backends/nccl/nccl_config.h"
#include "runtime/backends/nccl/nccl_pending_op.h"
#include "runtime/backends/nccl/nccl_types.h"
#include "runtime/error.h"
#include "trace/flight_recorder.h"
#include "trace/logging.h"
#include "trace/scope.h"
#include "trace/tracer.h"

namespace meshrt {
namespace {

using cuda::check_cuda;
using cuda::check_nccl;

// Polls a non-blocking communicator until its last call has completed (no longer
// ncclInProgress), up to `timeout`; throws its asynchronous error, or kTimeout.
void wait_nccl_ready(ncclComm_t comm, std::chrono::milliseconds timeout, std::string_view what) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) throw cuda::nccl_error(state, what, comm);
    if (std::chrono::steady_clock::now() >= until) {
      throw Error(ErrorCode::kTimeout, {},
                  fmt::format("{} still in progress after {} ms", what, timeout.count()));
    }
    std::this_thread::yield();
  }
}

// The PCI bus id of `device` ("0000:17:00.0"), or "cuda:<n>" when CUDA cannot tell.
std::string pci_bus_id(int device) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), device) != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("cuda:{}", device);
  }
  return id;
}

// Device pointers that passed cudaPointerGetAttributes on one communicator's device: trainers
// pass the same buffers every step, and the query costs more than the rest of validation.
// Direct-mapped, lock-free (ops may be called from several threads). An entry outliving its
// allocation is harmless for what the check is for: CUDA keeps device allocations in a virtual
// range that host allocations never get, so the address cannot become host memory.
class PointerCache {
 public:
  // Whether `p` passed the check before.
  bool contains(const void* p) const { return slot(p).load(std::memory_order_relaxed) == p; }
  // Remembers that `p` passed.
  void add(const void* p) { slot(p).store(p, std::memory_order_relaxed); }

 private:
  static constexpr size_t kSlots = 256;
  std::atomic<const void*>& slot(const void* p) const {
    // cudaMalloc aligns to 256 bytes: the low bits carry no information.
    return slots_[(reinterpret_cast<uintptr_t>(p) >> 8) % kSlots];
  }
  mutable std::array<std::atomic<const void*>, kSlots> slots_{};
};

// The coalescing block open on this thread, if any: NCCL's groups are per thread, so an op of
// another communicator launched inside it would join its group.
thread_local const void* open_coalescing_block = nullptr;

// Events of each kind made with a communicator: launches retire finished ops once 16 are in
// flight (Communicator::retire_launched_locked), so a loop that never waits needs no more.
constexpr size_t kPrefilledEvents = 32;

class NcclBackend final : public Backend {
 public:
  NcclBackend(ncclComm_t comm, int device, std::string name, std::chrono::milliseconds timeout,
              cuda::NcclSettings settings)
      : comm_(std::make_shared<cuda::CommHandle>()),
        device_(device),
        name_(std::move(name)),
        timeout_(timeout),
        settings_(settings) {
    comm_->comm = comm;
    comm_->device = device;
    comm_->name = name_;
    // From here on the communicator is ours: a failure below must not leak it.
    try {
      cuda::DeviceGuard guard(device_);
      pool_ = std::make_shared<cuda::EventPool>(kPrefilledEvents);
      if (!settings_.use_caller_stream) stream_ = cuda::Stream::create();
      order_ = cuda::Event::create(false);
      scratch_ = cuda::DeviceMemory::allocate(sizeof(float));
      check_cuda(cudaMemsetAsync(scratch_.get(), 0, sizeof(float), stream()), "cudaMemsetAsync");
      check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
      check_cuda(
          cudaDeviceGetAttribute(&compute_major_, cudaDevAttrComputeCapabilityMajor, device_),
          "cudaDeviceGetAttribute");
    } catch (...) {
      (void)ncclCommAbort(comm);
      comm_->comm = nullptr;
      throw;
    }
    trace::FlightRecorder::instance().set_device(pci_bus_id(device_));
  }

  ~NcclBackend() override {
    // Watches stay with the process's graph registry while their graphs live.
    graphs_.reset();
    std::lock_guard lock(comm_->mu);
    // Never destroy after an abort: ncclCommAbort freed it.
    if (comm_->aborted.load() || comm_->comm == nullptr) return;
    ncclComm_t comm = std::exchange(comm_->comm, nullptr);
    // Finalize flushes outstanding work; a communicator that cannot finish is aborted instead.
    try {
      cuda::DeviceGuard guard(device_);
      check_nccl(ncclCommFinalize(comm), "ncclCommFinalize", comm);
      wait_nccl_ready(comm, std::min(timeout_, std::chrono::milliseconds(60000)),
                      "ncclCommFinalize");
      (void)ncclCommDestroy(comm);
    } catch (const Error& e) {
      log().warn("NCCL communicator '{}' did not finalize ({}); aborting it", name_, e.what());
      (void)ncclCommAbort(comm);
    }
  }

  std::string_view name() const override { return "nccl"; }
  std::string version() const override { return cuda::nccl_version(); }
  ExecutionModel execution_model() const override { return ExecutionModel::kLaunchOnStream; }
  bool accepts_cuda() const override { return true; }

  void set_comm_info(std::shared_ptr<const trace::CommInfo> info) override {
    info_ = std::move(info);
  }

  void validate(const Op& op) const override {
    if (op.kind == OpKind::kAllGatherV || op.kind == OpKind::kReduceScatterV) {
      throw Error(ErrorCode::kNotSupported, {},
                  fmt::format("{} is not on the NCCL backend yet: group send/recv, or pad the "
                              "blocks to even all_gather/reduce_scatter",
                              op_kind_name(op.kind)));
    }
    if (open_coalescing_block != nullptr && open_coalescing_block != this) {
      throw Error(ErrorCode::kInvalidArgument, {},
                  "called inside another communicator's coalescing block on this thread: NCCL "
                  "would merge it into that group; call it after end_coalescing()");
    }
    validate_nccl_args(op);
    auto check = [&](const BufferView& b, std::string_view what) {
      if (b.count == 0) return;
      // meshrt's own setup traffic (split's and DeviceMesh's host all_gathers) is staged.
      if (b.device.kind != Device::Kind::kCuda && trace::in_setup_ops()) return;
      if (b.device.kind != Device::Kind::kCuda) {
        throw Error(ErrorCode::kInvalidArgument, {},
                    fmt::format("{} is a CPU buffer (Device::cpu()); the nccl backend takes "
                                "device memory of cuda:{} only",
                                what, device_));
      }
      if (b.device.index != device_) {
        throw Error(ErrorCode::kInvalidArgument, {},
                    fmt::format("{} is on cuda:{} but this communicator's device is cuda:{}", what,
                                b.device.index, device_));
      }
      if (!settings_.check_pointers || checked_.contains(b.data)) return;
      cudaPointerAttributes attr{};
      const cudaError_t e = cudaPointerGetAttributes(&attr, b.data);
      if (e != cudaSuccess) {
        const Error err = cuda::cuda_error(e, "cudaPointerGetAttributes");
        throw Error(
            ErrorCode::kInvalidArgument, {},
            fmt::format("{} at {} is not usable device memory: {}", what, b.data, err.detail()));
      }
      if (attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeUnregistered) {
        throw Error(ErrorCode::kInvalidArgument, {},
                    fmt::format("{} at {} is host memory ({}) though its view says cuda:{}: NCCL "
                                "needs device memory",
                                what, b.data,
                                attr.type == cudaMemoryTypeHost ? "pinned" : "pageable", device_));
      }
      if (attr.device != device_) {
        throw Error(ErrorCode::kInvalidArgument, {},
                    fmt::format("{} at {} is memory of cuda:{}, not of this communicator's "
                                "cuda:{}",
                                what, b.data, attr.device, device_));
      }
      checked_.add(b.data);
    };
    switch (op.kind) {
      case OpKind::kBatchP2P:
        for (const P2POp& p : op.p2p) {
          check(p.buffer, p.dir == P2POp::Dir::kSend ? "send buffer" : "recv buffer");
        }
        return;
      case OpKind::kGather:
        check(op.input, "input");
        if (info_ && op.root == info_->rank) check(op.output, "output");
        return;
      case OpKind::kScatter:
        check(op.output, "output");
        if (info_ && op.root == info_->rank) check(op.input, "input");
        return;
      default:
        check(op.input, op.input.data == op.output.data ? "buffer" : "input");
        if (op.output.data != op.input.data) check(op.output, "output");
    }
  }

  std::unique_ptr<PendingOp> launch(const Op& op) override {
    // Checked again under the lock; here so that nothing is recorded or captured in vain.
    if (comm_->aborted.load(std::memory_order_relaxed)) {
      throw Error(ErrorCode::kAborted, {}, "the NCCL communicator was aborted");
    }
    cuda::DeviceGuard device(device_);
    const cudaStream_t caller = cuda::current_stream();
    const cudaStream_t s = stream();
    if (group_) {
      // Inside a coalescing block: only the NCCL calls; the group's end event covers them. Each
      // member is ordered after the caller's work at its own call, not only at the block's start.
      order_after_caller(caller, s);
      std::unique_lock lock = lock_comm();
      fatal_on_error(lock, [&] { enqueue_nccl(op, s); });
      return std::make_unique<cuda::NcclPendingOp>(comm_, group_);
    }
    if (op.input.device.kind == Device::Kind::kCpu && op.output.device.kind == Device::Kind::kCpu &&
        op.kind != OpKind::kBatchP2P && op.kind != OpKind::kBarrier) {
      return run_staged(op);
    }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    unsigned long long capture_id = 0;
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamGetCaptureInfo(caller, &capture, &capture_id, &graph),
               "cudaStreamGetCaptureInfo");
    if (capture == cudaStreamCaptureStatusInvalidated) {
      throw Error(ErrorCode::kInvalidArgument, {},
                  "the caller's stream is in an invalidated CUDA graph capture");
    }
    const bool captured = capture == cudaStreamCaptureStatusActive;
    order_after_caller(caller, s);
    // Start events cost a record per op: only when someone reads start times.
    const bool timing = !captured && trace::timing_enabled();
    cuda::Event start;
    if (timing) {
      start = pool_->take(true);
      check_cuda(cudaEventRecord(start.get(), s), "cudaEventRecord(start)");
    }
    cuda::CapturedOp* watch = nullptr;
    if (captured && settings_.watch_graphs) {
      watch = graphs()->watch(s, graph, capture_id, capture_record(op, capture_id));
    }
    {
      std::unique_lock lock = lock_comm();
      fatal_on_error(lock, [&] { enqueue_op(op, s); });
    }
    // In a capture the end node comes before the end event, and the caller's stream joins ours
    // last: a node captured on our stream after the join would leave the capture unjoined.
    if (watch != nullptr) cuda::GraphWatcher::add_end_node(s, watch);
    cuda::Event end = pool_->take(timing);
    check_cuda(cudaEventRecord(end.get(), s), "cudaEventRecord(end)");
    if (captured && s != caller) {
      // Joined at once: a capture must end with every stream it forked joined, and the op
      // reports done (captured, not run) before anyone calls wait().
      check_cuda(cudaStreamWaitEvent(caller, end.get(), 0), "cudaStreamWaitEvent");
    }
    return std::make_unique<cuda::NcclPendingOp>(comm_, pool_, std::move(start), std::move(end),
                                                 timing, captured ? capture_id : 0, s);
  }

  void start_coalescing() override {
    if (open_coalescing_block != nullptr) {
      throw Error(ErrorCode::kInvalidArgument, {},
                  "a coalescing block is already open on this thread (NCCL groups are per "
                  "thread): end it first");
    }
    if (comm_->aborted.load()) {
      throw Error(ErrorCode::kAborted, {}, "the NCCL communicator was aborted");
    }
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    group_ = std::make_shared<cuda::GroupEnd>();
    group_->pool = pool_;
    open_coalescing_block = this;
  }

  std::unique_ptr<PendingOp> end_coalescing() override {
    std::shared_ptr<cuda::GroupEnd> group = std::move(group_);
    group_.reset();
    open_coalescing_block = nullptr;
    try {
      cuda::DeviceGuard device(device_);
      {
        std::unique_lock lock = lock_comm(/*end_group_on_abort=*/true);
        fatal_on_error(lock, [&] {
          check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm_->comm);
          wait_nccl_ready(comm_->comm, timeout_, "coalesced group");
        });
      }
      cuda::Event end = pool_->take(false);
      check_cuda(cudaEventRecord(end.get(), stream()), "cudaEventRecord(end)");
      std::lock_guard lock(group->mu);
      group->end = std::move(end);
    } catch (...) {
      std::lock_guard lock(group->mu);
      group->failed = true;
      throw;
    }
    return std::make_unique<cuda::NcclPendingOp>(comm_, group);
  }

  std::unique_ptr<Backend> split(const SplitSpec& spec) override {
    cuda::DeviceGuard device(device_);
    // One split per mesh dim from the parent, as NCCL wants (no world-wide init per group). The
    // color is the group's lowest parent rank: equal on its members, distinct across groups.
    const int color = *std::min_element(spec.parent_ranks.begin(), spec.parent_ranks.end());
    std::string child_name = spec.name;
    ncclComm_t child = split_nccl(color, spec.rank, child_name, spec.timeout);
    return std::make_unique<NcclBackend>(child, device_, std::move(child_name), spec.timeout,
                                         settings_);
  }

  // ncclCommShrink with NCCL_SHRINK_ABORT: NCCL ends the parent's ops in flight itself, so the
  // parent is not aborted before, only after (destroying it instead hangs since NCCL 2.31.2).
  // Resolved at run time: the NCCL a job loads (PyTorch's) may predate it (NCCL 2.27).
  void check_can_shrink() const override {
    if (nccl_shrink() == nullptr) {
      throw Error(ErrorCode::kNotSupported, {},
                  fmt::format("this NCCL ({}) has no ncclCommShrink, which NCCL 2.27 added; "
                              "load a newer libnccl.so.2, or shrink in default mode (a split)",
                              version()));
    }
  }
  std::unique_ptr<Backend> shrink(const SplitSpec& spec) override {
    check_can_shrink();
    if (spec.excluded.empty()) {
      // ncclCommShrink refuses to exclude nobody (NCCL 2.28.3: invalid argument, for a null list
      // and for an empty one alike): the same ranks then meet in a split, and the parent goes.
      auto child = split(spec);
      comm_->abort_async("shrunk excluding nobody (a split)");
      return child;
    }
    cuda::DeviceGuard device(device_);
    std::vector<int> excluded = spec.excluded;
    ncclComm_t child = nullptr;
    ncclConfig_t config = cuda::nccl_config(spec.name);
    {
      std::unique_lock lock = lock_comm();
      fatal_on_error(lock, [&] {
        check_nccl(nccl_shrink()(comm_->comm, excluded.data(), static_cast<int>(excluded.size()),
                                 &child, &config, NCCL_SHRINK_ABORT),
                   "ncclCommShrink", comm_->comm);
        // A non-blocking parent finishes the call asynchronously, as ncclCommSplit (split_nccl).
        wait_nccl_ready(comm_->comm, spec.timeout, "ncclCommShrink");
      });
    }
    if (child == nullptr) {
      throw Error(ErrorCode::kBackend, {}, "ncclCommShrink completed without a communicator");
    }
    wait_nccl_ready(child, spec.timeout, "ncclCommShrink (child)");
    comm_->abort_async("shrunk with NCCL_SHRINK_ABORT");
    return std::make_unique<NcclBackend>(child, device_, spec.name, spec.timeout, settings_);
  }

  void split_excluded() override {
    // NCCL's split is collective over the whole parent: a rank joining no group takes part too.
    cuda::DeviceGuard device(device_);
    (void)split_nccl(NCCL_SPLIT_NOCOLOR, 0, name_, timeout_);
  }

  void abort() noexcept override { comm_->abort_async("aborted by meshrt"); }

 private:
  using ShrinkFn = ncclResult_t (*)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int);
  // ncclCommShrink, or null where the loaded NCCL predates it.
  static ShrinkFn nccl_shrink() {
    static const auto fn = reinterpret_cast<ShrinkFn>(dlsym(RTLD_DEFAULT, "ncclCommShrink"));
    return fn;
  }

  // Where the ops run, and setup work (zeroing, staging) with them.
  cudaStream_t stream() const {
    return settings_.use_caller_stream ? cuda::current_stream() : stream_.get();
  }

  // The communicator's lock, for a call that uses it; throws kAborted once it was aborted. With
  // `end_group_on_abort`, closes this thread's open NCCL group first (end_coalescing).
  std::unique_lock<std::mutex> lock_comm(bool end_group_on_abort = false) const {
    std::unique_lock lock(comm_->mu);
    if (comm_->comm == nullptr) {
      if (end_group_on_abort) (void)ncclGroupEnd();
      throw Error(ErrorCode::kAborted, {}, "the NCCL communicator was aborted");
    }
    return lock;
  }

  // Runs NCCL calls under `lock`. A non-blocking communicator whose call fails keeps that
  // failure as its asynchronous error and fails every later call (NCCL's enqueue.cc, init.cc),
  // and a call still in progress at its timeout may enqueue later into buffers the caller frees:
  // either way the communicator is done for. Aborts it and says so in the thrown Error.
  template <typename Calls>
  void fatal_on_error(std::unique_lock<std::mutex>& lock, Calls&& calls) {
    try {
      calls();
    } catch (const Error& e) {
      lock.unlock();
      comm_->abort_async(e.detail());
      throw Error(e.code(), e.context(),
                  fmt::format("{}; the NCCL communicator is aborted (a failed or timed-out NCCL "
                              "call leaves it unusable): create a new one",
                              e.detail()));
    }
  }

  // Splits the communicator (non-blocking) and waits for the child, bounded by `timeout`. NCCL
  // writes the child's handle from its own thread, possibly after a timeout: the cell it writes
  // to is kept for the process's life then, and the parent, stuck in progress, is aborted.
  ncclComm_t split_nccl(int color, int key, const std::string& name,
                        std::chrono::milliseconds timeout) {
    auto child = std::make_unique<ncclComm_t>(nullptr);
    ncclConfig_t config = cuda::nccl_config(name);
    std::unique_lock lock = lock_comm();
    try {
      fatal_on_error(lock, [&] {
        check_nccl(ncclCommSplit(comm_->comm, color, key, child.get(), &config), "ncclCommSplit",
                   comm_->comm);
        wait_nccl_ready(comm_->comm, timeout, "ncclCommSplit");
      });
      if (*child != nullptr) {
        wait_nccl_ready(*child, timeout, "ncclCommSplit (child)");
      } else if (color != NCCL_SPLIT_NOCOLOR) {
        throw Error(ErrorCode::kBackend, {}, "ncclCommSplit completed without a communicator");
      }
    } catch (const Error&) {
      if (*child != nullptr) (void)ncclCommAbort(*child);
      (void)child.release();  // NCCL may still write it.
      throw;
    }
    return *child;
  }

  // Orders the communicator's stream after the caller's work so far.
  void order_after_caller(cudaStream_t caller, cudaStream_t s) {
    if (s == caller) return;
    check_cuda(cudaEventRecord(order_.get(), caller), "cudaEventRecord(caller stream)");
    check_cuda(cudaStreamWaitEvent(s, order_.get(), 0), "cudaStreamWaitEvent");
  }

  cuda::GraphWatcher* graphs() {
    if (!graphs_) graphs_ = std::make_unique<cuda::GraphWatcher>([this] { abort(); });
    return graphs_.get();
  }

  // Refuses, before anything is numbered or launched, what NCCL would refuse: a refusal inside
  // NCCL is the communicator's end (fatal_on_error).
  void validate_nccl_args(const Op& op) const {
    const DType d = op.input.dtype;
    if (!reduces(op.kind) || !is_fp8(d)) return;
    if (compute_major_ < 9) {
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("{} reductions need a GPU of compute capability 9.0 or newer in "
                              "NCCL; cuda:{} is {}.x (all_gather, broadcast and other copies "
                              "of {} work everywhere)",
                              dtype_name(d), device_, compute_major_, dtype_name(d)));
    }
    if (op.reduce_op == ReduceOp::kAvg && info_ && info_->global_ranks.size() == 1) {
      // NCCL's one-rank path (onerank.cu) scales fp8 only in device code for sm_90+, which its
      // host-side launch never selects.
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("avg of {} in a group of one rank is refused by NCCL; use sum "
                              "(the same result for one rank)",
                              dtype_name(d)));
    }
  }

  static bool reduces(OpKind kind) {
    return kind == OpKind::kAllReduce || kind == OpKind::kReduce || kind == OpKind::kReduceScatter;
  }

  // An op already finished when launch() returns (host-staged setup ops).
  class Finished final : public PendingOp {
   public:
    PollResult poll() override { return {PollResult::State::kDone}; }
  };

  // meshrt's setup ops on host buffers (split's (color, key) exchange, DeviceMesh's agreement
  // check; validate() lets only those through): copied to the device, run on the
  // communicator's stream and copied back, synchronously, all on that stream. Rare and small.
  std::unique_ptr<PendingOp> run_staged(const Op& op) {
    const cudaStream_t s = stream();
    cuda::DeviceMemory in = cuda::DeviceMemory::allocate(std::max<size_t>(op.input.bytes(), 1));
    cuda::DeviceMemory out = cuda::DeviceMemory::allocate(std::max<size_t>(op.output.bytes(), 1));
    if (op.input.bytes() > 0) {
      check_cuda(
          cudaMemcpyAsync(in.get(), op.input.data, op.input.bytes(), cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync");
    }
    Op staged = op;
    staged.input.data = in.get();
    staged.input.device = Device::cuda(device_);
    staged.output.data = op.output.data == op.input.data ? in.get() : out.get();
    staged.output.device = Device::cuda(device_);
    {
      std::unique_lock lock = lock_comm();
      fatal_on_error(lock, [&] { enqueue_op(staged, s); });
    }
    if (op.output.bytes() > 0) {
      check_cuda(cudaMemcpyAsync(op.output.data, staged.output.data, op.output.bytes(),
                                 cudaMemcpyDeviceToHost, s),
                 "cudaMemcpyAsync");
    }
    check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return std::make_unique<Finished>();
  }

  // The record of a captured op, for its replays' hang reports.
  trace::OpRecord capture_record(const Op& op, uint64_t capture_id) const {
    trace::OpRecord r = make_record(op, info_, std::source_location::current());
    r.caller_file = "";
    r.caller_line = 0;
    r.cuda_graph_id = capture_id;
    r.op_seq = op.op_seq;
    r.collective_seq = op.collective_seq;
    r.enqueue_ns = trace::steady_now_ns();
    r.created_wall_ns = trace::wall_from_steady_ns(r.enqueue_ns);
    return r;
  }

  // Issues `op` on `s` and waits until NCCL took it (a non-blocking communicator may answer
  // ncclInProgress), under the comm's lock. Ops of several NCCL calls go in one group; a single
  // call needs none (a group costs about 75 ns more, measured by cuda_cost_bench).
  void enqueue_op(const Op& op, cudaStream_t s) {
    const bool one_call = op.kind != OpKind::kAllToAll && op.kind != OpKind::kGather &&
                          op.kind != OpKind::kScatter && op.kind != OpKind::kBatchP2P;
    if (one_call) {
      enqueue_nccl(op, s);
    } else {
      check_nccl(ncclGroupStart(), "ncclGroupStart", comm_->comm);
      try {
        enqueue_nccl(op, s);
      } catch (...) {
        (void)ncclGroupEnd();
        throw;
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm_->comm);
    }
    wait_nccl_ready(comm_->comm, op.timeout, op_kind_name(op.kind));
  }

  // Issues `op`'s NCCL calls on `s` (in a group where the caller opened one, under the comm's
  // lock).
  void enqueue_nccl(const Op& op, cudaStream_t s) {
    ncclComm_t c = comm_->comm;
    const int n = info_ ? static_cast<int>(info_->global_ranks.size()) : 0;
    const int me = info_ ? info_->rank : 0;
    // Copies move fp8 as bytes: NCCL refuses fp8 below sm_90 in some versions even where
    // nothing is reduced, and a byte is a byte.
    auto dt = [&](const BufferView& b) {
      return is_fp8(b.dtype) && !reduces(op.kind) ? ncclUint8 : cuda::nccl_dtype(b.dtype);
    };
    auto send = [&](const BufferView& b, int peer) {
      if (b.count > 0) check_nccl(ncclSend(b.data, b.count, dt(b), peer, c, s), "ncclSend", c);
    };
    auto recv = [&](const BufferView& b, int peer) {
      if (b.count > 0) check_nccl(ncclRecv(b.data, b.count, dt(b), peer, c, s), "ncclRecv", c);
    };
    switch (op.kind) {
      case OpKind::kAllReduce:
        check_nccl(ncclAllReduce(op.input.data, op.output.data, op.input.count, dt(op.input),
                                 cuda::nccl_reduce_op(op.reduce_op), c, s),
                   "ncclAllReduce", c);
        return;
      case OpKind::kBroadcast:
        check_nccl(ncclBroadcast(op.input.data, op.output.data, op.input.count, dt(op.input),
                                 op.root, c, s),
                   "ncclBroadcast", c);
        return;
      case OpKind::kReduce:
        check_nccl(ncclReduce(op.input.data, op.output.data, op.input.count, dt(op.input),
                              cuda::nccl_reduce_op(op.reduce_op), op.root, c, s),
                   "ncclReduce", c);
        return;
      case OpKind::kAllGather:
        check_nccl(ncclAllGather(op.input.data, op.output.data, op.input.count, dt(op.input), c, s),
                   "ncclAllGather", c);
        return;
      case OpKind::kReduceScatter:
        check_nccl(ncclReduceScatter(op.input.data, op.output.data, op.output.count, dt(op.input),
                                     cuda::nccl_reduce_op(op.reduce_op), c, s),
                   "ncclReduceScatter", c);
        return;
      case OpKind::kAllToAll: {
        // Even or uneven: grouped send/recv (ncclAlltoAll has no uneven form).
        size_t in_off = 0, out_off = 0;
        for (int r = 0; r < n; ++r) {
          const size_t in_n = op.input_splits.empty() ? op.input.count / n : op.input_splits[r];
          const size_t out_n = op.output_splits.empty() ? op.output.count / n : op.output_splits[r];
          send(op.input.slice(in_off, in_n), r);
          recv(op.output.slice(out_off, out_n), r);
          in_off += in_n;
          out_off += out_n;
        }
        return;
      }
      case OpKind::kGather:
        send(op.input, op.root);
        if (me == op.root) {
          for (int r = 0; r < n; ++r) recv(op.output.slice(r * op.input.count, op.input.count), r);
        }
        return;
      case OpKind::kScatter:
        if (me == op.root) {
          for (int r = 0; r < n; ++r) {
            send(op.input.slice(r * op.output.count, op.output.count), r);
          }
        }
        recv(op.output, op.root);
        return;
      case OpKind::kBarrier:
        // One float summed on a device scratch word: every rank must arrive.
        check_nccl(ncclAllReduce(scratch_.get(), scratch_.get(), 1, ncclFloat32, ncclSum, c, s),
                   "ncclAllReduce(barrier)", c);
        return;
      case OpKind::kSend:
        // NCCL has no tags: messages between two ranks match in posting order (PyTorch's too).
        send(op.input, op.root);
        return;
      case OpKind::kRecv:
        recv(op.output, op.root);
        return;
      case OpKind::kBatchP2P:
        for (const P2POp& p : op.p2p) {
          if (p.dir == P2POp::Dir::kSend) {
            send(p.buffer, p.peer);
          } else {
            recv(p.buffer, p.peer);
          }
        }
        return;
      case OpKind::kCoalesced:
        return;                  // Never given to a backend.
      case OpKind::kAllGatherV:  // validate() refused them.
      case OpKind::kReduceScatterV:
        throw Error(ErrorCode::kInternal, {}, "a v-collective reached NCCL's launch");
    }
  }

  std::shared_ptr<cuda::CommHandle> comm_;
  const int device_;
  const std::string name_;  // NCCL keeps a pointer to commName only during init.
  const std::chrono::milliseconds timeout_;
  const cuda::NcclSettings settings_;
  std::shared_ptr<cuda::EventPool> pool_;
  cuda::Stream stream_;         // Empty with use_caller_stream.
  cuda::Event order_;           // Recorded on the caller's stream, waited on by stream_.
  cuda::DeviceMemory scratch_;  // The barrier's word.
  std::shared_ptr<const trace::CommInfo> info_;
  std::shared_ptr<cuda::GroupEnd> group_;  // The open coalescing block's, if any.
  std::unique_ptr<cuda::GraphWatcher> graphs_;
  int compute_major_ = 0;         // The device's compute capability (fp8 reductions need 9).
  mutable PointerCache checked_;  // Buffers that passed the pointer check.
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(const GroupSpec& spec) {
  const int global_rank = spec.rank >= 0 && spec.rank < static_cast<int>(spec.global_ranks.size())
                              ? spec.global_ranks[spec.rank]
                              : -1;
  const ErrorContext where{global_rank, spec.name, "init", -1};
  try {
    const cuda::NcclSettings settings = cuda::nccl_settings_from_env();
    const int device = cuda::cuda_device_for(spec.local_rank, std::getenv("MESHRT_CUDA_DEVICE"));
    // Before the store exchange: a process without a usable GPU fails here, on every rank,
    // instead of leaving its peers waiting for a unique id.
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      const std::string why =
          e != cudaSuccess ? cuda::cuda_error(e, "cudaGetDeviceCount").detail() : "0 devices";
      throw Error(ErrorCode::kNotSupported, {},
                  fmt::format("no CUDA device: {}; the nccl backend needs a GPU", why));
    }
    if (device >= count) {
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("CUDA device {} (MESHRT_CUDA_DEVICE or LOCAL_RANK) does not exist: "
                              "this process sees {}",
                              device, count));
    }
    cuda::DeviceGuard guard(device);
    const int n = static_cast<int>(spec.global_ranks.size());
    ncclUniqueId id{};
    const std::string key = spec.store_key + "/nccl_unique_id";
    if (spec.rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      spec.store->set(key, std::span<const char>(id.internal, sizeof(id.internal)));
    } else {
      const auto bytes = spec.store->get(key, spec.timeout);
      if (bytes.size() != sizeof(id.internal)) {
        throw Error(ErrorCode::kInternal, {},
                    fmt::format("NCCL unique id under '{}' has {} bytes, not {}", key, bytes.size(),
                                sizeof(id.internal)));
      }
      std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    }
    const std::string name = spec.name;
    ncclConfig_t config = cuda::nccl_config(name);
    ncclComm_t comm = nullptr;
    check_nccl(ncclCommInitRankConfig(&comm, n, id, spec.rank, &config), "ncclCommInitRankConfig");
    try {
      wait_nccl_ready(comm, spec.timeout, "ncclCommInitRankConfig");
    } catch (...) {
      if (comm != nullptr) (void)ncclCommAbort(comm);
      throw;
    }
    return std::make_unique<NcclBackend>(comm, device, name, spec.timeout, settings);
  } catch (const Error& err) {
    throw Error(err.code(), where, err.detail());
  }
}

}  // namespace meshrt
