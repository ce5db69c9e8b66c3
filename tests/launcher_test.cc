// meshrun end to end: real meshrun processes start real ranks (launcher_child, mesh_demo) on
// loopback; the tests check exit statuses, the ranks' output and environment, the summary, the
// gathered dumps, and that no process is left behind. Unit tests cover the command line (every
// torchrun form), the meshtrace lookup, error files and the output prefixing rule.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/options.h"
#include "launcher/output_prefixer.h"
#include "launcher/post_mortem.h"
#include "launcher/rank_status.h"
#include "launcher/summary.h"
#include "runtime/error.h"
#include "runtime/error_file.h"
#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"
#include "runtime/watchdog.h"
#include "tests/process_harness.h"

#if !defined(MESHRT_MESHRUN) || !defined(MESHRT_LAUNCHER_CHILD) || !defined(MESHRT_MESH_DEMO)
#error "MESHRT_MESHRUN, MESHRT_LAUNCHER_CHILD and MESHRT_MESH_DEMO must name the binaries"
#endif

namespace meshrt::testing {
namespace {

using meshrt::testing::processes_with;

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

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value != nullptr ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

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

TEST(Meshrun, RanksGetAFreshStoreTokenAndAStrangerIsRefused) {
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "2", MESHRT_LAUNCHER_CHILD,
                              "token", "stranger", "world", "getenv=MASTER_ADDR"},
                             60s, kInitEnv);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: token length=64 hex=yes\n", rank))) << r.out;
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: stranger refused: ", rank))) << r.out;
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: world ok rank={}", rank, rank))) << r.out;
    // One node: the store listens on loopback only.
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: getenv MASTER_ADDR=127.0.0.1\n", rank)))
        << r.out;
  }
  EXPECT_TRUE(contains(r.out, "authentication refused")) << r.out;
  EXPECT_FALSE(contains(r.out, "stranger accepted")) << r.out;

  // A token the user set is the one the ranks get (several nodes need one they all share).
  const std::string mine(64, 'a');
  auto env = kInitEnv;
  env["MESHRT_STORE_TOKEN"] = mine;
  const auto given = run_meshrun({"--standalone", "--nproc-per-node", "2", MESHRT_LAUNCHER_CHILD,
                                  "getenv=MESHRT_STORE_TOKEN", "world"},
                                 60s, env);
  ASSERT_EQ(given.exit_code, 0) << given.out << given.err;
  EXPECT_TRUE(contains(given.out, "[rank1]: getenv MESHRT_STORE_TOKEN=" + mine + "\n"))
      << given.out;
}

TEST(Meshrun, StoreOverTlsWhenTheEnvironmentNamesTheFiles) {
  TempDir dir;
  const std::string cert = dir.path() + "/store.pem", key = dir.path() + "/store.key";
  ASSERT_EQ(std::system(fmt::format("openssl req -x509 -newkey ec -pkeyopt "
                                    "ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=store "
                                    "-addext subjectAltName=IP:127.0.0.1 -keyout {} -out {} "
                                    ">/dev/null 2>&1",
                                    key, cert)
                            .c_str()),
            0);
  auto env = kInitEnv;
  env["MESHRT_STORE_TLS_CERT"] = cert;
  env["MESHRT_STORE_TLS_KEY"] = key;
  env["MESHRT_STORE_TLS_CA"] = cert;
  const auto r = run_meshrun(
      {"--standalone", "--nproc-per-node", "2", MESHRT_LAUNCHER_CHILD, "stranger", "world"}, 60s,
      env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: world ok rank={}", rank, rank))) << r.out;
    // The stranger has the CA (it inherits the variable) but not the token.
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: stranger refused: ", rank))) << r.out;
  }
  // Without the CA, even meshrun's own client cannot join: every connection ends in the
  // handshake, and the error says so.
  env.erase("MESHRT_STORE_TLS_CA");
  const auto plain = run_meshrun({"--standalone", "--rdzv-timeout", "2", "--nproc-per-node", "1",
                                  MESHRT_LAUNCHER_CHILD, "world"},
                                 30s, env);
  EXPECT_NE(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_TRUE(contains(plain.out + plain.err, "does it expect TLS")) << plain.out << plain.err;
}

TEST(InitWithoutLauncher, RankZerosStoreTakesTheTokenAndRefusesAStranger) {
  // torchrun's environment without MESHRT_STORE_EXTERNAL: rank 0 hosts the store in init().
  auto env = kInitEnv;
  env["MESHRT_STORE_TOKEN"] = std::string(64, 'b');
  const auto results = run_ranks({MESHRT_LAUNCHER_CHILD, "stranger@1", "world"}, 2, 60s, env);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << describe(results);
  EXPECT_TRUE(contains(results[0].output, "world ok rank=0 size=2")) << describe(results);
  EXPECT_TRUE(contains(results[1].output, "stranger refused: ")) << describe(results);
  EXPECT_TRUE(contains(results[1].output, "authentication refused")) << describe(results);
  // The refusal is logged by the store's host, naming the peer but not the secret.
  EXPECT_TRUE(contains(results[0].output, "authentication refused")) << describe(results);
  EXPECT_FALSE(contains(results[0].output, std::string(64, 'b'))) << describe(results);
}

// WORLD_SIZE one too large: every rank says within seconds which rank is missing and where the
// size came from, then init fails naming it, instead of one store timeout minutes later.
TEST(InitWithoutLauncher, AMissingRankIsNamedWithinSecondsThenInitFails) {
  auto env = kInitEnv;
  env["WORLD_SIZE"] = "3";
  env["MESHRT_INIT_TIMEOUT_MS"] = "7000";
  const auto results = run_ranks({MESHRT_LAUNCHER_CHILD, "world"}, 2, 60s, env);
  for (const auto& r : results) {
    EXPECT_NE(r.exit_code, 0) << describe(results);
    EXPECT_TRUE(contains(r.output,
                         "waiting for every rank to join: 2 of 3 ranks arrived after 5 s; missing: "
                         "rank 2 (the world size 3 comes from "))
        << describe(results);
  }
  // Rank 0 hosts the store, so it fails on its own deadline; a rank whose deadline comes later
  // (it started later) may see rank 0's store go first.
  EXPECT_TRUE(contains(results[0].output, "[timeout]")) << describe(results);
  EXPECT_TRUE(contains(results[1].output, "[timeout]") ||
              contains(results[1].output, "closed the connection"))
      << describe(results);
}

// Another program holds MASTER_PORT and hangs up on whoever connects (a previous job, another
// service): rank 0 says it could not start the store and what to do, and the other ranks say
// why the store hung up on them instead of only "closed the connection".
TEST(InitWithoutLauncher, APortHeldByAnotherProgramIsNamedOnEveryRank) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::atomic<bool> stop{false};
  std::thread holder([&] {
    while (!stop) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) == 1) {
        const int c = ::accept(fd, nullptr, nullptr);
        if (c >= 0) ::close(c);
      }
    }
  });
  auto env = kInitEnv;
  env["MASTER_PORT"] = std::to_string(ntohs(addr.sin_port));
  const auto results = run_ranks({MESHRT_LAUNCHER_CHILD, "world"}, 2, 60s, env);
  stop = true;
  holder.join();
  ::close(fd);
  for (const auto& r : results) EXPECT_NE(r.exit_code, 0) << describe(results);
  EXPECT_TRUE(contains(results[0].output, "rank 0 could not start the job's store: cannot listen"))
      << describe(results);
  EXPECT_TRUE(contains(results[0].output, "choose a free one")) << describe(results);
  EXPECT_TRUE(contains(results[1].output, "hung up on this rank's first request"))
      << describe(results);
  EXPECT_TRUE(contains(results[1].output,
                       "rank 0 could not start the store and another program "
                       "holds the port"))
      << describe(results);
}

