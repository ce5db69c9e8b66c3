// Writing one flight-recorder dump of a full ring (2000 entries, the default capacity): rendering
// it as meshrt JSON and as PyTorch's pickle, and the whole dump() through the file writer
// (temp file, fsync, rename). Issue #5's target for one dump: <= 50 ms.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "mesh/meshrt.h"
#include "trace/flight_recorder.h"
#include "trace/scope.h"

namespace {

using meshrt::trace::DumpFormat;
using meshrt::trace::DumpReason;
using meshrt::trace::FlightRecorder;

// A recorder holding 2000 real all_reduce records of rank 0, in a scope.
std::shared_ptr<FlightRecorder> filled_recorder(const std::string& prefix) {
  auto fr = std::make_shared<FlightRecorder>(
      meshrt::trace::FlightRecorderOptions{2000, prefix, DumpFormat::kJson});
  meshrt::trace::add_sink(fr);
  auto world = meshrt::make_inproc_world(1);
  fr->register_comm(world[0]->info());
  std::vector<float> x(1024, 1.0f);
  meshrt::trace::Scope scope("MLP.fc2", meshrt::trace::Phase::kBackward);
  for (int i = 0; i < 2000; ++i) world[0]->all_reduce(meshrt::view(x, {32, 32}))->wait();
  meshrt::trace::remove_sink(fr.get());
  return fr;
}

void BM_RenderDump(benchmark::State& state) {
  auto fr = filled_recorder("");
  const auto format = state.range(0) == 0 ? DumpFormat::kJson : DumpFormat::kPickle;
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string dump = fr->render(0, format, DumpReason::kApi, nullptr);
    bytes = dump.size();
    benchmark::DoNotOptimize(dump.data());
  }
  state.SetLabel(format == DumpFormat::kJson ? "json" : "pickle");
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderDump)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_DumpToFile(benchmark::State& state) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("fr_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto fr = filled_recorder((dir / "fr_").string());
  for (auto _ : state) benchmark::DoNotOptimize(fr->dump(DumpReason::kApi).size());
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_DumpToFile)->Unit(benchmark::kMillisecond);

}  // namespace
