// Issue #16's fault matrix (docs/reliability.md): real 4-rank jobs under meshrun on a 2 x 2 mesh
// (tests/fault_worker.cc), one rank going wrong in step 3. For each case: the job ends within the
// op timeout + 5 s of the fault, every surviving rank (and a crashed one, through its signal
// handler) leaves a dump, meshrun's summary names the first failure, meshtrace's root causes
// name the culprit and no other rank, and no process is left behind.
#include <dirent.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kOpTimeout = 2s;

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Pids of live processes whose command line contains `marker`.
std::vector<int> processes_with(const std::string& marker) {
  std::vector<int> pids;
  DIR* proc = ::opendir("/proc");
  while (dirent* e = ::readdir(proc)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    std::string cmdline = read_all(fmt::format("/proc/{}/cmdline", pid));
    if (cmdline.find(marker) != std::string::npos) pids.push_back(pid);
  }
  ::closedir(proc);
  return pids;
}

// The culprit ranks of meshtrace's root causes in meshrun's summary ("culprit rank 3" lines
// between "Root causes:" and "Consequences").
std::set<int> root_culprits(const std::string& err) {
  std::set<int> ranks;
  const auto start = err.find("Root causes:");
  if (start == std::string::npos) return ranks;
  const auto end = err.find("Consequences", start);
  std::istringstream in(err.substr(start, end == std::string::npos ? end : end - start));
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("culprit rank");
    if (at == std::string::npos) continue;
    std::string list = line.substr(at + std::string("culprit rank").size());
    for (char& c : list) {
      if (!std::isdigit(static_cast<unsigned char>(c))) c = ' ';
    }
    std::istringstream nums(list);
    for (int r; nums >> r;) ranks.insert(r);
  }
  return ranks;
}

struct JobRun {
  int exit_code = -1;
  std::string err;
  std::optional<Clock::duration> fault_to_end;  // From rank 3's "step 3" to meshrun's exit.
  fs::path attempt_dir;
  std::vector<int> left_behind;
};

JobRun run_case(const std::string& mode) {
  static std::atomic<int> n{0};
  const std::string marker = fmt::format("faults-test-{}-{}", ::getpid(), n++);
  const fs::path dir = fs::temp_directory_path() / marker;
  fs::create_directories(dir);
  const fs::path out = dir / "meshrun.out", err = dir / "meshrun.err";
  std::vector<std::string> argv = {MESHRT_MESHRUN,
                                   "--standalone",
                                   "--nproc-per-node",
                                   "4",
                                   "--log-dir",
                                   (dir / "logs").string(),
                                   "--tee",
                                   "3",
                                   MESHRT_FAULT_WORKER,
                                   mode,
                                   marker};
  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::setenv("MESHRT_TIMEOUT_MS", std::to_string(kOpTimeout.count() * 1000).c_str(), 1);
    ::setenv("MESHRT_INIT_TIMEOUT_MS", "30000", 1);
    ::setenv("MESHRT_MESHTRACE", MESHRT_MESHTRACE, 1);
    ::setenv("MESHRT_STALL_S", "0", 1);  // The live monitor is not under test here.
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    _exit(127);
  }
  JobRun run;
  std::optional<Clock::time_point> fault_at;
  int status = 0;
  const auto deadline = start + 60s;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (!fault_at && read_all(out).find("[rank3]: step 3") != std::string::npos) {
      fault_at = Clock::now();
    }
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  if (fault_at) run.fault_to_end = Clock::now() - *fault_at;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = read_all(err);
  run.attempt_dir = dir / "logs" / "attempt_0";
  std::this_thread::sleep_for(200ms);
  run.left_behind = processes_with(marker);
  for (const int p : run.left_behind) ::kill(p, SIGKILL);
  return run;
}

struct Case {
  std::string mode;
  std::set<int> culprits;     // meshtrace's root causes.
  std::set<int> dumps;        // Ranks whose dump must exist.
  std::string first_failure;  // In the summary's "first failure:" line.
};

class Faults : public ::testing::TestWithParam<Case> {};

TEST_P(Faults, EndInTimeWithDumpsTheCulpritAndNoProcessLeft) {
  const Case& c = GetParam();
  const JobRun run = run_case(c.mode);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  ASSERT_TRUE(run.fault_to_end.has_value()) << "rank 3 never reached step 3\n" << run.err;
  const double seconds = std::chrono::duration<double>(*run.fault_to_end).count();
  std::printf("%s: fault to job end %.1f s\n", c.mode.c_str(), seconds);
  EXPECT_LE(*run.fault_to_end, kOpTimeout + 5s) << run.err;
  for (const int r : c.dumps) {
    const auto dump = nlohmann::json::parse(
        read_all(run.attempt_dir / fmt::format("fr_trace_{}", r)), nullptr, false);
    EXPECT_FALSE(dump.is_discarded()) << "rank " << r << "'s dump\n" << run.err;
  }
  EXPECT_NE(run.err.find("first failure: " + c.first_failure), std::string::npos) << run.err;
  EXPECT_EQ(root_culprits(run.err), c.culprits) << run.err;
  EXPECT_EQ(run.left_behind, std::vector<int>{});
}

const std::set<int> kAll = {0, 1, 2, 3};
const std::set<int> kSurvivors = {0, 1, 2};

INSTANTIATE_TEST_SUITE_P(
    Matrix, Faults,
    ::testing::Values(Case{"kill9", {3}, kSurvivors, "rank 3 (node 0"},
                      Case{"user_hang", {3}, kAll, "rank "},
                      Case{"exit0", {3}, kSurvivors, "rank "}, Case{"wrong_op", {3}, kAll, "rank "},
                      Case{"sizes", {3}, kAll, "rank "}, Case{"p2p", {2}, kAll, "rank "},
                      Case{"segv", {3}, kAll, "rank 3 (node 0"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.mode; });

}  // namespace