TEST(Meshrun, LogDirWithoutTeeSendsOutputToFilesOnly) {
  TempDir logs;
  // OMP_NUM_THREADS set: no notice that meshrun sets it.
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                              MESHRT_LAUNCHER_CHILD, "print=to stdout", "eprint=to stderr"},
                             30s, {{"OMP_NUM_THREADS", "3"}});
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
  EXPECT_TRUE(contains(r.err, "; restarting as attempt 1 (--max-restarts 2;")) << r.err;
  EXPECT_TRUE(contains(r.err, "meshrun: attempt 1 failed: rank ")) << r.err;
  EXPECT_TRUE(contains(r.err, "; restarting as attempt 2 (--max-restarts 2;")) << r.err;
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

// Without --log-dir and with nothing for a person to read (no rank log, no dump, no summary), a
// successful job leaves no /tmp/meshrun-<id>-* directory behind: its dump FIFOs and status file
// go with it.
TEST(Meshrun, SuccessfulJobLeavesNoRunDirectory) {
  const std::string id = fmt::format("clean{}", ::getpid());
  const auto r = run_meshrun(
      {"--standalone", "--rdzv-id", id, "--nproc-per-node", "2", MESHRT_LAUNCHER_CHILD, "world"},
      60s, kInitEnv);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& entry : fs::directory_iterator("/tmp")) {
    EXPECT_NE(entry.path().filename().string().rfind("meshrun-" + id + "-", 0), 0u)
        << entry.path() << " was left behind";
  }
}

TEST(Meshrun, GivesUpAfterMaxRestarts) {
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                              MESHRT_LAUNCHER_CHILD, "exit-below-attempt=5"},
                             30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count(r.err, "restarting"), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "job failed (run '")) << r.err;
  EXPECT_TRUE(contains(r.err, "', attempt 1, --max-restarts 1)")) << r.err;
}

// --on-rank-failure=continue: rank 1 dies of SIGKILL early; ranks 0 and 2 learn it from its exit
// record (as the runtime's survivors do), run to their end and exit 0, and so does meshrun, with
// no dump request, no stop, no restart, and nothing left in /tmp.
TEST(Meshrun, ContinueKeepsSurvivorsRunningWhenARankIsKilled) {
  const ScopedEnv unset("MESHRT_ON_RANK_FAILURE", nullptr);
  const std::string marker = unique_marker();
  const std::string id = fmt::format("continue{}", ::getpid());
  const auto r = run_meshrun(
      {"--standalone", "--rdzv-id", id, "--nproc-per-node", "3", "--on-rank-failure=continue",
       MESHRT_LAUNCHER_CHILD, marker, "getenv=MESHRT_ON_RANK_FAILURE", "sleep=0.2@1", "signal=9@1",
       "wait-exit=1", "sleep=1.5", "print=ran to the end"},
      60s);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "getenv MESHRT_ON_RANK_FAILURE=continue\n"), 3u) << r.out;
  for (int rank : {0, 2}) {
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: exit record of rank 1: {{\"ended\":\"killed "
                                            "by SIGKILL\"}}\n",
                                            rank)))
        << r.out;
    EXPECT_TRUE(contains(r.out, fmt::format("[rank{}]: ran to the end\n", rank))) << r.out;
  }
  EXPECT_FALSE(contains(r.out, "[rank1]: ran to the end")) << r.out;
  // The line said when it died, and the summary at the end.
  const size_t at = r.err.find("meshrun: rank 1 (pid ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string died = r.err.substr(at, r.err.find('\n', at) - at);
  EXPECT_TRUE(contains(died, ", node 0) died of SIGKILL at 20")) << died;
  EXPECT_TRUE(contains(died, "Z; the job continues with 2 of 3 ranks (--on-rank-failure=continue)"))
      << died;
  EXPECT_TRUE(contains(r.err, "meshrun: job finished (run '" + id +
                                  "')\nranks that died and were left behind "
                                  "(--on-rank-failure=continue):\n  rank 1 (pid "))
      << r.err;
  EXPECT_TRUE(contains(r.err, "the job went on with 2 of 3 ranks and finished: exit status 0\n"))
      << r.err;
  for (const char* never : {"job failed", "waiting up to", "stopped by meshrun", "restarting"}) {
    EXPECT_FALSE(contains(r.err, never)) << never << "\n" << r.err;
  }
  EXPECT_EQ(survivors(marker), std::vector<int>{});
  for (const auto& entry : fs::directory_iterator("/tmp")) {
    EXPECT_NE(entry.path().filename().string().rfind("meshrun-" + id + "-", 0), 0u)
        << entry.path() << " was left behind";
  }
}

