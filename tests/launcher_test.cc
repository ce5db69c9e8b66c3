// meshrun end to end: real meshrun processes start real ranks (launcher_child, mesh_demo) on
// loopback; the tests check exit statuses, the ranks' output and environment, the summary, the
// gathered dumps, and that no process is left behind.
#include <dirent.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/post_mortem.h"
#include "launcher/rank_status.h"
#include "runtime/error.h"
#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"
#include "runtime/watchdog.h"
#include "tests/process_harness.h"

#if !defined(MESHRT_MESHRUN) || !defined(MESHRT_LAUNCHER_CHILD) || !defined(MESHRT_MESH_DEMO)
#error "MESHRT_MESHRUN, MESHRT_LAUNCHER_CHILD and MESHRT_MESH_DEMO must name the binaries"
#endif

namespace meshrt::testing {
namespace {

// meshrun recognises the watchdog's exit status without including the runtime's watchdog.
static_assert(launcher::kWatchdogExitCode == meshrt::kWatchdogExitCode);

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/launcher-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// An argv entry unique to this test, to find its processes in /proc.
std::string unique_marker() {
  static std::atomic<int> n{0};
  return fmt::format("marker=launcher-test-{}-{}", ::getpid(), n++);
}

// Pids of live processes whose command line contains `marker` (zombies have none).
std::vector<int> processes_with(const std::string& marker) {
  std::vector<int> pids;
  DIR* proc = ::opendir("/proc");
  while (dirent* e = ::readdir(proc)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (contains(read_all(fmt::format("/proc/{}/cmdline", pid)), marker)) pids.push_back(pid);
  }
  ::closedir(proc);
  return pids;
}

// Waits up to `limit` for every process carrying `marker` to be gone; returns the survivors.
std::vector<int> survivors(const std::string& marker, std::chrono::milliseconds limit = 5s) {
  const auto deadline = Clock::now() + limit;
  std::vector<int> left = processes_with(marker);
  while (!left.empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    left = processes_with(marker);
  }
  for (int pid : left) ::kill(pid, SIGKILL);  // Do not leak them into the next test.
  return left;
}

// How a meshrun process ended.
struct Outcome {
  int exit_code = -1;  // -1 when killed by a signal.
  int signal = 0;
  std::string out;
  std::string err;
  Clock::duration elapsed{};
};

// One meshrun process with its stdout and stderr in files; killed (SIGKILL) if still running
// when the handle goes away.
class Meshrun {
 public:
  explicit Meshrun(const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& env = {}) {
    out_path_ = dir_.path() + "/stdout";
    err_path_ = dir_.path() + "/stderr";
    std::vector<std::string> argv = {MESHRT_MESHRUN};
    argv.insert(argv.end(), args.begin(), args.end());
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(out_path_.c_str(), "w", stdout);
      std::freopen(err_path_.c_str(), "w", stderr);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      _exit(127);
    }
  }
  ~Meshrun() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  std::string out() const { return read_all(out_path_); }

  // Waits until stdout holds `n` copies of `text`; false after `limit`.
  bool wait_for_output(const std::string& text, size_t n, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (count(out(), text) < n) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }

  // Waits for meshrun to exit; SIGKILLs it after `limit` (then reported as signal 9).
  Outcome wait(std::chrono::milliseconds limit) {
    Outcome o;
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
    o.elapsed = Clock::now() - start_;
    if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
    o.out = read_all(out_path_);
    o.err = read_all(err_path_);
    // A failed job without --log-dir keeps its summary in a fresh /tmp/meshrun-* directory.
    const std::string saved = "meshrun: summary saved in /tmp/meshrun-";
    if (const auto at = o.err.find(saved); at != std::string::npos) {
      const auto start = at + saved.size() - std::string("/tmp/meshrun-").size();
      fs::remove_all(fs::path(o.err.substr(start, o.err.find('\n', at) - start)).parent_path());
    }
    return o;
  }

