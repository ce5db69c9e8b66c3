// Watching collectives inside CUDA graphs. A captured op does not run at capture, and PyTorch
// records nothing of its replays; meshrt records the capture (the graph's capture id in the op's
// record) and watches every replay through two kinds of host nodes added to the graph:
//  - one root node per graph (no dependencies: it runs as soon as a replay is launched) counts
//    the replay and stamps its start time;
//  - one node per captured op, after the op's kernels, stores the replay number it reached.
// A replay whose op has not been reached after the op's timeout is a hang: the watcher reports it
// to the watchdog as a running op (which dumps, signals and applies its policy), puts a record of
// the replay in the flight recorder (state started) and aborts the NCCL communicator.
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

// Replays of one captured graph. Never freed: a graph may be replayed after its communicator is
// gone, and its host nodes hold this address.
struct GraphReplays {
  uint64_t capture_id = 0;                 // cudaStreamGetCaptureInfo's id.
  std::atomic<uint64_t> launched{0};       // Replays begun (root node ran).
  std::atomic<int64_t> last_launch_ns{0};  // Steady ns when the last replay began.
};

// One op captured into a graph. Never freed, as GraphReplays.
struct CapturedOp {
  GraphReplays* graph = nullptr;
  trace::OpRecord record;             // As at capture (no times).
  std::atomic<uint64_t> reached{0};   // The last replay number whose op completed.
  std::atomic<bool> reported{false};  // A hang of it was put into the flight recorder.
};

// The replays of one communicator's captured ops, watched by the process watchdog.
class GraphWatcher final : public Watched {
 public:
  // `abort` aborts the communicator (ncclCommAbort).
  explicit GraphWatcher(std::function<void()> abort);
  ~GraphWatcher() override;
  GraphWatcher(const GraphWatcher&) = delete;
  GraphWatcher& operator=(const GraphWatcher&) = delete;

  // At capture, on `stream` (capturing, with capture `capture_id` into `graph`): adds the graph's
  // root node if it has none yet and returns the op's watch, whose end node the caller adds
  // after the op's kernels with add_end_node(). Throws Error if CUDA refuses a node.
  CapturedOp* watch(cudaGraph_t graph, uint64_t capture_id, trace::OpRecord record);
  // Adds `op`'s end node on capturing `stream`.
  static void add_end_node(cudaStream_t stream, CapturedOp* op);

  // Watched: the first captured op whose current replay has not reached it, as a started op
  // since the replay began (the watchdog times it out).
  std::optional<trace::OpRecord> running_record() const override;
  void abort() noexcept override;

 private:
  std::function<void()> abort_;
  mutable std::mutex mu_;
  std::vector<CapturedOp*> ops_;
};

}  // namespace meshrt::cuda
