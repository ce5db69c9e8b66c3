// Issue #16's fault matrix (docs/reliability.md): real 4-rank jobs under meshrun on a 2 x 2 mesh
// (tests/fault_worker.cc), one rank going wrong in step 3. For each case: the job ends within the
// op timeout + 5 s of the fault, every surviving rank (and a crashed one, through its signal
// handler) leaves a dump, meshrun's summary names the first failure, meshtrace's root causes
// name the culprit and no other rank, and no process is left behind.
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
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_harness.h"

namespace {

using meshrt::testing::processes_with;

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

// Starts meshrun with `args` (output to `dir`/meshrun<tag>.{out,err}) and the test's variables.
pid_t start_meshrun(const std::vector<std::string>& args, const fs::path& dir,
                    const std::string& tag = "",
                    std::chrono::milliseconds op_timeout = kOpTimeout) {
  std::vector<std::string> argv = {MESHRT_MESHRUN};
  argv.insert(argv.end(), args.begin(), args.end());
  const fs::path out = dir / ("meshrun" + tag + ".out"), err = dir / ("meshrun" + tag + ".err");
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::setenv("MESHRT_TIMEOUT_MS", std::to_string(op_timeout.count()).c_str(), 1);
    ::setenv("MESHRT_INIT_TIMEOUT_MS", "30000", 1);
    ::setenv("MESHRT_MESHTRACE", MESHRT_MESHTRACE, 1);
    ::setenv("MESHRT_STALL_S", "0", 1);  // The live monitor is not under test here.
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    _exit(127);
  }
  return pid;
}