 private:
  TempDir dir_;
  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = -1;
  Clock::time_point start_;
};

Outcome run_meshrun(const std::vector<std::string>& args, std::chrono::milliseconds limit,
                    const std::map<std::string, std::string>& env = {}) {
  return Meshrun(args, env).wait(limit);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

const std::map<std::string, std::string> kInitEnv = {{"MESHRT_INIT_TIMEOUT_MS", "30000"}};

TEST(Meshrun, OneNodeFourRanksGetTheirEnvironmentAndInitTheWorld) {
  TempDir logs;
  const auto r =
      run_meshrun({"--standalone", "--rdzv-id", "one", "--nproc-per-node", "4", "--log-dir",
                   logs.path(), "--tee", MESHRT_LAUNCHER_CHILD, "env", "world"},
                  60s, kInitEnv);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& line : lines_of(r.out)) EXPECT_EQ(line.rfind("[rank", 0), 0u) << line;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string env = fmt::format(
        "env RANK={0} LOCAL_RANK={0} WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 GROUP_RANK=0 ROLE_RANK={0} "
        "GROUP_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MESHRT_STORE_EXTERNAL=1 MESHRT_RUN_ID=one "
        "TORCHELASTIC_RUN_ID=one MESHRT_RESTART_COUNT=0 TORCHELASTIC_RESTART_COUNT=0 "
        "MESHRT_LOG_DIR={1} MESHRT_DUMP_PREFIX={1}/attempt_0/fr_trace_",
        rank, logs.path());
    const std::string ok = fmt::format("world ok rank={} size=4 sum=10", rank);
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: {}\n", rank, env))) << r.out;
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: {}\n", rank, ok))) << r.out;
    // The log file has the same lines, without the prefix.
    const std::string log = read_all(fmt::format("{}/attempt_0/rank_{}.log", logs.path(), rank));
    EXPECT_TRUE(contains(log, env + "\n")) << log;
    EXPECT_TRUE(contains(log, ok + "\n")) << log;
  }
}

TEST(Meshrun, LogDirWithoutTeeSendsOutputToFilesOnly) {
  TempDir logs;
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                              MESHRT_LAUNCHER_CHILD, "print=to stdout", "eprint=to stderr"},
                             30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = read_all(fmt::format("{}/attempt_0/rank_{}.log", logs.path(), rank));
    EXPECT_TRUE(contains(log, "to stdout\n")) << log;
    EXPECT_TRUE(contains(log, "to stderr\n")) << log;
  }
}

TEST(Meshrun, TwoNodesOnLoopbackRunATwoByTwoMesh) {
  // Two agents, neither told its node rank: the one that hosts the store becomes node 0.
  const std::vector<std::string> args = {"--nnodes",
                                         "2",
                                         "--nproc-per-node",
                                         "2",
                                         "--rdzv-endpoint",
                                         fmt::format("127.0.0.1:{}", free_port()),
                                         "--rdzv-id",
                                         "mesh2x2",
                                         "--rdzv-timeout",
                                         "30",
                                         MESHRT_MESH_DEMO,
                                         "--mesh",
                                         "2x2",
                                         "--names",
                                         "dp,tp",
                                         "--flatten",
                                         "dp,tp:world2d",
                                         "--print-groups"};
  Meshrun a(args, kInitEnv), b(args, kInitEnv);
  const Outcome ra = a.wait(90s), rb = b.wait(90s);
  ASSERT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.out << rb.err;

  const std::map<int, std::pair<std::vector<int>, std::map<std::string, std::vector<int>>>> want = {
      {0, {{0, 0}, {{"dp", {0, 2}}, {"tp", {0, 1}}, {"world2d", {0, 1, 2, 3}}}}},
      {1, {{0, 1}, {{"dp", {1, 3}}, {"tp", {0, 1}}, {"world2d", {0, 1, 2, 3}}}}},
      {2, {{1, 0}, {{"dp", {0, 2}}, {"tp", {2, 3}}, {"world2d", {0, 1, 2, 3}}}}},
      {3, {{1, 1}, {{"dp", {1, 3}}, {"tp", {2, 3}}, {"world2d", {0, 1, 2, 3}}}}},
  };
  std::vector<std::set<int>> ranks_of_agent(2);
  for (int agent = 0; agent < 2; ++agent) {
    for (const auto& line : lines_of(agent == 0 ? ra.out : rb.out)) {
      const auto brace = line.find("]: {");
      if (brace == std::string::npos) continue;
      const auto j = nlohmann::json::parse(line.substr(brace + 3));
      const int rank = j["rank"].get<int>();
      EXPECT_EQ(line.rfind(fmt::format("[rank{}]: ", rank), 0), 0u) << line;
      EXPECT_EQ(j["coordinate"].get<std::vector<int>>(), want.at(rank).first);
      EXPECT_EQ((j["groups"].get<std::map<std::string, std::vector<int>>>()), want.at(rank).second);
      ranks_of_agent[agent].insert(rank);
    }
  }
  // Node 0 runs ranks 0-1 and node 1 ranks 2-3, whichever agent became node 0.
  const std::set<std::set<int>> got = {ranks_of_agent[0], ranks_of_agent[1]};
  EXPECT_EQ(got, (std::set<std::set<int>>{{0, 1}, {2, 3}})) << ra.out << rb.out;
}

