// What the C API (mesh/meshrt_c.h) adds per op over the C++ call it wraps: an 8-byte all_reduce
// on an in-process world of one rank, where the op itself is only meshrt's host path (~0.4 us),
// through the C++ API and through the C API, blocking and with a work handle. Each runs its loop
// inside an in-process world (run_inproc / meshrt_run_inproc) on a thread of its own. Run with
// repetitions and --benchmark_enable_random_interleaving=true, so that the three alternate
// (docs/performance.md; issue #31's bar: +50 ns).
#include <benchmark/benchmark.h>

#include <vector>

#include "mesh/meshrt.h"
#include "mesh/meshrt_c.h"

namespace {

void BM_AllReduce8B_Cpp(benchmark::State& state) {
  meshrt::run_inproc(1, [&](meshrt::Communicator& comm) {
    std::vector<float> x(2, 1.0f);
    comm.all_reduce(meshrt::view(x))->wait();
    for (auto _ : state) comm.all_reduce(meshrt::view(x))->wait();
  });
}
BENCHMARK(BM_AllReduce8B_Cpp)->UseRealTime();

void c_loop(meshrt_comm* comm, void* user) {
  auto& state = *static_cast<benchmark::State*>(user);
  float x[2] = {1.0f, 1.0f};
  meshrt_all_reduce(comm, x, 2, MESHRT_FLOAT32, MESHRT_SUM, nullptr);
  for (auto _ : state) {
    if (meshrt_all_reduce(comm, x, 2, MESHRT_FLOAT32, MESHRT_SUM, nullptr) != MESHRT_OK) {
      state.SkipWithError(meshrt_last_error());
      break;
    }
  }
}

void BM_AllReduce8B_C(benchmark::State& state) { meshrt_run_inproc(1, c_loop, &state); }
BENCHMARK(BM_AllReduce8B_C)->UseRealTime();

void c_work_loop(meshrt_comm* comm, void* user) {
  auto& state = *static_cast<benchmark::State*>(user);
  float x[2] = {1.0f, 1.0f};
  meshrt_all_reduce(comm, x, 2, MESHRT_FLOAT32, MESHRT_SUM, nullptr);
  for (auto _ : state) {
    meshrt_work* work = nullptr;
    if (meshrt_all_reduce(comm, x, 2, MESHRT_FLOAT32, MESHRT_SUM, &work) != MESHRT_OK ||
        meshrt_work_wait(work) != MESHRT_OK) {
      state.SkipWithError(meshrt_last_error());
      break;
    }
    meshrt_work_free(work);
  }
}

void BM_AllReduce8B_CWork(benchmark::State& state) { meshrt_run_inproc(1, c_work_loop, &state); }
BENCHMARK(BM_AllReduce8B_CWork)->UseRealTime();

}  // namespace