// Waits for `pid` up to `limit` (then SIGKILLs it); returns its exit code, -1 for a signal.
int wait_exit(pid_t pid, Clock::duration limit, const std::function<void()>& meanwhile = {}) {
  int status = 0;
  const auto deadline = Clock::now() + limit;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (meanwhile) meanwhile();
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string new_marker() {
  static std::atomic<int> n{0};
  return fmt::format("faults-test-{}-{}", ::getpid(), n++);
}

// The processes carrying `marker`, SIGKILLed (so that a failure leaks nothing into other tests).
std::vector<int> reap_left_behind(const std::string& marker) {
  std::this_thread::sleep_for(200ms);
  std::vector<int> left = processes_with(marker);
  for (const int p : left) ::kill(p, SIGKILL);
  return left;
}

JobRun run_case(const std::string& mode, std::chrono::milliseconds op_timeout,
                const std::vector<std::string>& meshrun_flags = {}) {
  const std::string marker = new_marker();
  const fs::path dir = fs::temp_directory_path() / marker;
  fs::create_directories(dir);
  std::vector<std::string> args = {
      "--standalone", "--nproc-per-node", "4", "--log-dir", (dir / "logs").string(), "--tee", "3"};
  args.insert(args.end(), meshrun_flags.begin(), meshrun_flags.end());
  args.insert(args.end(), {MESHRT_FAULT_WORKER, mode, marker});
  const pid_t pid = start_meshrun(args, dir, "", op_timeout);
  JobRun run;
  std::optional<Clock::time_point> fault_at;
  run.exit_code = wait_exit(pid, 60s, [&] {
    if (!fault_at && read_all(dir / "meshrun.out").find("[rank3]: step 3") != std::string::npos) {
      fault_at = Clock::now();
    }
  });
  if (fault_at) run.fault_to_end = Clock::now() - *fault_at;
  run.err = read_all(dir / "meshrun.err");
  run.attempt_dir = dir / "logs" / "attempt_0";
  run.left_behind = reap_left_behind(marker);
  return run;
}

struct Case {
  std::string mode;
  std::set<int> culprits;     // meshtrace's root causes.
  std::set<int> dumps;        // Ranks whose dump must exist.
  std::string first_failure;  // In the summary's "first failure:" line.
  std::string culprit_stack;  // In the verdict: the culprit's main-thread stack ("": not checked).
  // The op timeout; the job must end within kOpTimeout + 5 s of the fault even when it is longer
  // (a rank that left, or stopped, is found without waiting for the timeout).
  std::chrono::milliseconds op_timeout = kOpTimeout;
  std::string error;  // In meshrun's stderr (a rank's error naming the culprit; "": not checked).
};

class Faults : public ::testing::TestWithParam<Case> {};

TEST_P(Faults, EndInTimeWithDumpsTheCulpritAndNoProcessLeft) {
  const Case& c = GetParam();
  const JobRun run = run_case(c.mode, c.op_timeout);
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
  // The summary names the analysis's culprit up front, as the rank or beside the first failure.
  const std::string culprit_line =
      fmt::format("culprit: rank {}, named by the analysis below", *c.culprits.begin());
  if (run.err.find("first failure: rank " + std::to_string(*c.culprits.begin()) + " ") ==
      std::string::npos) {
    EXPECT_NE(run.err.find(culprit_line), std::string::npos) << run.err;
  }
  for (const std::string& text : {c.culprit_stack, c.error}) {
    if (!text.empty()) {
      EXPECT_NE(run.err.find(text), std::string::npos) << run.err;
    }
  }
  EXPECT_EQ(run.left_behind, std::vector<int>{});
  if (!HasFailure()) fs::remove_all(run.attempt_dir.parent_path().parent_path());
}

const std::set<int> kAll = {0, 1, 2, 3};
const std::set<int> kSurvivors = {0, 1, 2};

INSTANTIATE_TEST_SUITE_P(
    Matrix, Faults,
    ::testing::Values(
        Case{"kill9",
             {3},
             kSurvivors,
             "rank 3 (node 0",
             "",
             kOpTimeout,
             "no dump from rank 3: it was killed by SIGKILL before it could dump"},
        Case{"user_hang",
             {3},
             kAll,
             "rank ",
             "rank 3 main thread: run_rank (fault_worker.cc:",
             kOpTimeout,
             ""},
        Case{"exit0", {3}, kSurvivors, "rank ", "", kOpTimeout, ""},
        // The default 10-minute op timeout: rank 3's exit record ends its peers' wait at once
        // (rank 2's in tp all_reduce #3 or rank 1's in pp broadcast #3, whichever looks first).
        Case{"return",
             {3},
             kAll,
             "rank ",
             "",
             600s,
             "rank 3 has left: it returned from its program (at the end-of-run barrier) after "
             "'mesh0/"},
        Case{"sigstop",
             {3},
             kSurvivors,
             "rank ",
             "",
             kOpTimeout,
             "no dump from rank 3: meshrun found it stopped (SIGSTOP or a debugger) when the "
             "ranks dumped"},
        Case{"wrong_op", {3}, kAll, "rank ", "", kOpTimeout, ""},
        Case{"sizes", {3}, kAll, "rank ", "", kOpTimeout, ""},
        Case{"p2p", {2}, kAll, "rank ", "", kOpTimeout, ""},
        Case{"segv", {3}, kAll, "rank 3 (node 0", "", kOpTimeout, ""}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.mode; });

// The faults again under --on-rank-failure=continue, where a rank's death does not end the job:
// fault_worker does not repair, so each survivor fails on its dead peer and ends (its op fails
// at once: no dump, no watchdog exit), until none is left; a hang still ends in the watchdog's
// verdict as without continue. Either way the job ends within the op timeout + 5 s of the
// fault, fails, says what happened, and leaves no process.
struct ContinueCase {
  std::string mode;
  std::vector<std::string> says;  // In meshrun's stderr.
};

class FaultsContinue : public ::testing::TestWithParam<ContinueCase> {};

TEST_P(FaultsContinue, EndInTimeSayWhatHappenedAndLeaveNoProcess) {
  const ContinueCase& c = GetParam();
  const JobRun run = run_case(c.mode, kOpTimeout, {"--on-rank-failure=continue"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  ASSERT_TRUE(run.fault_to_end.has_value()) << "rank 3 never reached step 3\n" << run.err;
  std::printf("%s under continue: fault to job end %.1f s\n", c.mode.c_str(),
              std::chrono::duration<double>(*run.fault_to_end).count());
  EXPECT_LE(*run.fault_to_end, kOpTimeout + 5s) << run.err;
  for (const std::string& text : c.says) {
    EXPECT_NE(run.err.find(text), std::string::npos) << text << "\n" << run.err;
  }
  EXPECT_EQ(run.left_behind, std::vector<int>{});
  if (!HasFailure()) fs::remove_all(run.attempt_dir.parent_path().parent_path());
}

INSTANTIATE_TEST_SUITE_P(
    ContinueMatrix, FaultsContinue,
    ::testing::Values(ContinueCase{"kill9",
                                   {"rank 3 (pid ", "died of SIGKILL",
                                    "the job continues with 3 of 4 ranks", "every rank has died"}},
                      ContinueCase{"segv",
                                   {"died of SIGSEGV", "the job continues with 3 of 4 ranks"}},
                      ContinueCase{"user_hang", {"first failure: rank ", "exited with code 70"}},
                      ContinueCase{"wrong_op", {"first failure: rank ", "exited with code 70"}}),
    [](const ::testing::TestParamInfo<ContinueCase>& info) { return info.param.mode; });

// (g) Two agents on loopback; node 1's agent is killed with SIGKILL while rank 3 (node 1) sits in
// user code and ranks 0-2 wait for it. Node 0 sees node 1's heartbeat stop (3 s), has its own
// ranks dump, counts node 1's ranks as lost and ends the job, well before the ranks' 30 s op
// timeout would have.
// Two meshruns on loopback, nodes 0 and 1 of one job with 2 ranks each, running the user_hang
// case with a 30 s op timeout; returns once rank 3 (node 1) sits in user code in step 3 and
// ranks 0-2 wait for it in their step-3 collectives.
struct TwoNodeJob {
  std::string marker = new_marker();
  fs::path dir = fs::temp_directory_path() / marker;
  pid_t node[2] = {-1, -1};

  void start() {
    fs::create_directories(dir);
    const std::string endpoint = fmt::format("127.0.0.1:{}", meshrt::testing::free_port());
    for (int n : {0, 1}) {
      node[n] = start_meshrun(
          {"--nnodes", "2", "--nproc-per-node", "2", "--node-rank", std::to_string(n),
           "--rdzv-endpoint", endpoint, "--rdzv-id", marker, "--rdzv-timeout", "30", "--log-dir",
           (dir / fmt::format("n{}", n)).string(), MESHRT_FAULT_WORKER, "user_hang", marker},
          dir, std::to_string(n), 30s);
    }
    const fs::path rank3_log = dir / "n1" / "attempt_0" / "rank_3.log";
    const auto deadline = Clock::now() + 30s;
    while (read_all(rank3_log).find("step 3") == std::string::npos && Clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_NE(read_all(rank3_log).find("step 3"), std::string::npos)
        << read_all(dir / "meshrun0.err");
    std::this_thread::sleep_for(300ms);
  }
  ~TwoNodeJob() {
    if (!::testing::Test::HasFailure()) fs::remove_all(dir);  // Kept to look into otherwise.
  }
  // Kills node `killed`'s meshrun with SIGKILL and waits for the other node's to end: its exit
  // status, the time from the kill to its end, and its stderr.
  struct Ending {
    int code;
    Clock::duration kill_to_end;
    std::string err;
  };
  Ending kill_agent(int killed) {
    const int other = 1 - killed;
    ::kill(node[killed], SIGKILL);
    const auto killed_at = Clock::now();
    EXPECT_EQ(wait_exit(node[killed], 10s), -1);
    const int code = wait_exit(node[other], 60s);
    const auto kill_to_end = Clock::now() - killed_at;
    std::printf("node %d's agent killed: node %d ended %.1f s later\n", killed, other,
                std::chrono::duration<double>(kill_to_end).count());
    return {code, kill_to_end, read_all(dir / fmt::format("meshrun{}.err", other))};
  }
  bool dumped(int node_rank, int rank) const {
    return !nlohmann::json::parse(read_all(dir / fmt::format("n{}", node_rank) / "attempt_0" /
                                           fmt::format("fr_trace_{}", rank)),
                                  nullptr, false)
                .is_discarded();
  }
};

TEST(Faults, KilledAgentOfNodeOneEndsTheJobWithNodeZerosDumps) {
  TwoNodeJob job;
  ASSERT_NO_FATAL_FAILURE(job.start());
  const auto [code, kill_to_end, err] = job.kill_agent(1);
  EXPECT_EQ(code, 1) << err;
  EXPECT_LE(kill_to_end, 3s + 5s) << err;
  EXPECT_NE(err.find("first failure: node 1 (host "), std::string::npos) << err;
  EXPECT_NE(err.find("stopped answering"), std::string::npos) << err;
  for (int r : {0, 1}) EXPECT_TRUE(job.dumped(0, r)) << "rank " << r << "'s dump\n" << err;
  EXPECT_EQ(root_culprits(err), (std::set<int>{2, 3})) << err;
  EXPECT_EQ(reap_left_behind(job.marker), std::vector<int>{});
}

// (g') The same job, but node 0's agent (the store's host) is killed: its ranks die with it
// (PR_SET_PDEATHSIG), and node 1's agent, having lost the store, has its own ranks dump through
// their FIFOs, stops them and ends, long before the ranks' 30 s op timeout.
TEST(Faults, KilledAgentOfNodeZeroLetsNodeOneDumpAndEnd) {
  TwoNodeJob job;
  ASSERT_NO_FATAL_FAILURE(job.start());
  const auto [code, kill_to_end, err] = job.kill_agent(0);
  EXPECT_NE(code, 0) << err;
  EXPECT_LE(kill_to_end, 8s) << err;
  EXPECT_NE(err.find("lost node 0's store: asking ranks 2, 3 to dump through their pipes"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("flight recorder: dumps written in "), std::string::npos) << err;
  // Its last word says why it ended, whichever store call found node 0 gone.
  EXPECT_NE(err.find("lost node 0's store: ", err.rfind("\nmeshrun: ")), std::string::npos) << err;
  for (int r : {2, 3}) EXPECT_TRUE(job.dumped(1, r)) << "rank " << r << "'s dump\n" << err;
  EXPECT_EQ(reap_left_behind(job.marker), std::vector<int>{});
}

}  // namespace
