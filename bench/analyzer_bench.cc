// meshtrace analyze on a job of 1024 ranks x 2000 records (targets: <= 3 s end to end, <= 50 ms
// to load one dump). The job is a pp 4 x dp 32 x tp 8 mesh running pipelined training steps
// (p2p between stages, tp and dp collectives, a world all_reduce) long enough for every ring to
// wrap, with one hang injected at the end: rank 6 waits in a dp all_gather nobody else calls, so
// its tp group waits for it. Dumps are generated once into a temp dir and removed at exit, or
// kept in $MESHTRACE_BENCH_DIR when set (to time the CLI: meshtrace analyze $MESHTRACE_BENCH_DIR).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_fixtures.h"

namespace {

namespace fs = std::filesystem;
using meshrt::testing::FrDump;
using meshrt::testing::FrEntry;
using meshrt::testing::FrGroup;

constexpr int kPp = 4, kDp = 32, kTp = 8, kWorld = kPp * kDp * kTp;
constexpr size_t kRing = 2000;
constexpr int kHungRank = 6;

int rank_of(int pp, int dp, int tp) { return (pp * kDp + dp) * kTp + tp; }

// One rank's program, numbered the way meshrt numbers it.
class RankProgram {
 public:
  explicit RankProgram(int rank) : pp_(rank / (kDp * kTp)), dp_(rank / kTp % kDp), tp_(rank % kTp) {
    dump_.rank = rank;
    dump_.world_size = kWorld;
    std::vector<int> world(kWorld), tp, dp, pp;
    for (int r = 0; r < kWorld; ++r) world[r] = r;
    for (int t = 0; t < kTp; ++t) tp.push_back(rank_of(pp_, dp_, t));
    for (int d = 0; d < kDp; ++d) dp.push_back(rank_of(pp_, d, tp_));
    for (int p = 0; p < kPp; ++p) pp.push_back(rank_of(p, dp_, tp_));
    dump_.groups = {{"world", "default_pg", world, std::nullopt},
                    {"mesh0/tp", "mesh_tp", tp, "tp"},
                    {"mesh0/dp", "mesh_dp", dp, "dp"},
                    {"mesh0/pp", "mesh_pp", pp, "pp"}};
  }

  void step(int64_t clock_ns) {
    clock_ns_ = clock_ns;
    for (int mb = 0; mb < 2; ++mb) {
      if (pp_ > 0) p2p("recv", rank_of(pp_ - 1, dp_, tp_), pp_ - 1);
      collective("mesh0/tp", "all_reduce", 4096);
      collective("mesh0/tp", "all_gather", 1024);
      collective("mesh0/tp", "all_reduce", 4096);
      if (pp_ < kPp - 1) p2p("send", rank_of(pp_ + 1, dp_, tp_), pp_ + 1);
    }
    collective("mesh0/tp", "reduce_scatter", 2048);
    collective("mesh0/dp", "reduce_scatter", 1 << 20);
    collective("mesh0/dp", "all_gather", 1 << 16);
    collective("world", "all_reduce", 1);
  }

  // The hang: rank 6 waits in a dp all_gather; its tp group waits for it in an all_reduce.
  void hang(int64_t clock_ns) {
    clock_ns_ = clock_ns;
    if (dump_.rank == kHungRank) {
      collective("mesh0/dp", "all_gather", 64).state = "started";
    } else if (pp_ == 0 && dp_ == 0) {
      collective("mesh0/tp", "all_reduce", 4096).state = "started";
    }
  }

  const FrDump& finish() {
    if (dump_.entries.size() > kRing) {
      const auto dropped = static_cast<int64_t>(dump_.entries.size() - kRing);
      dump_.entries.erase(dump_.entries.begin(), dump_.entries.begin() + dropped);
      dump_.records_dropped = dropped;
      dump_.first_record_id = dropped;
    }
    return dump_;
  }

 private:
  FrEntry& add(const std::string& group, FrEntry e) {
    e.group = group;
    e.op_id = ++op_id_[group];
    e.time_created_ns = clock_ns_ += 1000;
    dump_.entries.push_back(std::move(e));
    return dump_.entries.back();
  }

  FrEntry& collective(const std::string& group, const std::string& type, int64_t numel) {
    const int64_t k = group == "mesh0/tp" ? kTp : group == "mesh0/dp" ? kDp : kWorld;
    FrEntry e;
    e.type = type;
    e.collective_seq = ++collective_seq_[group];
    e.p2p_seq = p2p_seq_[group];
    e.input_sizes = {{type == "reduce_scatter" ? numel * k : numel}};
    e.output_sizes = {{type == "all_gather" ? numel * k : numel}};
    e.input_dtypes = {"BFloat16"};
    e.output_dtypes = {"BFloat16"};
    return add(group, std::move(e));
  }

  void p2p(const std::string& type, int peer, int peer_stage) {
    const bool send = type == "send";
    FrEntry e;
    e.type = type;
    e.meta = fmt::format("{}{}{}", pp_, send ? "->" : "<-", peer_stage);
    e.is_p2p = true;
    e.peer = peer;
    e.collective_seq = collective_seq_["mesh0/pp"];
    e.p2p_seq = ++p2p_seq_["mesh0/pp"];
    e.channel_seq = ++channel_seq_[{send, peer}];
    (send ? e.input_sizes : e.output_sizes) = {{8192}};
    (send ? e.input_dtypes : e.output_dtypes) = {"BFloat16"};
    add("mesh0/pp", std::move(e));
  }

