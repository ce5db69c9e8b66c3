// Per-op cost of the straggler sink (trace/straggler.h) on the hot path. The sink does work in
// on_end only (on_enqueue and on_start are empty): a thread-local route look-up and a 56-byte
// sample copied into its rank's ring under the ring's spin lock. Measured three ways:
//   BM_StragglerOnEnd   the sink's on_end called directly, ring full (the steady state);
//   BM_EmitLifecycle    the tracer delivering enqueue, start and end to the registered sink (what
//                       every op pays with the report on), and the same with a null sink;
//   BM_AllReduce8B      a whole all_reduce(8 B)->wait() on the in-process backend, world size 1,
//                       without sinks and with the sink on: the end-to-end difference.
// And the collecting rank's cost at exit: BM_Analyze, analyze_stragglers() over N ranks with
// full rings (4096 samples each, half on the world, half on tp groups of 8).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/meshrt.h"
#include "trace/straggler.h"
#include "trace/tracer.h"

namespace {

using meshrt::trace::OpRecord;
using meshrt::trace::StragglerSink;

// The sink on for the benchmark's lifetime, with a ring small enough to be full after warm-up.
class SinkOn {
 public:
  SinkOn() {
    meshrt::trace::StragglerOptions o;
    o.enabled = true;
    o.ops_per_rank = 4096;
    StragglerSink::instance().configure(o);
    StragglerSink::instance().reset();
  }
  ~SinkOn() {
    StragglerSink::instance().configure({});
    StragglerSink::instance().reset();
  }
};

OpRecord make_record() {
  auto comm = std::make_shared<meshrt::trace::CommInfo>();
  comm->uid = 1000;  // Apart from the communicators BM_AllReduce8B creates.
  comm->store_key = "world/split1.c0";
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
  r.created_wall_ns = 1'700'000'000'000'000'000;
  r.enqueue_ns = 1000;
  r.start_ns = 2000;
  r.end_ns = 5000;
  r.state = meshrt::trace::OpState::kCompleted;
  return r;
}

void BM_StragglerOnEnd(benchmark::State& state) {
  SinkOn on;
  OpRecord r = make_record();
  for (int i = 0; i < 8192; ++i) StragglerSink::instance().on_end(r);  // Fill the ring.
  for (auto _ : state) {
    ++r.collective_seq;
    StragglerSink::instance().on_end(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StragglerOnEnd);

class NullSink : public meshrt::trace::Sink {
 public:
  void on_enqueue(const OpRecord&) override {}
  void on_start(const OpRecord&) override {}
  void on_end(const OpRecord&) override {}
};

// Arg 0: a null sink; arg 1: the straggler sink.
void BM_EmitLifecycle(benchmark::State& state) {
  std::unique_ptr<SinkOn> on;
  auto null_sink = std::make_shared<NullSink>();
  if (state.range(0) == 1) {
    on = std::make_unique<SinkOn>();
  } else {
    meshrt::trace::add_sink(null_sink);
  }
  OpRecord r = make_record();
  for (auto _ : state) {
    ++r.collective_seq;
    meshrt::trace::emit_enqueue(r);
    meshrt::trace::emit_start(r);
    meshrt::trace::emit_end(r);
  }
  meshrt::trace::remove_sink(null_sink.get());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EmitLifecycle)->ArgName("straggler")->Arg(0)->Arg(1);

// Arg 0: no sink; arg 1: the straggler sink on.
void BM_AllReduce8B(benchmark::State& state) {
  std::unique_ptr<SinkOn> on;
  if (state.range(0) == 1) on = std::make_unique<SinkOn>();
  auto comm = meshrt::make_inproc_world(1).front();
  std::vector<float> x(2, 1.0f);
  comm->all_reduce(meshrt::view(x))->wait();
  for (auto _ : state) {
    comm->all_reduce(meshrt::view(x))->wait();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllReduce8B)->ArgName("straggler")->Arg(0)->Arg(1)->UseRealTime();

void BM_Analyze(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  constexpr int kTp = 8;
  constexpr uint64_t kSamples = 4096;
  std::vector<meshrt::trace::RankSamples> ranks(world);
  std::vector<int> all(world);
  for (int r = 0; r < world; ++r) all[r] = r;
  for (int r = 0; r < world; ++r) {
    meshrt::trace::RankSamples& rs = ranks[r];
    rs.rank = r;
    const int tp0 = r / kTp * kTp;
    std::vector<int> tp(kTp);
    for (int i = 0; i < kTp; ++i) tp[i] = tp0 + i;
    rs.groups = {{"world", "world", "", all},
                 {"world/split1.c" + std::to_string(tp0), "mesh0/tp", "tp", tp}};
    for (uint64_t i = 0; i < kSamples; ++i) {
      meshrt::trace::StragglerSample s;
      s.group = static_cast<uint32_t>(i % 2);
      std::string_view("all_reduce").copy(s.op.data(), 10);
      s.seq = i / 2 + 1;
      s.arrival_wall_ns = static_cast<int64_t>(i) * 100000 + (r * 7919) % 5000;
      s.end_wall_ns = s.arrival_wall_ns + 50000;
      rs.samples.push_back(s);
    }
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(meshrt::trace::analyze_stragglers(ranks, 5));
  }
  state.SetItemsProcessed(state.iterations() * world * static_cast<int64_t>(kSamples));
}
BENCHMARK(BM_Analyze)->ArgName("ranks")->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace
