// Per-op cost of the trace exports sink (trace/exports.h) on the hot path. The sink does work in
// on_end only (on_enqueue and on_start are empty): it copies the record into its rank's ring and
// updates one Prometheus series. Measured three ways:
//   BM_ExportsOnEnd        the sink's on_end called directly, ring full (the steady state);
//   BM_EmitLifecycle       the tracer delivering enqueue, start and end to the registered sink
//                          (what every op pays with exports on), and the same with a null sink;
//   BM_AllReduce8B         a whole all_reduce(8 B)->wait() on the in-process backend, world size
//                          1, without sinks and with exports on: the end-to-end difference.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "runtime/meshrt.h"
#include "trace/exports.h"
#include "trace/tracer.h"

namespace {

using meshrt::trace::Exports;
using meshrt::trace::OpRecord;

// Exports on for the benchmark's lifetime, with a ring small enough to be full after warm-up.
class ExportsOn {
 public:
  ExportsOn() {
    meshrt::trace::ExportOptions o;
    o.enabled = true;
    o.max_ops_per_rank = 4096;
    Exports::instance().configure(o);
    Exports::instance().reset();
  }
  ~ExportsOn() {
    Exports::instance().configure({});
    Exports::instance().reset();
  }
};

OpRecord make_record() {
  auto comm = std::make_shared<meshrt::trace::CommInfo>();
  comm->name = "mesh0/tp";
  comm->mesh_dim = "tp";
  comm->backend = "inproc";
  comm->global_ranks = {0, 1};
  comm->rank = 0;
  comm->global_rank = 0;
  OpRecord r;
  r.comm = comm;
  r.op = "all_reduce";
  r.dtype = "f32";
  r.reduce_op = "sum";
  r.bytes = 8;
  r.input_count = r.output_count = 2;
  r.enqueue_ns = 1000;
  r.start_ns = 2000;
  r.end_ns = 5000;
  r.state = meshrt::trace::OpState::kCompleted;
  return r;
}

void BM_ExportsOnEnd(benchmark::State& state) {
  ExportsOn on;
  OpRecord r = make_record();
  for (int i = 0; i < 8192; ++i) Exports::instance().on_end(r);  // Fill the ring.
  for (auto _ : state) {
    ++r.op_seq;
    Exports::instance().on_end(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExportsOnEnd);

class NullSink : public meshrt::trace::Sink {
 public:
  void on_enqueue(const OpRecord&) override {}
  void on_start(const OpRecord&) override {}
  void on_end(const OpRecord&) override {}
};

// Arg 0: a null sink; arg 1: the exports sink.
void BM_EmitLifecycle(benchmark::State& state) {
  std::unique_ptr<ExportsOn> on;
  auto null_sink = std::make_shared<NullSink>();
  if (state.range(0) == 1) {
    on = std::make_unique<ExportsOn>();
  } else {
    meshrt::trace::add_sink(null_sink);
  }
  OpRecord r = make_record();
  for (auto _ : state) {
    ++r.op_seq;
    meshrt::trace::emit_enqueue(r);
    meshrt::trace::emit_start(r);
    meshrt::trace::emit_end(r);
  }
  meshrt::trace::remove_sink(null_sink.get());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EmitLifecycle)->ArgName("exports")->Arg(0)->Arg(1);

// Arg 0: no sink; arg 1: exports on.
void BM_AllReduce8B(benchmark::State& state) {
  std::unique_ptr<ExportsOn> on;
  if (state.range(0) == 1) on = std::make_unique<ExportsOn>();
  auto comm = meshrt::make_inproc_world(1).front();
  std::vector<float> x(2, 1.0f);
  comm->all_reduce(meshrt::view(x))->wait();
  for (auto _ : state) {
    comm->all_reduce(meshrt::view(x))->wait();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllReduce8B)->ArgName("exports")->Arg(0)->Arg(1)->UseRealTime();

}  // namespace
