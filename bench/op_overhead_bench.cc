// meshrt's per-op host overhead: what every op pays on the calling thread and the communicator's
// worker before and after the backend moves any data. In-process backend, world size 1, so the
// "network" part is a no-op and what is left is enqueue (validation, trace record, Work
// allocation, queue push, worker wake-up) + worker (pop, run, complete, notify) + wait.
// This is the hot path the tracing layer sits on; no trace sink is registered here.
//
// Reference points in the same binary, to read the figures against:
//   BM_ValidateOnly        meshrt::validate_op alone;
//   BM_HandoffModel        the same thread handoff as meshrt's Communicator with an empty job
//                          (bench/handoff_runner.h): the floor of the worker-thread design;
//   BM_HandoffModelSteal   the same, with wait() running the job itself if the worker has not
//                          taken it yet (a candidate fix, see docs/performance.md).
#include <benchmark/benchmark.h>
#include <gloo/math.h>

#include <vector>

#include "bench/handoff_runner.h"
#include "mesh/meshrt.h"
#include "runtime/reduce_op.h"
#include "runtime/validation.h"
#include "trace/tracer.h"

namespace {

std::shared_ptr<meshrt::Communicator> make_world() {
  auto world = meshrt::make_inproc_world(1);
  return world.front();
}

void BM_AllReduce8B(benchmark::State& state) {
  auto comm = make_world();
  std::vector<float> x(2, 1.0f);              // 8 bytes
  comm->all_reduce(meshrt::view(x))->wait();  // Starts the worker thread.
  for (auto _ : state) {
    comm->all_reduce(meshrt::view(x))->wait();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllReduce8B)->UseRealTime();

// Enqueue a batch of ops, then wait for the last: the caller-side cost per op when the worker
// keeps up (ops issued asynchronously, as a training loop issues gradient buckets).
void BM_AllReduce8B_Pipelined(benchmark::State& state) {
  auto comm = make_world();
  std::vector<float> x(2, 1.0f);
  const int64_t batch = state.range(0);
  std::vector<meshrt::WorkHandle> works(static_cast<size_t>(batch));
  comm->all_reduce(meshrt::view(x))->wait();
  for (auto _ : state) {
    for (int64_t i = 0; i < batch; ++i)
      works[static_cast<size_t>(i)] = comm->all_reduce(meshrt::view(x));
    works.back()->wait();
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_AllReduce8B_Pipelined)->Arg(64)->UseRealTime();

// The same with one trace sink registered that does nothing: the cost of delivering the three
// life-cycle events (enqueue, start, end) to a sink, before any sink does real work.
class NullSink : public meshrt::trace::Sink {
 public:
  void on_enqueue(const meshrt::trace::OpRecord&) override {}
  void on_start(const meshrt::trace::OpRecord&) override {}
  void on_end(const meshrt::trace::OpRecord&) override {}
};

void BM_AllReduce8B_NullSink(benchmark::State& state) {
  auto sink = std::make_shared<NullSink>();
  meshrt::trace::add_sink(sink);
  auto comm = make_world();
  std::vector<float> x(2, 1.0f);
  comm->all_reduce(meshrt::view(x))->wait();
  for (auto _ : state) {
    comm->all_reduce(meshrt::view(x))->wait();
  }
  meshrt::trace::remove_sink(sink.get());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllReduce8B_NullSink)->UseRealTime();

// The reduction kernels of the two sides of bench/collective_bench, in place (out == a, as Gloo's
// ring calls them): meshrt's reduce_elements (compiled in libmeshrt) vs gloo::sum<float>
// (compiled here). Arg: elements. Not host overhead, but it tells whether a bandwidth ratio
// between meshrt and raw Gloo can come from the reduction loop.
void BM_ReduceSumF32_Meshrt(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  for (auto _ : state) {
    meshrt::reduce_elements(meshrt::DType::kF32, meshrt::ReduceOp::kSum, a.data(), a.data(),
                            b.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * sizeof(float)));
}
BENCHMARK(BM_ReduceSumF32_Meshrt)->Arg(1 << 16)->Arg(1 << 22);

void BM_ReduceSumF32_Gloo(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
  benchmark::DoNotOptimize(fn);
  for (auto _ : state) {
    fn(a.data(), a.data(), b.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * sizeof(float)));
}
BENCHMARK(BM_ReduceSumF32_Gloo)->Arg(1 << 16)->Arg(1 << 22);

void BM_Barrier(benchmark::State& state) {
  auto comm = make_world();
  comm->barrier()->wait();
  for (auto _ : state) {
    comm->barrier()->wait();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Barrier)->UseRealTime();

void BM_ValidateOnly(benchmark::State& state) {
  auto comm = make_world();
  std::vector<float> x(2, 1.0f);
  meshrt::Op op;
  op.kind = meshrt::OpKind::kAllReduce;
  op.input = op.output = meshrt::view(x);
  op.timeout = comm->timeout();
  const meshrt::trace::CommInfo& info = *comm->info();
  for (auto _ : state) {
    meshrt::validate_op(op, info, /*accepts_cuda=*/false);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ValidateOnly);

// The bare handoff meshrt's Communicator performs per op (queue + notify, worker wakes and runs,
// completion + notify, caller wakes), with an empty job: bench/handoff_runner.h.
void BM_HandoffModel(benchmark::State& state) {
  meshrt::bench::HandoffRunner runner(meshrt::bench::HandoffRunner::Mode::kHandoff);
  runner.wait(runner.submit([] {}));
  for (auto _ : state) {
    runner.wait(runner.submit([] {}));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HandoffModel)->UseRealTime();

// The same with the candidate fix: wait() runs the job itself if the worker has not taken it.
void BM_HandoffModelSteal(benchmark::State& state) {
  meshrt::bench::HandoffRunner runner(meshrt::bench::HandoffRunner::Mode::kSteal);
  runner.wait(runner.submit([] {}));
  for (auto _ : state) {
    runner.wait(runner.submit([] {}));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HandoffModelSteal)->UseRealTime();

}  // namespace
