// DeviceMesh costs: creating a 4-D mesh with all its communicators on a 64-rank in-process world
// (the slowest rank's time), and the per-query cost of the closed-form rank math.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"

namespace {

constexpr int kWorld = 64;
const std::vector<int64_t> kShape{2, 2, 4, 4};
const std::vector<std::string> kNames{"pp", "dp", "cp", "tp"};

// All 64 ranks start together; the iteration time is the slowest rank's creation time.
void BM_CreateMesh4D_World64(benchmark::State& state) {
  int creations = 0;
  for (auto _ : state) {
    auto world = meshrt::make_inproc_world(kWorld);
    std::atomic<int64_t> slowest_ns{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        world[r]->barrier()->wait();
        const auto t0 = std::chrono::steady_clock::now();
        auto mesh = meshrt::init_device_mesh(world[r], "cpu", kShape, kNames);
        const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now() - t0)
                               .count();
        int64_t seen = slowest_ns.load();
        while (ns > seen && !slowest_ns.compare_exchange_weak(seen, ns)) {
        }
        if (r == 0) creations = mesh->communicators_created();
        world[r]->barrier()->wait();
      });
    }
    for (auto& t : threads) t.join();
    state.SetIterationTime(static_cast<double>(slowest_ns.load()) / 1e9);
  }
  state.counters["communicators_per_rank"] = creations;
}
BENCHMARK(BM_CreateMesh4D_World64)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

// One 4-D mesh on 64 ranks, kept alive for the query benchmarks (queries never communicate).
struct MeshFixture {
  std::vector<std::shared_ptr<meshrt::Communicator>> world = meshrt::make_inproc_world(kWorld);
  std::vector<std::shared_ptr<meshrt::DeviceMesh>> meshes{kWorld};
  MeshFixture() {
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back(
          [&, r] { meshes[r] = meshrt::init_device_mesh(world[r], "cpu", kShape, kNames); });
    }
    for (auto& t : threads) t.join();
  }
};

MeshFixture& fixture() {
  static MeshFixture f;
  return f;
}

void BM_LocalRankByName(benchmark::State& state) {
  const auto& mesh = *fixture().meshes[37];
  for (auto _ : state) benchmark::DoNotOptimize(mesh.local_rank("cp"));
}
BENCHMARK(BM_LocalRankByName);

void BM_CommByName(benchmark::State& state) {
  const auto& mesh = *fixture().meshes[37];
  for (auto _ : state) benchmark::DoNotOptimize(&mesh.comm("tp"));
}
BENCHMARK(BM_CommByName);

void BM_Coordinate(benchmark::State& state) {
  const auto& mesh = *fixture().meshes[37];
  for (auto _ : state) benchmark::DoNotOptimize(mesh.coordinate().data());
}
BENCHMARK(BM_Coordinate);

void BM_SliceTwoDims(benchmark::State& state) {
  const auto& mesh = *fixture().meshes[37];
  const std::vector<std::string> names{"dp", "tp"};
  for (auto _ : state) benchmark::DoNotOptimize(mesh.slice(names));
}
BENCHMARK(BM_SliceTwoDims);

}  // namespace