TEST(Meshrun, CrashingRankStopsTheJobWithASummaryAndLeavesNoProcess) {
  const std::string marker = unique_marker();
  // Rank 2 exits 3; rank 0 ignores SIGTERM (so it needs SIGKILL after the grace period); every
  // rank has a helper process in its group that must go too.
  const auto r = run_meshrun(
      {"--standalone", "--nproc-per-node", "4", "--grace-period", "1", MESHRT_LAUNCHER_CHILD,
       marker, "helper", "world", "exit=3@2", "ignore-term@0", "sleep=60"},
      60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.elapsed, 30s);
  EXPECT_TRUE(contains(r.err, "meshrun: job failed (run '")) << r.err;
  EXPECT_TRUE(contains(r.err, "first failure: rank 2 (node 0 on host ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 3 at 20")) << r.err;
  const std::map<int, std::string> status = {{0, "stopped by meshrun (SIGKILL)"},
                                             {1, "stopped by meshrun (SIGTERM)"},
                                             {2, "exited with code 3  <- first failure"},
                                             {3, "stopped by meshrun (SIGTERM)"}};
  for (const auto& [rank, text] : status) {
    const auto line = r.err.find(fmt::format("  rank {} (node 0, local rank {}, pid ", rank, rank));
    ASSERT_NE(line, std::string::npos) << r.err;
    EXPECT_EQ(r.err.substr(r.err.find("): ", line) + 3, text.size() + 1), text + "\n") << r.err;
  }
  EXPECT_TRUE(contains(r.err, "logs: on the console above")) << r.err;
  EXPECT_TRUE(contains(r.err, "flight recorder: no rank wrote a dump")) << r.err;
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, KilledAgentTakesItsRanksAlong) {
  const std::string marker = unique_marker();
  TempDir logs;  // A killed meshrun cleans nothing up.
  Meshrun m({"--standalone", "--nproc-per-node", "3", "--log-dir", logs.path(), "--tee",
             MESHRT_LAUNCHER_CHILD, marker, "print=ready", "sleep=60"});
  ASSERT_TRUE(m.wait_for_output("ready", 3, 20s)) << m.out();
  EXPECT_EQ(processes_with(marker).size(), 4u);  // meshrun and its 3 ranks.
  ::kill(m.pid(), SIGKILL);
  EXPECT_EQ(m.wait(10s).signal, SIGKILL);
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, SigintReachesEveryRank) {
  const std::string marker = unique_marker();
  Meshrun m({"--standalone", "--nproc-per-node", "2", MESHRT_LAUNCHER_CHILD, marker,
             "report-signals", "print=ready", "sleep=60"});
  ASSERT_TRUE(m.wait_for_output("ready", 2, 20s)) << m.out();
  ::kill(m.pid(), SIGINT);
  const Outcome r = m.wait(20s);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank0]: got SIGINT\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank1]: got SIGINT\n")) << r.out;
  EXPECT_TRUE(contains(r.err, "received SIGINT")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited 0 after meshrun sent SIGINT")) << r.err;
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, SecondSigintKillsRanksThatIgnoreTheFirst) {
  const std::string marker = unique_marker();
  Meshrun m({"--standalone", "--nproc-per-node", "2", "--grace-period", "60", MESHRT_LAUNCHER_CHILD,
             marker, "ignore-int", "print=ready", "sleep=60"});
  ASSERT_TRUE(m.wait_for_output("ready", 2, 20s)) << m.out();
  ::kill(m.pid(), SIGINT);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(processes_with(marker).size(), 3u);  // The ranks ignored it.
  const auto second = Clock::now();
  ::kill(m.pid(), SIGINT);
  const Outcome r = m.wait(20s);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_LT(Clock::now() - second, 10s);
  EXPECT_EQ(count(r.err, "stopped by meshrun (SIGKILL)"), 2u) << r.err;
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, FailureOnNodeOneStopsBothNodesAndNodeZeroGathersEveryDump) {
  const std::string marker = unique_marker();
  TempDir logs0, logs1;
  // Rank 3 (node 1) triggers the flight recorder, dumps and dies by SIGSEGV. The others see
  // the trigger and dump one second later or more: only a launcher that waits gets them all.
  const std::vector<std::string> child = {
      MESHRT_LAUNCHER_CHILD, marker,    "dump-signal@3",  "dump@3", "signal=11@3",
      "wait-dump-signal",    "sleep=1", "sleep-rank=0.2", "dump",   "sleep=60"};
  auto args_for = [&](int node, const std::string& dir, const std::string& port) {
    std::vector<std::string> a = {"--nnodes",         "2",
                                  "--nproc-per-node", "2",
                                  "--node-rank",      std::to_string(node),
                                  "--rdzv-endpoint",  "127.0.0.1:" + port,
                                  "--rdzv-id",        "fail2n",
                                  "--rdzv-timeout",   "30",
                                  "--grace-period",   "2",
                                  "--log-dir",        dir};
    a.insert(a.end(), child.begin(), child.end());
    return a;
  };
  const std::string port = std::to_string(free_port());
  std::map<std::string, std::string> env = kInitEnv;
#ifdef MESHRT_MESHTRACE_BIN
  env["MESHRT_MESHTRACE"] = MESHRT_MESHTRACE_BIN;
#else
  env["MESHRT_MESHTRACE"] = logs0.path() + "/no-meshtrace-here";
#endif
  Meshrun node0(args_for(0, logs0.path(), port), env), node1(args_for(1, logs1.path(), port), env);
  const Outcome r0 = node0.wait(60s), r1 = node1.wait(60s);
  EXPECT_EQ(r0.exit_code, 1) << r0.err;
  EXPECT_EQ(r1.exit_code, 1) << r1.err;
  for (const Outcome* r : {&r0, &r1}) {
    EXPECT_TRUE(contains(r->err, "first failure: rank 3 (node 1 on host ")) << r->err;
    EXPECT_TRUE(contains(r->err, "killed by SIGSEGV")) << r->err;
    EXPECT_TRUE(contains(r->err, "  rank 0 (node 0, local rank 0, pid ")) << r->err;
    EXPECT_TRUE(contains(r->err, "  rank 2 (node 1, local rank 0, pid ")) << r->err;
    EXPECT_EQ(count(r->err, "stopped by meshrun (SIGTERM)"), 3u) << r->err;
    EXPECT_TRUE(contains(r->err, logs0.path() + "/attempt_0/rank_<rank>.log")) << r->err;
    EXPECT_TRUE(contains(r->err, logs1.path() + "/attempt_0/rank_<rank>.log")) << r->err;
  }
  EXPECT_TRUE(contains(r1.err, "flight recorder: dumps are gathered on node 0")) << r1.err;
  EXPECT_TRUE(contains(r0.err, fmt::format("flight recorder: dumps of ranks 0-3 in "
                                           "{}/attempt_0/fr_trace_<rank>",
                                           logs0.path())))
      << r0.err;
  for (int rank = 0; rank < 4; ++rank) {
    const auto path = fmt::format("{}/attempt_0/fr_trace_{}", logs0.path(), rank);
    const auto dump = nlohmann::json::parse(read_all(path), nullptr, false);
    ASSERT_FALSE(dump.is_discarded()) << path;
    EXPECT_EQ(dump["rank"], rank);
    EXPECT_EQ(dump["run_id"], "fail2n");
    // Node 1's ranks wrote theirs on node 1; node 0 got them through the store.
    EXPECT_EQ(fs::exists(fmt::format("{}/attempt_0/fr_trace_{}", logs1.path(), rank)), rank >= 2);
  }
#ifdef MESHRT_MESHTRACE_BIN
  EXPECT_TRUE(contains(r0.err, "analysis (" MESHRT_MESHTRACE_BIN " analyze ")) << r0.err;
  EXPECT_FALSE(contains(r0.err, "exit status 2")) << r0.err;
#else
  EXPECT_TRUE(contains(r0.err, "analysis: meshtrace not found")) << r0.err;
#endif
  EXPECT_TRUE(contains(read_all(logs0.path() + "/summary.txt"), "first failure: rank 3"));
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, RestartsWithTheSameRunIdUntilAnAttemptSucceeds) {
  // Every rank fails in attempts 0 and 1, before joining the world.
  const auto r =
      run_meshrun({"--standalone", "--rdzv-id", "again", "--nproc-per-node", "2", "--max-restarts",
                   "2", MESHRT_LAUNCHER_CHILD, "env", "exit-below-attempt=2", "world"},
                  60s, kInitEnv);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "meshrun: attempt 0 failed: rank ")) << r.err;
  EXPECT_TRUE(contains(r.err, "restarting (attempt 3 of at most 3)")) << r.err;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const size_t lines = count(r.out, fmt::format("MESHRT_RUN_ID=again TORCHELASTIC_RUN_ID=again "
                                                  "MESHRT_RESTART_COUNT={0} "
                                                  "TORCHELASTIC_RESTART_COUNT={0} ",
                                                  attempt));
    // In a failed attempt the first rank to exit stops the other, maybe before it printed.
    EXPECT_GE(lines, attempt < 2 ? 1u : 2u) << r.out;
    EXPECT_LE(lines, 2u) << r.out;
  }
  EXPECT_TRUE(contains(r.out, "[rank1]: world ok rank=1 size=2 sum=3\n")) << r.out;
}