  int pp_, dp_, tp_;
  FrDump dump_;
  int64_t clock_ns_ = 0;
  std::map<std::string, int64_t> collective_seq_, p2p_seq_, op_id_;
  std::map<std::pair<bool, int>, int64_t> channel_seq_;
};

// The job's dumps on disk, generated on first use.
class Job {
 public:
  static const Job& get() {
    static const Job job;
    return job;
  }
  ~Job() {
    if (!keep_) fs::remove_all(dir);
  }

  fs::path dir;
  size_t bytes = 0;

 private:
  Job() {
    if (const char* keep = std::getenv("MESHTRACE_BENCH_DIR")) {
      dir = keep;
      keep_ = true;
      fs::create_directories(dir);
    } else {
      char tmpl[] = "/tmp/meshtrace-bench-XXXXXX";
      dir = ::mkdtemp(tmpl);
    }
    constexpr int kSteps = 175;  // 2100-2450 records per rank: every ring wraps.
    for (int r = 0; r < kWorld; ++r) {
      RankProgram program(r);
      for (int s = 0; s < kSteps; ++s)
        program.step(1'700'000'000'000'000'000 + s * 1'000'000'000LL);
      program.hang(1'700'000'000'000'000'000 + kSteps * 1'000'000'000LL);
      const std::string text = meshrt::testing::to_json(program.finish());
      bytes += text.size();
      std::ofstream(dir / fmt::format("fr_{}", r)) << text;
    }
  }

  bool keep_ = false;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void BM_ParseOneDump(benchmark::State& state) {
  const std::string bytes = read_file(Job::get().dir / "fr_6");
  for (auto _ : state) {
    const auto dump = meshrt::trace::parse_dump(bytes, 6);
    benchmark::DoNotOptimize(dump.entries.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes.size()));
  state.counters["entries"] =
      static_cast<double>(meshrt::trace::parse_dump(bytes, 6).entries.size());
}
BENCHMARK(BM_ParseOneDump)->Unit(benchmark::kMillisecond);

// Reading the file too (page cache warm).
void BM_LoadOneDumpFile(benchmark::State& state) {
  const std::vector<meshrt::trace::DumpFile> files = {{Job::get().dir / "fr_6", 6}};
  for (auto _ : state) {
    const auto dumps = meshrt::trace::read_dumps(files, 1);
    benchmark::DoNotOptimize(dumps.data());
  }
}
BENCHMARK(BM_LoadOneDumpFile)->Unit(benchmark::kMillisecond);

// `meshtrace analyze DIR` minus printing: find, load (threads: 0 = one per core), match.
void BM_AnalyzeJob(benchmark::State& state) {
  const Job& job = Job::get();
  meshrt::trace::AnalyzeOptions options;
  options.threads = static_cast<unsigned>(state.range(0));
  size_t findings = 0, roots = 0;
  for (auto _ : state) {
    const auto report = meshrt::trace::analyze_directory(job.dir, options);
    findings = report.findings.size();
    roots = 0;
    for (const auto& f : report.findings) roots += f.root ? 1 : 0;
  }
  state.counters["ranks"] = kWorld;
  state.counters["GB"] = static_cast<double>(job.bytes) / 1e9;
  state.counters["findings"] = static_cast<double>(findings);
  state.counters["roots"] = static_cast<double>(roots);
}
BENCHMARK(BM_AnalyzeJob)
    ->Arg(0)
    ->Arg(1)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The matching alone (dumps already loaded), to split the end-to-end time.
void BM_MatchJob(benchmark::State& state) {
  const auto files = meshrt::trace::find_dump_files(Job::get().dir, "");
  for (auto _ : state) {
    state.PauseTiming();
    auto dumps = meshrt::trace::read_dumps(files);
    state.ResumeTiming();
    const auto report = meshrt::trace::analyze(std::move(dumps), {});
    benchmark::DoNotOptimize(report.findings.data());
  }
}
BENCHMARK(BM_MatchJob)->Iterations(3)->Unit(benchmark::kMillisecond);

// `meshtrace analyze DIR` as a user runs it, in a child: its peak RSS (ru_maxrss) against the
// bytes of the dumps it read (target: within 3x).
void BM_MeshtracePeakRss(benchmark::State& state) {
  const Job& job = Job::get();
  long peak_kb = 0;
  int status = -1;
  for (auto _ : state) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);
      ::execl(MESHRT_MESHTRACE, MESHRT_MESHTRACE, "analyze", job.dir.c_str(), nullptr);
      ::_exit(127);
    }
    struct rusage usage {};
    ::wait4(pid, &status, 0, &usage);
    peak_kb = usage.ru_maxrss;
  }
  state.counters["exit"] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  state.counters["peak_rss_MB"] = static_cast<double>(peak_kb) / 1024;
  state.counters["dump_MB"] = static_cast<double>(job.bytes) / (1 << 20);
  state.counters["rss_over_dumps"] = static_cast<double>(peak_kb) * 1024 / job.bytes;
}
BENCHMARK(BM_MeshtracePeakRss)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
