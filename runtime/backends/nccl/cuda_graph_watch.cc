#include "runtime/backends/nccl/cuda_graph_watch.h"

#include <map>

#include "runtime/backends/nccl/cuda_check.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt::cuda {
namespace {

// Every graph being watched, by capture id (unique over the process's life).
struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::shared_ptr<GraphReplays>> graphs;
};

// Never destroyed: a replay's host nodes may still run while the process exits.
Registry& registry() {
  static Registry& r = *new Registry;
  return r;
}

// Forgets destroyed graphs (their host nodes never run again); ops held by a watcher go with it.
void sweep_locked(Registry& r) {
  std::erase_if(r.graphs, [](auto& g) {
    if (!g.second->destroyed.load(std::memory_order_acquire)) return false;
    g.second->ops.clear();  // Breaks the op -> graph -> op cycle.
    return true;
  });
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

// The graph's user object was released: the graph and every instance of it are destroyed and
// their last replay finished, so no host node of it runs again. May not call CUDA.
void CUDART_CB on_graph_destroyed(void* data) {
  static_cast<GraphReplays*>(data)->destroyed.store(true, std::memory_order_release);
}

// The replays of the graph `graph` being captured with id `capture_id`: registered, with its root
// node and user object, by the first op captured into it.
std::shared_ptr<GraphReplays> replays_of(cudaGraph_t graph, uint64_t capture_id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  sweep_locked(r);
  auto [it, added] = r.graphs.try_emplace(capture_id);
  if (!added) return it->second;
  auto g = std::make_shared<GraphReplays>();
  g->capture_id = capture_id;
  // A root node: no dependencies, so it runs when a replay is launched, before anything the
  // replay may hang on. CUDA allows adding nodes to a graph while it is being captured.
  cudaHostNodeParams params{};
  params.fn = on_replay_start;
  params.userData = g.get();
  cudaError_t e = cudaGraphAddHostNode(&g->root, graph, nullptr, 0, &params);
  // The registry keeps `g` until the graph owns no user object any more (on_graph_destroyed).
  cudaUserObject_t owner = nullptr;
  if (e == cudaSuccess) {
    e = cudaUserObjectCreate(&owner, g.get(), on_graph_destroyed, 1,
                             cudaUserObjectNoDestructorSync);
  }
  if (e == cudaSuccess) e = cudaGraphRetainUserObject(graph, owner, 1, cudaGraphUserObjectMove);
  if (e != cudaSuccess) {
    if (owner != nullptr) (void)cudaUserObjectRelease(owner, 1);
    r.graphs.erase(it);
    throw cuda_error(e, "graph replay watch (cudaGraphAddHostNode/cudaGraphRetainUserObject)");
  }
  it->second = g;
  return g;
}

}  // namespace

GraphWatcher::GraphWatcher(std::function<void()> abort) : abort_(std::move(abort)) {
  Watchdog::instance().add(this);
}

GraphWatcher::~GraphWatcher() { Watchdog::instance().remove(this); }

CapturedOp* GraphWatcher::watch(cudaStream_t stream, cudaGraph_t graph, uint64_t capture_id,
                                trace::OpRecord record) {
  std::shared_ptr<GraphReplays> replays = replays_of(graph, capture_id);
  check_cuda(cudaStreamUpdateCaptureDependencies(stream, &replays->root, nullptr, 1,
                                                 cudaStreamAddCaptureDependencies),
             "cudaStreamUpdateCaptureDependencies (graph replay watch)");
  auto op = std::make_shared<CapturedOp>();
  op->graph = replays;
  op->record = std::move(record);
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    replays->ops.push_back(op);
  }
  std::lock_guard lock(mu_);
  ops_.push_back(op);
  return op.get();
}

void GraphWatcher::add_end_node(cudaStream_t stream, CapturedOp* op) {
  check_cuda(cudaLaunchHostFunc(stream, on_op_reached, op), "cudaLaunchHostFunc (graph watch)");
}

std::optional<trace::OpRecord> GraphWatcher::running_record() const {
  std::lock_guard lock(mu_);
  std::erase_if(ops_, [](const auto& op) { return op->graph->destroyed.load(); });
  const int64_t now = trace::steady_now_ns();
  for (const auto& op : ops_) {
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

size_t GraphWatcher::watched_ops() const {
  std::lock_guard lock(mu_);
  std::erase_if(ops_, [](const auto& op) { return op->graph->destroyed.load(); });
  return ops_.size();
}

}  // namespace meshrt::cuda