TEST(Meshrun, GivesUpAfterMaxRestarts) {
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                              MESHRT_LAUNCHER_CHILD, "exit-below-attempt=5"},
                             30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count(r.err, "restarting"), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "job failed (run '")) << r.err;
  EXPECT_TRUE(contains(r.err, "', attempt 2 of at most 2)")) << r.err;
}

TEST(Meshrun, BadFlagsAreOneLineAndExitStatusTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {"--bogus", "/bin/true"},
      {"--nproc-per-node", "abc", "/bin/true"},
      {"--nproc-per-node", "0", "/bin/true"},
      {"--nnodes"},
      {"--standalone"},
      {"--rdzv-endpoint", "127.0.0.1:99999", "/bin/true"},
      {"--standalone", "--master-port", "5", "/bin/true"},
      {"--nnodes", "2", "--node-rank", "2", "/bin/true"},
      {"--rdzv-endpoint", "h:1", "--master-addr", "h", "/bin/true"},
  };
  for (const auto& args : bad) {
    const auto r = run_meshrun(args, 10s);
    EXPECT_EQ(r.exit_code, 2) << fmt::format("{}", fmt::join(args, " ")) << "\n" << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("meshrun: ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
  const auto help = run_meshrun({"--help"}, 10s);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "Usage: meshrun [OPTIONS] PROGRAM [ARGS...]")) << help.out;
  for (const char* flag : {"--nnodes", "--nproc-per-node", "--node-rank", "--rdzv-endpoint",
                           "--master-addr", "--master-port", "--rdzv-id", "--max-restarts",
                           "--monitor-interval", "--log-dir", "--tee", "--standalone"}) {
    EXPECT_TRUE(contains(help.out, flag)) << flag;
  }
  // Flags after PROGRAM are the program's.
  const auto passed = run_meshrun({"--standalone", "/bin/echo", "--nnodes", "--bogus"}, 10s);
  EXPECT_EQ(passed.exit_code, 0) << passed.err;
  EXPECT_EQ(passed.out, "[rank0]: --nnodes --bogus\n");
}

