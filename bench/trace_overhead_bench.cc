// The tracing layer's cost per op: building the record and delivering its three life-cycle events
// (enqueue, start, end) to the sinks a job has by default (the flight recorder), with the comm
// logger off and on, and with each optional sink (exports, stragglers) on top; then the effect of
// each on a whole 8-byte all_reduce + wait (in-process backend, world size 1, so the figure is
// host overhead only). The last setup adds the live metrics' totals (trace/live_metrics.h), which
// every rank of a job with a store feeds. Issue #4's targets: record + complete <= 150 ns with the
// logger off, <= 500 ns with it on.
//
//   taskset -c 0 build-release/bench/trace_overhead_bench --benchmark_repetitions=7
//     --benchmark_report_aggregates_only=true   (one command line)
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "mesh/meshrt.h"
#include "trace/comm_logger.h"
#include "trace/exports.h"
#include "trace/flight_recorder.h"
#include "trace/live_metrics.h"
#include "trace/scope.h"
#include "trace/straggler.h"
#include "trace/tracer.h"

namespace {

using meshrt::trace::CommLogger;
using meshrt::trace::FlightRecorder;

enum Sinks : int64_t {
  kNone = 0,
  kRecorder = 1,
  kRecorderAndLogger = 2,
  kRecorderAndExports = 3,
  kRecorderAndStragglers = 4,
  // What a rank of a job under meshrun (or with a store) has by default: the live metrics' totals.
  kRecorderAndLiveMetrics = 5,
};

// The live metrics sink of this bench (the process's own stays unregistered: enable() is for
// good).
meshrt::trace::LiveMetrics& bench_live_metrics() {
  static auto* live = new meshrt::trace::LiveMetrics;
  return *live;
}

// Puts the process's sinks in the state `sinks` for one benchmark, and back after.
class SinkSetup {
 public:
  explicit SinkSetup(int64_t sinks) : sinks_(sinks) {
    if (sinks_ == kNone) meshrt::trace::remove_sink(&FlightRecorder::instance());
    if (sinks_ == kRecorderAndLogger) {
      CommLogger::instance().configure(
          {.enabled = true, .verbose = false, .ops = {}, .summary_path = ""});
    }
    if (sinks_ == kRecorderAndExports) {
      meshrt::trace::ExportOptions o;
      o.enabled = true;
      o.max_ops_per_rank = 4096;  // Full after warm-up: the steady state.
      meshrt::trace::Exports::instance().configure(o);
    }
    if (sinks_ == kRecorderAndStragglers) {
      meshrt::trace::StragglerOptions o;
      o.enabled = true;
      o.ops_per_rank = 4096;
      meshrt::trace::StragglerSink::instance().configure(o);
    }
    if (sinks_ == kRecorderAndLiveMetrics) {
      meshrt::trace::add_sink(
          std::shared_ptr<meshrt::trace::Sink>(&bench_live_metrics(), [](meshrt::trace::Sink*) {}));
    }
  }
  ~SinkSetup() {
    if (sinks_ == kNone) {
      meshrt::trace::add_sink(std::shared_ptr<meshrt::trace::Sink>(&FlightRecorder::instance(),
                                                                   [](meshrt::trace::Sink*) {}));
    }
    if (sinks_ == kRecorderAndLogger) {
      CommLogger::instance().configure({});
      CommLogger::instance().reset();
    }
    if (sinks_ == kRecorderAndExports) {
      meshrt::trace::Exports::instance().configure({});
      meshrt::trace::Exports::instance().reset();
    }
    if (sinks_ == kRecorderAndStragglers) {
      meshrt::trace::StragglerSink::instance().configure({});
      meshrt::trace::StragglerSink::instance().reset();
    }
    if (sinks_ == kRecorderAndLiveMetrics) {
      meshrt::trace::remove_sink(&bench_live_metrics());
      bench_live_metrics().reset();
    }
  }

 private:
  int64_t sinks_;
};

const char* label(int64_t sinks) {
  switch (sinks) {
    case kNone:
      return "no sinks";
    case kRecorder:
      return "recorder, logger off";
    case kRecorderAndLogger:
      return "recorder + logger";
    case kRecorderAndExports:
      return "recorder + exports";
    case kRecorderAndLiveMetrics:
      return "recorder + live metrics";
    default:
      return "recorder + stragglers";
  }
}

// What Communicator::enqueue and the worker do for the trace of one op, without the op.
void BM_RecordAndComplete(benchmark::State& state) {
  auto& fr = FlightRecorder::instance();  // Registered as a sink on first use.
  SinkSetup setup(state.range(0));
  auto comm = std::make_shared<meshrt::trace::CommInfo>();
  comm->name = "mesh0/tp";
  comm->description = "mesh_tp";
  comm->mesh_dim = "tp";
  comm->backend = "inproc";
  comm->global_ranks = {0, 1};
  comm->rank = 0;
  comm->global_rank = 0;
  fr.register_comm(comm);
  meshrt::trace::OpRecord proto;
  proto.comm = comm;
  proto.op = "all_reduce";
  proto.dtype = "f32";
  proto.reduce_op = "sum";
  proto.input_count = proto.output_count = 2;
  proto.input_shape.ndim = proto.output_shape.ndim = 1;
  proto.input_shape.size[0] = proto.output_shape.size[0] = 2;
  proto.bytes = 8;
  const uint64_t thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
  uint64_t seq = 0;
  for (auto _ : state) {
    meshrt::trace::OpRecord rec = proto;
    rec.collective_seq = rec.op_seq = ++seq;
    rec.scope = meshrt::trace::current_scope();
    rec.thread_id = thread;
    rec.record_id = meshrt::trace::next_record_id();
    rec.enqueue_ns = meshrt::trace::steady_now_ns();
    rec.created_wall_ns = meshrt::trace::wall_from_steady_ns(rec.enqueue_ns);
    meshrt::trace::emit_enqueue(rec);
    rec.start_ns = meshrt::trace::steady_now_ns();
    rec.state = meshrt::trace::OpState::kStarted;
    meshrt::trace::emit_start(rec);
    rec.end_ns = meshrt::trace::steady_now_ns();
    rec.state = meshrt::trace::OpState::kCompleted;
    meshrt::trace::emit_end(rec);
    benchmark::DoNotOptimize(rec);
  }
  fr.unregister_comm(comm.get());
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_RecordAndComplete)->DenseRange(kNone, kRecorderAndLiveMetrics);

// A whole op under the same three setups.
void BM_AllReduce8B(benchmark::State& state) {
  FlightRecorder::instance();
  SinkSetup setup(state.range(0));
  auto comm = meshrt::make_inproc_world(1).front();
  std::vector<float> x(2, 1.0f);
  comm->all_reduce(meshrt::view(x))->wait();  // Starts the worker thread.
  for (auto _ : state) comm->all_reduce(meshrt::view(x))->wait();
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_AllReduce8B)->DenseRange(kNone, kRecorderAndLiveMetrics)->UseRealTime();

}  // namespace
