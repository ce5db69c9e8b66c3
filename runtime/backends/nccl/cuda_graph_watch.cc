#include "runtime/backends/nccl/cuda_graph_watch.h"

#include <map>

#include "runtime/backends/nccl/cuda_check.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt::cuda {
namespace {

// Every graph seen, by capture id; leaked on purpose (see GraphReplays).
struct Registry {
  std::mutex mu;
  std::map<uint64_t, GraphReplays*> graphs;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Host node at a replay's start: runs on CUDA's callback thread, so it only counts.
void CUDART_CB on_replay_start(void* data) {
  auto* g = static_cast<GraphReplays*>(data);
  g->last_launch_ns.store(trace::steady_now_ns(), std::memory_order_relaxed);
  g->launched.fetch_add(1, std::memory_order_release);
}

// Host node after an op's kernels: this replay got past the op.
void CUDART_CB on_op_reached(void* data) {
  auto* op = static_cast<CapturedOp*>(data);
  op->reached.store(op->graph->launched.load(std::memory_order_acquire), std::memory_order_release);
}

}  // namespace

GraphWatcher::GraphWatcher(std::function<void()> abort) : abort_(std::move(abort)) {
  Watchdog::instance().add(this);
}

GraphWatcher::~GraphWatcher() { Watchdog::instance().remove(this); }

CapturedOp* GraphWatcher::watch(cudaGraph_t graph, uint64_t capture_id, trace::OpRecord record) {
  GraphReplays* replays;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    auto [it, added] = r.graphs.try_emplace(capture_id, nullptr);
    if (added) {
      it->second = new GraphReplays;
      it->second->capture_id = capture_id;
      // A root node: no dependencies, so it runs when a replay is launched, before anything the
      // replay may hang on. CUDA allows adding nodes to a graph while it is being captured.
      cudaHostNodeParams params{};
      params.fn = on_replay_start;
      params.userData = it->second;
      cudaGraphNode_t node;
      const cudaError_t e = cudaGraphAddHostNode(&node, graph, nullptr, 0, &params);
      if (e != cudaSuccess) {
        delete it->second;
        r.graphs.erase(it);
        throw cuda_error(e, "cudaGraphAddHostNode (graph replay watch)");
      }
    }
    replays = it->second;
  }
  auto* op = new CapturedOp;
  op->graph = replays;
  op->record = std::move(record);
  std::lock_guard lock(mu_);
  ops_.push_back(op);
  return op;
}

void GraphWatcher::add_end_node(cudaStream_t stream, CapturedOp* op) {
  check_cuda(cudaLaunchHostFunc(stream, on_op_reached, op), "cudaLaunchHostFunc (graph watch)");
}

std::optional<trace::OpRecord> GraphWatcher::running_record() const {
  std::lock_guard lock(mu_);
  const int64_t now = trace::steady_now_ns();
  for (CapturedOp* op : ops_) {
    const uint64_t launched = op->graph->launched.load(std::memory_order_acquire);
    if (launched == 0 || op->reached.load(std::memory_order_acquire) >= launched) continue;
    trace::OpRecord r = op->record;
    r.state = trace::OpState::kStarted;
    r.start_ns = op->graph->last_launch_ns.load(std::memory_order_relaxed);
    if (now - r.start_ns > r.timeout_ms * 1'000'000 && !op->reported.exchange(true)) {
      // Hung past its timeout: the replay goes into the flight recorder before the watchdog
      // (which fires a second later) dumps it.
      r.record_id = trace::next_record_id();
      op->record.record_id = r.record_id;
      log().error("'{}' {} #{} in CUDA graph {} has not finished in replay {} after {} ms",
                  r.comm ? r.comm->name : "", r.op, r.op_seq, op->graph->capture_id, launched,
                  r.timeout_ms);
      trace::emit_enqueue(r);
      trace::emit_start(r);
    }
    return r;
  }
  return std::nullopt;
}

void GraphWatcher::abort() noexcept { abort_(); }

}  // namespace meshrt::cuda
