// Watching collectives inside CUDA graphs. A captured op does not run at capture, and PyTorch
// records nothing of its replays; meshrt records the capture (the graph's capture id in the op's
// record) and watches every replay through two kinds of host nodes added to the graph:
//  - one root node per graph (no dependencies: it runs as soon as a replay is launched) counts
//    the replay and stamps its start time; every captured op depends on it, so no op's node can
//    run before its replay was counted;
//  - one node per captured op, after the op's kernels, stores the replay number it reached.
// A replay whose op has not been reached after the op's timeout is a hang: the watcher reports it
// to the watchdog as a running op (which dumps, signals and applies its policy), puts a record of
// the replay in the flight recorder (state started) and aborts the NCCL communicator.
// A CUDA user object owned by the graph says when the graph and every instance of it are gone:
// then its watches are freed.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/watchdog.h"
#include "trace/op_record.h"

namespace meshrt::cuda {

struct CapturedOp;

// Replays of one captured graph, shared by the watches of every communicator captured into it.
// The process's registry of graphs keeps it, and the watches its host nodes point to, until the
// graph is destroyed; a communicator destroyed before its graph leaves them there.
struct GraphReplays {
  uint64_t capture_id = 0;                       // cudaStreamGetCaptureInfo's id.
  cudaGraphNode_t root = nullptr;                // The replay-counting root node.
  std::atomic<uint64_t> launched{0};             // Replays begun (root node ran).
  std::atomic<int64_t> last_launch_ns{0};        // Steady ns when the last replay began.
  std::atomic<bool> destroyed{false};            // The graph and all its instances are gone.
  std::vector<std::shared_ptr<CapturedOp>> ops;  // Under the registry's lock.
};

// One op captured into a graph. Its end node holds its address: freed only once the graph is
// destroyed and its communicator's watcher let go of it.
struct CapturedOp {
  std::shared_ptr<GraphReplays> graph;
  trace::OpRecord record;             // As at capture (no times).
  std::atomic<uint64_t> reached{0};   // The last replay number whose op completed.
  std::atomic<bool> reported{false};  // A hang of it was put into the flight recorder.
};

// The replays of one communicator's captured ops, watched by the process watchdog.
class GraphWatcher final : public Watched {
 public:
  // `abort` aborts the communicator (without blocking).
  explicit GraphWatcher(std::function<void()> abort);
  ~GraphWatcher() override;
  GraphWatcher(const GraphWatcher&) = delete;
  GraphWatcher& operator=(const GraphWatcher&) = delete;

  // At capture, before the op's kernels are captured on `stream` (capturing into `graph` with
  // id `capture_id`): adds the graph's root node if it has none yet, makes `stream`'s next node
  // depend on it and returns the op's watch, whose end node the caller adds after the op's
  // kernels with add_end_node(). Throws Error if CUDA refuses.
  CapturedOp* watch(cudaStream_t stream, cudaGraph_t graph, uint64_t capture_id,
                    trace::OpRecord record);
  // Adds `op`'s end node on capturing `stream`, before the stream is joined back.
  static void add_end_node(cudaStream_t stream, CapturedOp* op);

  // Watched: the first captured op whose current replay has not reached it, as a started op
  // since the replay began (the watchdog times it out). Frees the watches of destroyed graphs.
  std::optional<trace::OpRecord> running_record() const override;
  void abort() noexcept override;

  // Watches held now (tests: those of destroyed graphs are freed).
  size_t watched_ops() const;

 private:
  std::function<void()> abort_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<CapturedOp>> ops_;
};

}  // namespace meshrt::cuda
