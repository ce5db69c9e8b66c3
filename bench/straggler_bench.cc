// The straggler report's cost at exit on the collecting rank: analyze_stragglers() over N ranks
// with full rings (4096 samples each, half on the world, half on tp groups of 8). The sink's
// per-op cost is in bench/trace_overhead_bench.cc with the other sinks'.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "trace/straggler.h"

namespace {

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