TEST(Meshrun, ContinueFailsWhenEveryRankDies) {
  const std::string marker = unique_marker();
  // Rank 0 dies of SIGKILL, rank 1 exits 3, rank 2 dies of SIGTERM, in that order.
  const auto r = run_meshrun(
      {"--standalone", "--nproc-per-node", "3", "--on-rank-failure", "continue",
       MESHRT_LAUNCHER_CHILD, marker, "sleep-rank=0.3", "signal=9@0", "exit=3@1", "signal=15@2"},
      60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "; the job continues with 2 of 3 ranks (--on-rank-failure=continue)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 3 at 20")) << r.err;
  EXPECT_TRUE(contains(r.err, "; the job continues with 1 of 3 ranks (--on-rank-failure=continue)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "; every rank has died: the job failed (--on-rank-failure=continue)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "meshrun: job failed (run '")) << r.err;
  // The first death is the job's first failure.
  EXPECT_TRUE(contains(r.err, "first failure: rank 0 (node 0 on host ")) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "ranks that died and were left behind (--on-rank-failure=continue):\n"
                       "  rank 0 (pid "))
      << r.err;
  EXPECT_TRUE(contains(r.err, "every rank died: none was left to go on with\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "stopped by meshrun")) << r.err;
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

// The watchdog's exit (70) is a hang, not a death to repair around: the job fails as it would
// without --on-rank-failure=continue, after the rank killed before it was left behind.
TEST(Meshrun, ContinueStillFailsTheJobOnAWatchdogExit) {
  const std::string marker = unique_marker();
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "3", "--on-rank-failure=continue",
                              "--dump-timeout", "1", "--grace-period", "1", MESHRT_LAUNCHER_CHILD,
                              marker, "signal=9@2", "sleep=0.5@1", "exit=70@1", "sleep=60"},
                             60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.elapsed, 30s);
  EXPECT_TRUE(contains(r.err, ", node 0) died of SIGKILL at ")) << r.err;
  EXPECT_TRUE(contains(r.err, "; the job continues with 2 of 3 ranks (--on-rank-failure=continue)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "meshrun: job failed (run '")) << r.err;
  EXPECT_TRUE(contains(r.err, "first failure: rank 1 (node 0 on host ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 70 (its watchdog")) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "rank 1 exited with code 70 (its watchdog: an op timed out or "
                       "failed); waiting up to "))
      << r.err;
  EXPECT_TRUE(contains(r.err, "  rank 0 (node 0, local rank 0, pid ")) << r.err;
  EXPECT_EQ(count(r.err, "stopped by meshrun (SIGTERM)"), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "the job went on with 2 of 3 ranks until it failed\n")) << r.err;
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

// MESHRT_ON_RANK_FAILURE: set with continue unless meshrun's environment sets it; never set by
// the default.
TEST(Meshrun, OnRankFailureReachesTheRanksUnlessTheirEnvironmentSetsIt) {
  const ScopedEnv unset("MESHRT_ON_RANK_FAILURE", nullptr);
  const auto plain =
      run_meshrun({"--standalone", MESHRT_LAUNCHER_CHILD, "getenv=MESHRT_ON_RANK_FAILURE"}, 30s);
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, "[rank0]: getenv MESHRT_ON_RANK_FAILURE=<unset>\n");
  const auto mine = run_meshrun({"--standalone", "--on_rank_failure", "continue",
                                 MESHRT_LAUNCHER_CHILD, "getenv=MESHRT_ON_RANK_FAILURE"},
                                30s, {{"MESHRT_ON_RANK_FAILURE", "mine"}});
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, "[rank0]: getenv MESHRT_ON_RANK_FAILURE=mine\n");
  EXPECT_EQ(mine.err, "");  // Nothing died: a successful job's output, unchanged.
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
      {"--nnodes", "1:2", "/bin/true"},
      {"--tee", "3"},
      {"--redirects", "4", "/bin/true"},
      {"--on-rank-failure", "ignore", "/bin/true"},
      {"--on-rank-failure=continue", "--max-restarts", "1", "/bin/true"},
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
  for (const char* flag :
       {"--nnodes",           "--nproc-per-node",  "--node-rank", "--rdzv-endpoint",
        "--master-addr",      "--master-port",     "--rdzv-id",   "--max-restarts",
        "--monitor-interval", "--log-dir",         "--tee",       "--redirects",
        "--standalone",       "--local-addr",      "--role",      "--module",
        "--no-python",        "--run-path",        "--report",    "--version",
        "--rdzv-backend",     "--on-rank-failure", "underscores"}) {
    EXPECT_TRUE(contains(help.out, flag)) << flag;
  }
  // continue never restarts: the error names both flags.
  const auto conflict =
      run_meshrun({"--on_rank_failure=continue", "--max_restarts", "2", "/bin/true"}, 10s);
  EXPECT_TRUE(contains(conflict.err, "--on-rank-failure=continue")) << conflict.err;
  EXPECT_TRUE(contains(conflict.err, "--max-restarts 2")) << conflict.err;
  // Flags after PROGRAM are the program's.
  const auto passed = run_meshrun({"--standalone", "/bin/echo", "--nnodes", "--bogus"}, 10s);
  EXPECT_EQ(passed.exit_code, 0) << passed.err;
  EXPECT_EQ(passed.out, "[rank0]: --nnodes --bogus\n");
}