TEST(Meshrun, RendezvousTimeoutNamesTheMissingNodes) {
  const auto r =
      run_meshrun({"--nnodes", "3", "--rdzv-endpoint", fmt::format("127.0.0.1:{}", free_port()),
                   "--rdzv-timeout", "1", MESHRT_LAUNCHER_CHILD},
                  20s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "timed out after 1.0 s: node(s) 1, 2 of 3 missing")) << r.err;
  EXPECT_LT(r.elapsed, 10s);
}

TEST(Meshrun, HangEndsInAWatchdogTimeoutWithEveryDumpAndAVerdict) {
#ifndef MESHRT_HANG_EXAMPLE
  GTEST_SKIP() << "needs the hang example (MESHRT_HANG_EXAMPLE) and the flight recorder";
#else
  TempDir logs;
  std::map<std::string, std::string> env = kInitEnv;
  env["MESHRT_TIMEOUT_MS"] = "2000";
#ifdef MESHRT_MESHTRACE_BIN
  env["MESHRT_MESHTRACE"] = MESHRT_MESHTRACE_BIN;
#endif
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "4", "--log-dir", logs.path(),
                              "--dump-timeout", "20", MESHRT_HANG_EXAMPLE},
                             90s, env);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 70")) << r.err;
  EXPECT_TRUE(contains(r.err, "flight recorder: dumps of ranks 0-3 in ")) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    const auto dump = nlohmann::json::parse(
        read_all(fmt::format("{}/attempt_0/fr_trace_{}", logs.path(), rank)), nullptr, false);
    ASSERT_FALSE(dump.is_discarded()) << rank;
    EXPECT_EQ(dump["rank"], rank);
  }
  // meshtrace found a problem (exit status 1) and its verdict ends the summary.
  EXPECT_TRUE(contains(r.err, " --prefix fr_trace_, exit status 1):\n  ")) << r.err;
  EXPECT_EQ(survivors(MESHRT_HANG_EXAMPLE), std::vector<int>{});
#endif
}

TEST(DumpTransfer, DumpsLargerThanOneStoreValueArriveWhole) {
  // 40 MiB: three chunks, more than the store's 16 MiB value limit set here.
  TcpStoreServerOptions so;
  so.max_value_bytes = size_t{16} << 20;
  TcpStoreServer server(so);
  TcpStoreOptions co;
  co.port = server.port();
  TcpStore store(co);
  std::string dump(size_t{40} << 20, '\0');
  for (size_t i = 0; i < dump.size(); ++i) dump[i] = static_cast<char>(i * 7 + i / 4096);
  launcher::publish_dump(store, 2, 5, dump);
  const std::string got = launcher::fetch_dump(store, 2, 5, 1s);
  EXPECT_EQ(got.size(), dump.size());
  EXPECT_TRUE(got == dump);  // Not EXPECT_EQ: it would print 80 MiB on a failure.
  EXPECT_THROW(launcher::fetch_dump(store, 2, 6, 100ms), Error);
}

}  // namespace
}  // namespace meshrt::testing