// Agents that disagree on what a rank's death does would leave some nodes repairing around a
// rank that the others stop with the job: the rendezvous refuses them, naming both values.
TEST(Meshrun, NodesThatDisagreeOnRankFailureAreRefusedAtTheRendezvous) {
  const std::string port = std::to_string(free_port());
  auto args_for = [&](int node, const char* on_failure) {
    return std::vector<std::string>{"--nnodes",          "2",
                                    "--nproc-per-node",  "1",
                                    "--node-rank",       std::to_string(node),
                                    "--rdzv-endpoint",   "127.0.0.1:" + port,
                                    "--rdzv-id",         "disagree",
                                    "--rdzv-timeout",    "20",
                                    "--on-rank-failure", on_failure,
                                    "/bin/true"};
  };
  Meshrun node0(args_for(0, "restart-job"), kInitEnv), node1(args_for(1, "continue"), kInitEnv);
  const Outcome r0 = node0.wait(40s), r1 = node1.wait(40s);
  EXPECT_NE(r0.exit_code, 0) << r0.err;
  EXPECT_NE(r1.exit_code, 0) << r1.err;
  // Node 0 refuses for certain (it reads every node's values); node 1 may lose node 0's store
  // before it reads them, which is its error then.
  EXPECT_TRUE(contains(r0.err, "meshrun: node 1 (agent ")) << r0.err;
  EXPECT_TRUE(
      contains(r0.err, " has --on-rank-failure \"continue\" but node 0 has \"restart-job\""))
      << r0.err;
  EXPECT_TRUE(contains(r1.err, "--on-rank-failure") || contains(r1.err, "lost node 0's store"))
      << r1.err;
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

TEST(Meshrun, AStopWithoutAFailureIsNotASuccess) {
  // A stop request with no failure recorded (another agent, a tool): the ranks are stopped, so
  // the job failed; the summary says why rather than exiting 0 in silence.
  TempDir logs;
  const std::string marker = unique_marker();
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                              MESHRT_LAUNCHER_CHILD, marker, "request-stop@0", "sleep=60"},
                             60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.elapsed, 30s);
  EXPECT_TRUE(contains(r.err,
                       "first failure: none recorded; meshrun stopped the ranks on a stop "
                       "request ('requested by rank 0')"))
      << r.err;
  EXPECT_EQ(count(r.err, "stopped by meshrun (SIGTERM)"), 2u) << r.err;
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, DumpWaitSkipsARankKilledWithoutADump) {
  // Rank 0 asks every rank to dump (as its watchdog would) and dumps; rank 2 dumps; rank 1 dies
  // of SIGKILL and can never dump. meshrun waits for the two dumps that can come, not for the
  // whole --dump-timeout.
  TempDir logs;
  const std::string marker = unique_marker();
  const auto r = run_meshrun(
      {"--standalone", "--nproc-per-node", "3", "--log-dir", logs.path(), "--dump-timeout", "30",
       MESHRT_LAUNCHER_CHILD, marker, "dump-signal@0", "wait-dump-signal@1", "signal=9@1", "dump@0",
       "dump@2", "sleep=60@0", "sleep=60@2"},
      60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.elapsed, 15s) << r.err;
  EXPECT_TRUE(contains(r.err, "first failure: rank 1 (node 0 on host ")) << r.err;
  EXPECT_TRUE(contains(r.err, "killed by SIGKILL")) << r.err;
  EXPECT_TRUE(contains(r.err, "flight recorder: dumps of ranks 0, 2 in ")) << r.err;
  for (int rank : {0, 2}) {
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/attempt_0/fr_trace_{}", logs.path(), rank)))
        << rank;
  }
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

// A rank dies of SIGKILL: meshrun asks the survivors to dump on its behalf, and they say so
// (not that the dead rank signalled it).
TEST(Meshrun, SurvivorsSayMeshrunSignalledTheirDumpBecauseARankDied) {
  TempDir logs;
  const std::string marker = unique_marker();
  const auto r =
      run_meshrun({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                   MESHRT_LAUNCHER_CHILD, marker, "hold-world", "signal=9@1", "sleep=60@0"},
                  60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string log = read_all(logs.path() + "/attempt_0/rank_0.log");
  EXPECT_TRUE(contains(log,
                       "meshrun signalled a flight recorder dump because rank 1 died of "
                       "SIGKILL; dumping"))
      << log;
  EXPECT_FALSE(contains(log, "rank 1 signalled a flight recorder dump")) << log;
  const auto dump =
      nlohmann::json::parse(read_all(logs.path() + "/attempt_0/fr_trace_0"), nullptr, false);
  ASSERT_FALSE(dump.is_discarded()) << log;
  EXPECT_EQ(dump["trigger"]["detail"], "dump signalled by meshrun because rank 1 died of SIGKILL");
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

// A rank killed while its segment's name still exists: meshrun removes the name when it reaps
// the rank, so nothing stays in /dev/shm (tmpfs) until reboot.
TEST(Meshrun, ASegmentNameLeftByAKilledRankIsRemoved) {
  TempDir logs;
  const std::string marker = unique_marker();
  const auto r = run_meshrun(
      {"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(), MESHRT_LAUNCHER_CHILD,
       marker, "leak-shm@0", "print=leaked@0", "signal=9@0", "sleep=60@1"},
      60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string log = read_all(logs.path() + "/attempt_0/rank_0.log");
  EXPECT_TRUE(contains(log, "leaked")) << log << r.err;
  // Rank 0's pid, from the summary's "rank 0 (node 0, local rank 0, pid N)".
  const size_t at = r.err.find("rank 0 (node 0, local rank 0, pid ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const int pid = std::atoi(r.err.c_str() + at + std::strlen("rank 0 (node 0, local rank 0, pid "));
  EXPECT_FALSE(std::filesystem::exists(fmt::format("/dev/shm/meshrt-{}-0123456789abcdef", pid)))
      << r.err;
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, StackOverflowStillLeavesADump) {
  // The SIGSEGV of a stack overflow runs the dump on the signal stack init() gave the thread.
  TempDir logs;
  const std::string marker = unique_marker();
  const auto r =
      run_meshrun({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                   MESHRT_LAUNCHER_CHILD, marker, "world", "stack-overflow@1", "sleep=60@0"},
                  60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "killed by SIGSEGV")) << r.err;
  const auto dump =
      nlohmann::json::parse(read_all(logs.path() + "/attempt_0/fr_trace_1"), nullptr, false);
  ASSERT_FALSE(dump.is_discarded()) << r.err;
  EXPECT_EQ(dump["dump_reason"], "crash");
  EXPECT_EQ(dump["trigger"]["detail"], "fatal signal SIGSEGV");
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, SegfaultInUserCodeLeavesADumpThatMeshtraceReadsAndTheSummarySaysSigsegv) {
  TempDir logs;
  const std::string marker = unique_marker();
  const auto r = run_meshrun({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                              MESHRT_LAUNCHER_CHILD, marker, "world", "segfault@1", "sleep=60@0"},
                             60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.elapsed, 30s);
  EXPECT_TRUE(contains(r.err, "first failure: rank 1 (node 0 on host ")) << r.err;
  EXPECT_TRUE(contains(r.err, "killed by SIGSEGV")) << r.err;
  const std::string log = read_all(logs.path() + "/attempt_0/rank_1.log");
  EXPECT_TRUE(contains(log, "[meshrt] fatal signal SIGSEGV: writing the flight recorder dump\n"))
      << log;
  const std::string path = logs.path() + "/attempt_0/fr_trace_1";
  const auto dump = nlohmann::json::parse(read_all(path), nullptr, false);
  ASSERT_FALSE(dump.is_discarded()) << path << "\n" << r.err;
  EXPECT_EQ(dump["rank"], 1);
  EXPECT_EQ(dump["dump_reason"], "crash");
  EXPECT_EQ(dump["trigger"]["detail"], "fatal signal SIGSEGV");
  // The crashed rank's pid, though a child of it wrote the file.
  EXPECT_TRUE(contains(r.err, fmt::format("pid {}): killed by SIGSEGV", dump["pid"].get<int>())))
      << r.err;
  ASSERT_FALSE(dump["entries"].empty());
  EXPECT_EQ(dump["entries"].back()["state"], "completed") << dump["entries"].dump(1);
#ifdef MESHRT_MESHTRACE_BIN
  // meshtrace reads it: exit 0 or 1 (a finding), never 2 (a file it could not read). Rank 0 was
  // stopped by meshrun without a dump, hence --allow-incomplete-ranks.
  const std::string cmd = std::string(MESHRT_MESHTRACE_BIN) + " analyze " + logs.path() +
                          "/attempt_0 --prefix fr_trace_ --allow-incomplete-ranks > " +
                          logs.path() + "/verdict 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_LE(WEXITSTATUS(status), 1) << read_all(logs.path() + "/verdict");
#endif
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, UncaughtExceptionReachesTheSummaryThroughTheErrorFile) {
  const std::string marker = unique_marker();
  TempDir logs;
  // Rank 1 joins the world, then throws out of main; rank 0 waits to be stopped.
  const auto before = std::chrono::system_clock::now();
  const auto r =
      run_meshrun({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                   MESHRT_LAUNCHER_CHILD, marker, "world", "throw=bad step 7@1", "sleep=30"},
                  60s, kInitEnv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string file = logs.path() + "/attempt_0/error_1.json";
  EXPECT_TRUE(contains(r.err, "first failure: rank 1 (")) << r.err;
  EXPECT_TRUE(contains(r.err, "killed by SIGABRT")) << r.err;
  EXPECT_TRUE(contains(r.err, fmt::format("\n  error_file: {}\n  message: std::runtime_error: bad "
                                          "step 7\nranks:\n",
                                          file)))
      << r.err;
  // torchelastic's layout, as its @record writes it.
  const auto j = nlohmann::json::parse(read_all(file), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << read_all(file);
  EXPECT_EQ(j["message"]["message"], "std::runtime_error: bad step 7");
  ASSERT_TRUE(j["message"]["extraInfo"]["py_callstack"].is_string());
  EXPECT_TRUE(contains(j["message"]["extraInfo"]["py_callstack"].get<std::string>(),
                       "C++ call stack at std::terminate"));
  const std::string timestamp = j["message"]["extraInfo"]["timestamp"].get<std::string>();
  const auto since_epoch = [](auto t) {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  };
  EXPECT_GE(std::stoll(timestamp), since_epoch(before));
  EXPECT_LE(std::stoll(timestamp), since_epoch(std::chrono::system_clock::now()));
  EXPECT_FALSE(fs::exists(logs.path() + "/attempt_0/error_0.json"));
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

TEST(Meshrun, TorchrunCommandLineAndTheRanksNewVariables) {
  TempDir logs;
  // torchrun's spellings; --tee 0:1 sends rank 0's stdout to the console too, the rest (the
  // default with --log-dir) to the log files only. OMP_NUM_THREADS is unset: meshrun sets it.
  ScopedEnv omp("OMP_NUM_THREADS", nullptr);
  const auto r = run_meshrun(
      {"--standalone", "--nproc_per_node=2", "--log_dir", logs.path(), "--tee", "0:1", "--role",
       "trainer", "--max_restarts=0", "--monitor_interval", "0.05", MESHRT_LAUNCHER_CHILD,
       "getenv=ROLE_NAME,MESHRT_LAUNCHER,TORCHELASTIC_ERROR_FILE,OMP_NUM_THREADS",
       "eprint=to stderr"},
      30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string env0 = fmt::format(
      "getenv ROLE_NAME=trainer MESHRT_LAUNCHER=meshrun "
      "TORCHELASTIC_ERROR_FILE={}/attempt_0/error_0.json OMP_NUM_THREADS=1",
      logs.path());
  EXPECT_EQ(r.out, "[rank0]: " + env0 + "\n");
  EXPECT_TRUE(contains(r.err, "meshrun: setting OMP_NUM_THREADS=1 for each rank")) << r.err;
  EXPECT_FALSE(contains(r.err, "to stderr")) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = read_all(fmt::format("{}/attempt_0/rank_{}.log", logs.path(), rank));
    EXPECT_TRUE(contains(log, "getenv ROLE_NAME=trainer MESHRT_LAUNCHER=meshrun ")) << log;
    EXPECT_TRUE(contains(log, "to stderr\n")) << log;
  }
}

TEST(Meshrun, PythonProgramsRunWithTheInterpreterAndNativeOnesAsThey) {
  // PYTHON_EXEC=/bin/echo shows the command line each rank got.
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", "/bin/echo"}};
  const auto module = run_meshrun({"--standalone", "-m", "pkg.train", "--lr", "1"}, 10s, env);
  EXPECT_EQ(module.exit_code, 0) << module.err;
  EXPECT_EQ(module.out, "[rank0]: -u -m pkg.train --lr 1\n");
  const auto script = run_meshrun({"--standalone", "train.py", "--lr", "1"}, 10s, env);
  EXPECT_EQ(script.out, "[rank0]: -u train.py --lr 1\n");
  const auto native = run_meshrun({"--standalone", "--no_python", "/bin/echo", "a.py"}, 10s, env);
  EXPECT_EQ(native.out, "[rank0]: a.py\n");
}

TEST(Meshrun, MeshrtLogLinesKeepTheirOwnRankPrefix) {
  // At info level init() logs "joining run ..." with meshrt's prefix, which names the rank.
  std::map<std::string, std::string> env = kInitEnv;
  env["MESHRT_LOG_LEVEL"] = "info";
  const auto r =
      run_meshrun({"--standalone", "--nproc-per-node", "2", MESHRT_LAUNCHER_CHILD,
                   "eprint=[meshrt warning rank ? h:1] not a log line with a rank", "world"},
                  30s, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t joins = 0;
  for (const auto& line : lines_of(r.err)) {
    if (contains(line, "joining run")) {
      ++joins;
      EXPECT_EQ(line.rfind("[rank", 0), std::string::npos) << line;
      EXPECT_EQ(line.rfind("[meshrt info rank ", 0), 0u) << line;
    }
  }
  EXPECT_EQ(joins, 2u) << r.err;
  EXPECT_TRUE(contains(r.err, "[rank0]: [meshrt warning rank ? h:1] not a log line with a rank\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "[rank1]: [meshrt warning rank ? h:1] not a log line with a rank\n"))
      << r.err;
}

// A stand-in meshtrace that appends its arguments to `calls` next to itself, writes
// <dir>/report.html for `report <dir>`, and gives a verdict for `analyze`.
std::string fake_meshtrace(const std::string& dir) {
  const std::string path = dir + "/meshtrace";
  std::ofstream(path)
      << "#!/bin/sh\n"
         "echo \"$*\" >> \"$(dirname \"$0\")/calls\"\n"
         "if [ \"$1\" = report ]; then echo '<html></html>' > \"$2/report.html\"; fi\n"
         "if [ \"$1\" = analyze ]; then echo 'fake verdict'; exit 1; fi\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST(Meshrun, ReportPointsTheRanksAtItsDirectoryAndRunsMeshtraceReport) {
  TempDir tools, out;
  const std::string report = out.path() + "/report";
  const std::map<std::string, std::string> env = {
      {"MESHRT_MESHTRACE", fake_meshtrace(tools.path())},
      {"MESHRT_TRACE_CHROME", "/elsewhere/{rank}.json"}};  // The user's choice stays.
  const auto r = run_meshrun(
      {"--standalone", "--nproc-per-node", "2", "--report", report, MESHRT_LAUNCHER_CHILD,
       "getenv=MESHRT_COMMS_SUMMARY,MESHRT_STRAGGLER_REPORT,MESHRT_SCOPE_TREE,MESHRT_TRACE_CHROME"},
      30s, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(
        contains(r.out, fmt::format("[rank{0}]: getenv MESHRT_COMMS_SUMMARY={1}/comms_{{rank}}"
                                    ".json MESHRT_STRAGGLER_REPORT={1}/stragglers.json "
                                    "MESHRT_SCOPE_TREE={1}/scope_tree_{{rank}}.json "
                                    "MESHRT_TRACE_CHROME=/elsewhere/{{rank}}.json\n",
                                    rank, report)))
        << r.out;
  }
  EXPECT_EQ(read_all(tools.path() + "/calls"), "report " + report + "\n");
  EXPECT_EQ(lines_of(r.err).back(), "meshrun: report: " + report + "/report.html") << r.err;
}

TEST(Meshrun, FailedJobsReportIncludesTheDumpsAndEndsTheSummary) {
  const std::string marker = unique_marker();
  TempDir tools, logs;
  const std::string report = logs.path() + "/report";
  const auto r = run_meshrun(
      {"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(), "--report", report,
       MESHRT_LAUNCHER_CHILD, marker, "dump", "sleep=0.2@1", "exit=5@1", "sleep=30"},
      30s, {{"MESHRT_MESHTRACE", fake_meshtrace(tools.path())}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string dumps = logs.path() + "/attempt_0";
  EXPECT_EQ(read_all(tools.path() + "/calls"),
            fmt::format("analyze {0} --prefix fr_trace_\nreport {1} --dumps {0} --prefix "
                        "fr_trace_\n",
                        dumps, report));
  EXPECT_TRUE(contains(r.err, "\n  fake verdict\nreport: " + report + "/report.html\n")) << r.err;
  EXPECT_TRUE(contains(read_all(logs.path() + "/summary.txt"), "report: " + report))
      << read_all(logs.path() + "/summary.txt");
  EXPECT_EQ(survivors(marker), std::vector<int>{});
}

launcher::ParsedCommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "meshrun");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return launcher::parse_options(static_cast<int>(argv.size()), argv.data());
}

// The options of a command line that must parse.
launcher::LaunchOptions options_of(const std::vector<std::string>& args) {
  const auto parsed = parse(args);
  EXPECT_FALSE(parsed.exit_status.has_value()) << fmt::format("{}", fmt::join(args, " "));
  return parsed.options;
}

// The exit status of a command line that must not run (2: usage error).
int refused(const std::vector<std::string>& args) { return parse(args).exit_status.value_or(-1); }

using Command = std::vector<std::string>;

TEST(ParseOptions, StatusPageOnLoopbackAndAFreePortUnlessAsked) {
  const auto d = options_of({"p"});
  EXPECT_EQ(d.status_port, std::optional<uint16_t>(0));
  EXPECT_EQ(d.status_host, "127.0.0.1");
  EXPECT_EQ(options_of({"--status-port", "8089", "p"}).status_port, std::optional<uint16_t>(8089));
  EXPECT_EQ(options_of({"--status_port=off", "p"}).status_port, std::nullopt);
  EXPECT_EQ(options_of({"--status-host", "0.0.0.0", "p"}).status_host, "0.0.0.0");
  EXPECT_EQ(refused({"--status-port", "70000", "p"}), 2);
  EXPECT_EQ(refused({"--status-port", "on", "p"}), 2);
  EXPECT_EQ(refused({"--status-host=", "p"}), 2);
}

TEST(ParseOptions, EveryFlagTakesTorchrunsUnderscoreSpelling) {
  const auto o = options_of({"--nnodes",
                             "2",
                             "--nproc_per_node",
                             "3",
                             "--node_rank",
                             "1",
                             "--rdzv_endpoint",
                             "node0:1234",
                             "--rdzv_id",
                             "job",
                             "--rdzv_backend",
                             "c10d",
                             "--max_restarts",
                             "4",
                             "--monitor_interval",
                             "0.5",
                             "--rdzv_timeout",
                             "7",
                             "--grace_period",
                             "1.5",
                             "--dump_timeout",
                             "2",
                             "--log_dir",
                             "/tmp/x",
                             "--local_addr",
                             "127.0.0.1",
                             "--role",
                             "r",
                             "--redirects",
                             "1",
                             "--tee",
                             "2",
                             "--no_python",
                             "prog",
                             "a"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.rdzv_host, "node0");
  EXPECT_EQ(o.rdzv_port, 1234);
  EXPECT_EQ(o.run_id, "job");
  EXPECT_EQ(o.max_restarts, 4);
  EXPECT_EQ(o.monitor_interval, 500ms);
  EXPECT_EQ(o.rdzv_timeout, 7s);
  EXPECT_EQ(o.grace_period, 1500ms);
  EXPECT_EQ(o.dump_timeout, 2s);
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_EQ(o.local_addr, "127.0.0.1");
  EXPECT_FALSE(o.local_iface.empty());  // "lo", usually.
  EXPECT_EQ(o.role, "r");
  EXPECT_EQ(o.redirects, (launcher::StreamSelection{1, {}}));
  EXPECT_EQ(o.tee, (launcher::StreamSelection{2, {}}));
  EXPECT_EQ(o.command, (Command{"prog", "a"}));

  const auto m = options_of({"--master_addr", "h", "--master_port", "99", "--run_path", "script"});
  EXPECT_EQ(m.rdzv_host, "h");
  EXPECT_EQ(m.rdzv_port, 99);
  EXPECT_EQ(m.command.at(2), "script");
  // The --opt=value form, dashes or underscores.
  EXPECT_EQ(options_of({"--nproc-per-node=5", "p"}).nproc_per_node, 5);
  EXPECT_EQ(options_of({"--nproc_per_node=5", "p"}).nproc_per_node, 5);
  EXPECT_EQ(options_of({"--report=/r", "p"}).report_dir, "/r");
  EXPECT_EQ(refused({"--rdzv_backend", "etcd", "p"}), 2);
  EXPECT_EQ(refused({"--no_such_flag", "p"}), 2);
}

TEST(ParseOptions, OnRankFailureRestartJobByDefaultAndContinueNeverRestarts) {
  using launcher::OnRankFailure;
  EXPECT_EQ(options_of({"p"}).on_rank_failure, OnRankFailure::kRestartJob);
  EXPECT_EQ(
      options_of({"--on-rank-failure", "restart-job", "--max-restarts", "2", "p"}).on_rank_failure,
      OnRankFailure::kRestartJob);
  for (const Command& c :
       {Command{"--on-rank-failure", "continue", "p"}, Command{"--on-rank-failure=continue", "p"},
        Command{"--on_rank_failure", "continue", "p"},
        Command{"--on_rank_failure=continue", "--max-restarts", "0", "p"}}) {
    const auto o = options_of(c);
    EXPECT_EQ(o.on_rank_failure, OnRankFailure::kContinue) << fmt::format("{}", fmt::join(c, " "));
    EXPECT_EQ(o.command, Command{"p"});
  }
  EXPECT_EQ(refused({"--on-rank-failure", "ignore", "p"}), 2);
  EXPECT_EQ(refused({"--on-rank-failure=", "p"}), 2);
  EXPECT_EQ(refused({"--on_rank_failure", "Continue", "p"}), 2);
  EXPECT_EQ(refused({"--on-rank-failure=continue", "--max-restarts", "1", "p"}), 2);
  EXPECT_EQ(refused({"--max_restarts=3", "--on_rank_failure", "continue", "p"}), 2);
}

TEST(ParseOptions, ProgramAndItsArgumentsAreLeftAlone) {
  EXPECT_EQ(options_of({"prog", "--nnodes", "x", "--tee"}).command,
            (Command{"prog", "--nnodes", "x", "--tee"}));
  EXPECT_EQ(options_of({"--", "--odd-name", "a_b"}).command, (Command{"--odd-name", "a_b"}));
  // Defaults, torchrun's where it has one.
  const auto o = options_of({"prog"});
  EXPECT_EQ(o.role, "default");
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_FALSE(o.tee.has_value());
  EXPECT_FALSE(o.redirects.has_value());
  EXPECT_EQ(o.report_dir, "");
  EXPECT_EQ(refused({"--role", "", "p"}), 2);
  EXPECT_EQ(parse({"--version"}).exit_status, 0);
}

TEST(ParseOptions, TeeAndRedirectsTakeTorchrunsValuesAndABareTeeIsBoth) {
  using launcher::StreamSelection;
  // --tee 3 is the value 3, not a program named 3.
  auto o = options_of({"--tee", "3", "prog"});
  EXPECT_EQ(o.tee, (StreamSelection{3, {}}));
  EXPECT_EQ(o.command, Command{"prog"});
  o = options_of({"--tee", "prog", "3"});
  EXPECT_EQ(o.tee, (StreamSelection{3, {}}));
  EXPECT_EQ(o.command, (Command{"prog", "3"}));
  o = options_of({"--tee=1", "--redirects", "0:3,1:2", "prog"});
  EXPECT_EQ(o.tee, (StreamSelection{1, {}}));
  EXPECT_EQ(o.redirects, (StreamSelection{std::nullopt, {{0, 3}, {1, 2}}}));
  EXPECT_EQ(o.command, Command{"prog"});
  EXPECT_EQ(options_of({"--tee", "0:1,2:3", "prog"}).tee,
            (StreamSelection{std::nullopt, {{0, 1}, {2, 3}}}));
  EXPECT_EQ(refused({"--tee", "3"}), 2);  // No PROGRAM.
  EXPECT_EQ(refused({"--redirects", "prog"}), 2);
  EXPECT_EQ(refused({"--redirects", "0:4", "prog"}), 2);

  for (const char* bad : {"", "4", "-1", "a", "0:", ":1", "0:1,", "0:1;1:2", "1,2"}) {
    EXPECT_FALSE(launcher::parse_streams(bad).has_value()) << bad;
  }
  const auto per_rank = launcher::parse_streams("0:3,2:1");
  ASSERT_TRUE(per_rank.has_value());
  EXPECT_EQ(per_rank->of(0), 3);
  EXPECT_EQ(per_rank->of(1), 0);  // Not listed: none, as torchrun's to_map.
  EXPECT_EQ(per_rank->of(2), 1);
}

TEST(ParseOptions, StreamRoutes) {
  using launcher::kStderrBit;
  using launcher::kStdoutBit;
  auto routes = [](const std::vector<std::string>& args, int local_rank) {
    std::vector<std::string> full = args;
    full.push_back("prog");
    const auto o = options_of(full);
    const auto out = launcher::route(o, local_rank, kStdoutBit);
    const auto err = launcher::route(o, local_rank, kStderrBit);
    return fmt::format("out:{}{} err:{}{}", out.console ? "c" : "", out.file ? "f" : "",
                       err.console ? "c" : "", err.file ? "f" : "");
  };
  EXPECT_EQ(routes({}, 0), "out:c err:c");
  EXPECT_EQ(routes({"--log-dir", "d"}, 0), "out:f err:f");
  EXPECT_EQ(routes({"--log-dir", "d", "--tee"}, 0), "out:cf err:cf");
  EXPECT_EQ(routes({"--log-dir", "d", "--tee", "2"}, 0), "out:f err:cf");
  EXPECT_EQ(routes({"--log-dir", "d", "--redirects", "1"}, 0), "out:f err:c");
  EXPECT_EQ(routes({"--log-dir", "d", "--redirects", "0"}, 0), "out:c err:c");
  EXPECT_EQ(routes({"--redirects", "3"}, 0), "out:f err:f");  // Files in the run directory.
  EXPECT_EQ(routes({"--tee", "1"}, 0), "out:cf err:c");
  EXPECT_EQ(routes({"--redirects", "0:3", "--tee", "1:1"}, 0), "out:f err:f");
  EXPECT_EQ(routes({"--redirects", "0:3", "--tee", "1:1"}, 1), "out:cf err:c");
}

TEST(ParseOptions, NnodesTakesTorchrunsMinMaxOnlyWhenFixed) {
  EXPECT_EQ(options_of({"--nnodes", "2:2", "--rdzv-endpoint", "h:1", "p"}).nnodes, 2);
  EXPECT_EQ(options_of({"--nnodes=1:1", "p"}).nnodes, 1);
  for (const char* bad : {"1:2", "2:1", "0", "0:0", "a", "1:", ":1", "-1"}) {
    EXPECT_EQ(refused({"--nnodes", bad, "p"}), 2) << bad;
  }
}

TEST(ParseOptions, NprocPerNodeAutoGpuCpu) {
  EXPECT_EQ(launcher::resolve_nproc_per_node("3", 8, 16), 3);
  EXPECT_EQ(launcher::resolve_nproc_per_node("cpu", 8, 16), 16);
  EXPECT_EQ(launcher::resolve_nproc_per_node("gpu", 8, 16), 8);
  EXPECT_EQ(launcher::resolve_nproc_per_node("auto", 8, 16), 8);
  EXPECT_EQ(launcher::resolve_nproc_per_node("auto", 0, 16), 16);
  EXPECT_THROW(launcher::resolve_nproc_per_node("gpu", 0, 16), std::invalid_argument);
  for (const char* bad : {"0", "-2", "two", "", "xpu"}) {
    EXPECT_THROW(launcher::resolve_nproc_per_node(bad, 1, 1), std::invalid_argument) << bad;
  }
  EXPECT_EQ(options_of({"--nproc-per-node", "cpu", "p"}).nproc_per_node, launcher::count_cpus());
  EXPECT_GE(launcher::count_cpus(), 1);
  {
    // This process sees no GPU: auto is the CPU count, gpu is refused.
    ScopedEnv hide("CUDA_VISIBLE_DEVICES", "");
    EXPECT_EQ(options_of({"--nproc_per_node", "auto", "p"}).nproc_per_node, launcher::count_cpus());
    EXPECT_EQ(refused({"--nproc-per-node", "gpu", "p"}), 2);
  }

  TempDir dev;
  for (const char* node : {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "null"}) {
    std::ofstream(dev.path() + "/" + node);
  }
  EXPECT_EQ(launcher::count_cuda_devices(dev.path(), nullptr), 3);
  const std::map<std::string, int> visible = {
      {"", 0},    {"-1", 0},  {"1", 1},    {"0,2", 2},        {"2,1,0", 3}, {"0,7,1", 1},
      {"1,1", 1}, {"x,0", 0}, {"0, 1", 2}, {"GPU-1a2b,0", 2}, {"MIG-x", 1},
  };
  for (const auto& [list, n] : visible) {
    EXPECT_EQ(launcher::count_cuda_devices(dev.path(), list.c_str()), n) << list;
  }
  EXPECT_EQ(launcher::count_cuda_devices(dev.path() + "/none", "0,1"), 0);
}

TEST(ParseOptions, PythonModulesAndScripts) {
  ScopedEnv python("PYTHON_EXEC", nullptr);
  EXPECT_EQ(options_of({"-m", "pkg.train", "--lr", "1"}).command,
            (Command{"python3", "-u", "-m", "pkg.train", "--lr", "1"}));
  EXPECT_EQ(options_of({"--module", "pkg"}).command, (Command{"python3", "-u", "-m", "pkg"}));
  EXPECT_EQ(options_of({"train.py", "x"}).command, (Command{"python3", "-u", "train.py", "x"}));
  EXPECT_EQ(options_of({"--run-path", "/abs/train", "x"}).command,
            (Command{"python3", "-u", "/abs/train", "x"}));
  EXPECT_EQ(options_of({"--no-python", "train.py"}).command, Command{"train.py"});
  EXPECT_EQ(options_of({"./train", "x.py"}).command, (Command{"./train", "x.py"}));
  EXPECT_EQ(refused({"--no-python", "-m", "pkg"}), 2);
  EXPECT_EQ(refused({"--no_python", "--run_path", "s"}), 2);
  EXPECT_EQ(refused({"-m", "--run-path", "s"}), 2);
  ScopedEnv custom("PYTHON_EXEC", "/opt/py/bin/python");
  EXPECT_EQ(options_of({"t.py"}).command, (Command{"/opt/py/bin/python", "-u", "t.py"}));
}

TEST(ParseOptions, LocalAddrMustBeThisHosts) {
  EXPECT_FALSE(options_of({"--local-addr", "127.0.0.1", "p"}).local_iface.empty());
  EXPECT_EQ(launcher::interface_with_address("192.0.2.77"), "");  // TEST-NET-1: nobody's.
  EXPECT_EQ(refused({"--local-addr", "192.0.2.77", "p"}), 2);
}

TEST(FindMeshtrace, EnvironmentThenMeshrunsDirectoryThenPath) {
  TempDir exe_dir, path_dir, other;
  auto make_executable = [](const std::string& path, mode_t mode) {
    std::ofstream(path) << "#!/bin/sh\n";
    ::chmod(path.c_str(), mode);
  };
  ScopedEnv path("PATH", path_dir.path().c_str());
  ScopedEnv no_env("MESHRT_MESHTRACE", nullptr);
  EXPECT_EQ(launcher::find_meshtrace(exe_dir.path()), "");
  make_executable(path_dir.path() + "/meshtrace", 0755);
  EXPECT_EQ(launcher::find_meshtrace(exe_dir.path()), path_dir.path() + "/meshtrace");
  make_executable(exe_dir.path() + "/meshtrace", 0644);  // Not executable: skipped.
  EXPECT_EQ(launcher::find_meshtrace(exe_dir.path()), path_dir.path() + "/meshtrace");
  ::chmod((exe_dir.path() + "/meshtrace").c_str(), 0755);
  EXPECT_EQ(launcher::find_meshtrace(exe_dir.path()), exe_dir.path() + "/meshtrace");
  // No more guessing at ../trace/meshtrace from meshrun's directory.
  fs::create_directories(other.path() + "/bin");
  fs::create_directories(other.path() + "/trace");
  make_executable(other.path() + "/trace/meshtrace", 0755);
  EXPECT_EQ(launcher::find_meshtrace(other.path() + "/bin"), path_dir.path() + "/meshtrace");
  {
    ScopedEnv env("MESHRT_MESHTRACE", (other.path() + "/trace/meshtrace").c_str());
    EXPECT_EQ(launcher::find_meshtrace(exe_dir.path()), other.path() + "/trace/meshtrace");
  }
  {
    ScopedEnv env("MESHRT_MESHTRACE", (other.path() + "/missing").c_str());
    EXPECT_EQ(launcher::find_meshtrace(exe_dir.path()), "");  // Asked for: no fallback.
  }
  // meshrun's own directory, as the launcher itself finds it.
  EXPECT_EQ(launcher::executable_dir(), fs::canonical("/proc/self/exe").parent_path().string());
}

TEST(ErrorFile, TorchelasticsLayoutBothWays) {
  const std::string text = error_file_json("std::runtime_error: boom \"quoted\"\n2nd line",
                                           "C++ call stack\n  #0 f()\n", 1700000000);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"message": {"message":
      "std::runtime_error: boom \"quoted\"\n2nd line", "extraInfo": {"py_callstack":
      "C++ call stack\n  #0 f()\n", "timestamp": "1700000000"}}})"));
  EXPECT_EQ(describe_exception(std::make_exception_ptr(std::out_of_range("x"))),
            "std::out_of_range: x");
  EXPECT_EQ(describe_exception(std::make_exception_ptr(42)),
            "int: (not derived from std::exception)");
  EXPECT_EQ(describe_exception(nullptr), "terminate called without an active exception");

  TempDir dir;
  const std::string path = dir.path() + "/error_0.json";
  EXPECT_FALSE(launcher::read_error_file(path).has_value());
  ASSERT_TRUE(write_error_file(path, std::make_exception_ptr(std::logic_error("bad")), "stack"));
  EXPECT_EQ(launcher::read_error_file(path)->message, "std::logic_error: bad");
  EXPECT_EQ(launcher::read_error_file(path)->path, path);
  std::ofstream(path) << R"({"message": "torchelastic's newer plain form"})";
  EXPECT_EQ(launcher::read_error_file(path)->message, "torchelastic's newer plain form");
  std::ofstream(path) << "{not json";
  EXPECT_EQ(launcher::read_error_file(path)->message, "(not torchelastic's error file JSON)");
}

TEST(OutputPrefixer, MeshrtLogLinesNameTheirRankAlready) {
  for (const char* line : {"[meshrt warning rank 3 node7:4242] x", "[meshrt error rank 12 h:1] y",
                           "[meshrt info rank 0 h:9]"}) {
    EXPECT_TRUE(launcher::is_meshrt_log_line(line)) << line;
  }
  for (const char* line :
       {"", "meshrt rank 3", "[meshrt warning rank ? node7:4242] before init",
        "[meshrt warning rank 3", "[rank3]: [meshrt info rank 3 h:1]", "[x] [meshrt rank 3]",
        " [meshrt info rank 3 h:1]", "[meshrtx info rank 3 h:1]", "[meshrt info h:1] rank 3"}) {
    EXPECT_FALSE(launcher::is_meshrt_log_line(line)) << line;
  }
}

TEST(Summary, ReportLine) {
  TempDir dir;
  using launcher::MeshtraceRun;
  EXPECT_EQ(launcher::describe_report(dir.path(), std::nullopt, "meshtrace not found"),
            "report: not made: meshtrace not found");
  EXPECT_EQ(launcher::describe_report(dir.path(), MeshtraceRun{"mt report d", 0, ""}, ""),
            fmt::format("report: not made: `mt report d` wrote no {}/report.html", dir.path()));
  EXPECT_EQ(
      launcher::describe_report(dir.path(), MeshtraceRun{"mt report d", 2, "a\nno data\n\n"}, ""),
      "report: not made: `mt report d` exited with status 2: no data");
  std::ofstream(dir.path() + "/report.html") << "<html>";
  EXPECT_EQ(launcher::describe_report(dir.path(), MeshtraceRun{"mt report d", 0, ""}, ""),
            "report: " + dir.path() + "/report.html");
}

TEST(Summary, ContinuedJobSaysWhoDiedAndWhatTheJobDid) {
  launcher::SummaryInput in;
  in.run_id = "job7";
  in.nodes.resize(2);
  in.nodes[0].node_rank = 0;
  in.nodes[0].nproc = 2;
  in.nodes[1].node_rank = 1;
  in.nodes[1].host = "h1";
  in.nodes[1].pid = 77;
  in.nodes[1].rank_offset = 2;
  in.nodes[1].nproc = 2;
  auto rank = [](int r, int pid, launcher::ExitStatus exit, bool left_behind) {
    launcher::RankStatus s;
    s.rank = r;
    s.local_rank = r;
    s.node = 0;
    s.pid = pid;
    s.exit = exit;
    s.end_time = "2026-11-27T18:01:02.345Z";
    s.left_behind = left_behind;
    return s;
  };
  in.outcome.ranks = {rank(0, 10, {0, 0}, false), rank(1, 11, {-1, SIGKILL}, true)};
  launcher::Failure lost;
  lost.rank = 2;
  lost.node = 1;
  lost.host = "h1";
  lost.pid = 77;
  lost.agent_lost = true;
  lost.time = "2026-11-27T18:01:03.000Z";
  in.outcome.lost_nodes = {lost};
  EXPECT_TRUE(in.outcome.continued());
  EXPECT_TRUE(in.outcome.success());
  EXPECT_EQ(launcher::format_continued_summary(in),
            "meshrun: job finished (run 'job7')\n"
            "ranks that died and were left behind (--on-rank-failure=continue):\n"
            "  rank 1 (pid 11, node 0) died of SIGKILL at 2026-11-27T18:01:02.345Z\n"
            "  node 1 (host h1, agent pid 77), ranks 2-3: its agent was lost at "
            "2026-11-27T18:01:03.000Z\n"
            "the job went on with 1 of 4 ranks and finished: exit status 0\n");
  // No rank exited 0: not a success, and the failure summary says every rank died.
  in.outcome.ranks[0] = rank(0, 10, {3, 0}, true);
  EXPECT_FALSE(in.outcome.success());
  in.outcome.failure = lost;
  EXPECT_TRUE(contains(launcher::format_summary(in),
                       "  rank 0 (pid 10, node 0) exited with code 3 at 2026-11-27T18:01:02.345Z\n"
                       "  rank 1 (pid 11, node 0) died of SIGKILL at"))
      << launcher::format_summary(in);
  EXPECT_TRUE(
      contains(launcher::format_summary(in), "\nevery rank died: none was left to go on with\n"));
  // Nothing left behind: no such block.
  in.outcome = {};
  in.outcome.failure = lost;
  EXPECT_FALSE(contains(launcher::format_summary(in), "left behind"));
  EXPECT_FALSE(launcher::AttemptOutcome{}.continued());
  EXPECT_TRUE(launcher::AttemptOutcome{}.success());
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
