// The live verdict end to end (docs/diagnosis.md): examples/stall on 4 real Gloo ranks under
// meshrun with MESHRT_STALL_S=2 and a 60 s op timeout, so that only the live path can name the
// culprit in time. Each case checks that meshrun's verdict names the rank, op, sequence number
// and mesh dim, that it comes within the threshold + 5 s of the stall (the first rank reaching
// step 3) and before any timeout, then stops the job with SIGTERM.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_harness.h"

#if !defined(MESHRT_MESHRUN) || !defined(MESHRT_STALL_EXAMPLE) || !defined(MESHRT_MESHTRACE)
#error "MESHRT_MESHRUN, MESHRT_STALL_EXAMPLE and MESHRT_MESHTRACE must name the binaries"
#endif

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int kStallS = 2;

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The line of `text` that contains `needle`, if any.
std::optional<std::string> line_with(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return std::nullopt;
  const size_t begin = text.rfind('\n', at);
  const size_t b = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(b, text.find('\n', at) - b);
}

// Runs `command` (bounded by its own `timeout`) and returns its stdout.
std::string run_command(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

// How many pixels of the PNG at `path` have the colour (r, g, b): a decoder for what headless
// Chromium writes (8-bit RGB or RGBA, not interlaced); -1 when the file is not such a PNG.
int64_t count_pixels(const fs::path& path, uint8_t r, uint8_t g, uint8_t b) {
  const std::string png = read_all(path);
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return -1;
  auto be32 = [&](size_t at) {
    return static_cast<uint32_t>(static_cast<uint8_t>(png[at])) << 24 |
           static_cast<uint32_t>(static_cast<uint8_t>(png[at + 1])) << 16 |
           static_cast<uint32_t>(static_cast<uint8_t>(png[at + 2])) << 8 |
           static_cast<uint8_t>(png[at + 3]);
  };
  uint32_t width = 0, height = 0, channels = 0;
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = be32(at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) return -1;
    if (type == "IHDR") {
      width = be32(at + 8);
      height = be32(at + 12);
      const int depth = png[at + 16], colour = png[at + 17], interlace = png[at + 20];
      if (depth != 8 || interlace != 0 || (colour != 2 && colour != 6)) return -1;
      channels = colour == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  const size_t stride = static_cast<size_t>(width) * channels;
  std::vector<uint8_t> raw((stride + 1) * height);
  uLongf raw_size = raw.size();
  if (channels == 0 ||
      ::uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()),
                   idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    return -1;
  }
  // Undo each scanline's filter (PNG's five: none, sub, up, average, Paeth).
  std::vector<uint8_t> prev(stride, 0), line(stride);
  int64_t count = 0;
  for (uint32_t y = 0; y < height; ++y) {
    const uint8_t* in = &raw[y * (stride + 1)];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= channels ? line[i - channels] : 0, up = prev[i];
      const int c = i >= channels ? prev[i - channels] : 0;
      int pred = 0;
      switch (in[0]) {
        case 1:
          pred = a;
          break;
        case 2:
          pred = up;
          break;
        case 3:
          pred = (a + up) / 2;
          break;
        case 4: {
          const int p = a + up - c, pa = std::abs(p - a), pb = std::abs(p - up),
                    pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
          break;
        }
        default:
          break;
      }
      line[i] = static_cast<uint8_t>(in[1 + i] + pred);
    }
    for (size_t x = 0; x < stride; x += channels) {
      count += line[x] == r && line[x + 1] == g && line[x + 2] == b;
    }
    prev.swap(line);
  }
  return count;
}

// What one stalled job showed.
struct Seen {
  std::string verdict;           // meshrun's "stall ..." line; empty if none came.
  Clock::duration to_verdict{};  // From the first rank's "step 3" to the verdict.
  bool timed_out_first = false;  // A watchdog timeout showed before the verdict.
  std::string out, err;          // Everything meshrun printed.
  int exit_code = -1;
  Clock::duration stop_to_end{};  // From the SIGTERM to meshrun's end.
  fs::path log_dir;
};

// Runs examples/stall --case `mode` under meshrun until the verdict shows (or 30 s pass), calls
// `while_stalled` with the log directory, then stops the job and returns what it showed.
Seen run_stalled(const std::string& mode, const std::map<std::string, std::string>& env = {},
                 const std::function<void(const fs::path&)>& while_stalled = {},
                 const std::string& wait_for = "meshrun: stall ") {
  Seen seen;
  seen.log_dir = fs::temp_directory_path() / fmt::format("meshrt_live_{}_{}", ::getpid(), mode);
  fs::remove_all(seen.log_dir);
  fs::create_directories(seen.log_dir);
  const fs::path out = seen.log_dir / "meshrun.out", err = seen.log_dir / "meshrun.err";
  std::vector<std::string> argv = {MESHRT_MESHRUN,
                                   "--standalone",
                                   "--nproc-per-node",
                                   "4",
                                   "--log-dir",
                                   (seen.log_dir / "logs").string(),
                                   "--tee",
                                   "3",
                                   MESHRT_STALL_EXAMPLE,
                                   "--case",
                                   mode,
                                   "--timeout-ms",
                                   "60000",
                                   "--sleep-s",
                                   "60"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::setenv("MESHRT_STALL_S", std::to_string(kStallS).c_str(), 1);
    ::setenv("MESHRT_INIT_TIMEOUT_MS", "30000", 1);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    _exit(127);
  }
  std::optional<Clock::time_point> stall_at;
  const auto deadline = Clock::now() + 30s;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    if (!stall_at && read_all(out).find("step 3") != std::string::npos) stall_at = Clock::now();
    const std::string e = read_all(err);
    if (auto line = line_with(e, wait_for)) {
      seen.verdict = *line;
      // Without a "step 3" line the stall was never seen to begin: count that as too late.
      seen.to_verdict = stall_at ? Clock::now() - *stall_at : Clock::duration::max();
      seen.timed_out_first = e.find("[timeout]") < e.find(wait_for);
      break;
    }
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return seen;
  }
  if (while_stalled) while_stalled(seen.log_dir);
  // SIGTERM reaches every rank through meshrun; SIGKILL if the job outlives its grace.
  ::kill(pid, SIGTERM);
  const auto stopped_at = Clock::now();
  int status = 0;
  const auto stop_deadline = Clock::now() + 20s;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > stop_deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  seen.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  seen.stop_to_end = Clock::now() - stopped_at;
  seen.out = read_all(out);
  seen.err = read_all(err);
  return seen;
}

void expect_in_time(const Seen& s) {
  EXPECT_FALSE(s.verdict.empty()) << s.err;
  EXPECT_FALSE(s.timed_out_first) << s.err;
  EXPECT_LE(s.to_verdict, std::chrono::seconds(kStallS + 5)) << s.verdict;
  std::printf("time from stall to verdict: %.1f s\n",
              std::chrono::duration<double>(s.to_verdict).count());
}

class LiveDiagnosis : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(seen_.log_dir); }
  Seen seen_;
};

TEST_F(LiveDiagnosis, RankStuckInUserCode) {
  seen_ = run_stalled("user_code");
  expect_in_time(seen_);
  // Rank 3 is in neither the tp all_reduce #3 nor the pp broadcast #3 its peers wait in: the
  // verdict names one of them, and what rank 3 does.
  const bool tp = seen_.verdict.find(
                      ": mesh0/tp all_reduce #3 (dim tp) — rank 3 has not entered "
                      "it;") != std::string::npos;
  const bool pp = seen_.verdict.find(
                      ": mesh0/pp broadcast #3 (dim pp) — rank 3 has not entered "
                      "it;") != std::string::npos;
  EXPECT_TRUE(tp || pp) << seen_.verdict;
  EXPECT_NE(seen_.verdict.find("rank 3 last completed mesh0/pp broadcast #2 and has been in user "
                               "code for "),
            std::string::npos)
      << seen_.verdict;
  // And where: its main thread's stack from the snapshot (examples/stall.cc:40 sleeps).
  EXPECT_NE(seen_.verdict.find(", at run_rank (stall.cc:40) <- main (stall.cc:"), std::string::npos)
      << seen_.verdict;
}

// Stopping a stalled job is how people give up on a hang: meshrun has every rank dump before it
// passes the signal on, so the post-mortem still names the culprit.
TEST_F(LiveDiagnosis, StoppingAStalledJobDumpsEveryRankAndRunsThePostMortem) {
  seen_ = run_stalled("user_code");
  expect_in_time(seen_);
  EXPECT_NE(seen_.err.find("meshrun: received SIGTERM during a stall (mesh0/"), std::string::npos)
      << seen_.err;
  std::printf("SIGTERM to meshrun's end: %.1f s\n",
              std::chrono::duration<double>(seen_.stop_to_end).count());
  EXPECT_LE(seen_.stop_to_end, 8s) << seen_.err;
  EXPECT_EQ(seen_.exit_code, 128 + SIGTERM) << seen_.err;
  for (int r = 0; r < 4; ++r) {
    const auto dump = nlohmann::json::parse(
        read_all(seen_.log_dir / "logs" / "attempt_0" / fmt::format("fr_trace_{}", r)), nullptr,
        false);
    EXPECT_TRUE(dump.is_object()) << "rank " << r << "'s dump\n" << seen_.err;
  }
  const size_t roots = seen_.err.find("Root causes:");
  ASSERT_NE(roots, std::string::npos) << seen_.err;
  EXPECT_NE(seen_.err.find("culprit rank 3", roots), std::string::npos) << seen_.err;
}

// A compute straggler (rank 3 works 10x longer per step, nothing hangs): named live, with the
// group it makes wait, by how much, and where its main thread is; no other rank is named.
TEST_F(LiveDiagnosis, ComputeStragglerIsNamedLive) {
  seen_ = run_stalled("straggler", {}, {}, "meshrun: straggler: ");
  ASSERT_FALSE(seen_.verdict.empty()) << seen_.err;
  std::printf("%s\n%.1f s after the job began\n", seen_.verdict.c_str(),
              std::chrono::duration<double>(seen_.to_verdict).count());
  EXPECT_LE(seen_.to_verdict, 15s) << seen_.verdict;
  EXPECT_NE(seen_.verdict.find("meshrun: straggler: rank 3 arrives late at mesh0/"),
            std::string::npos)
      << seen_.verdict;
  EXPECT_NE(seen_.verdict.find("; its main thread: "), std::string::npos) << seen_.verdict;
  for (int innocent = 0; innocent < 3; ++innocent) {
    EXPECT_EQ(seen_.err.find(fmt::format("straggler: rank {} ", innocent)), std::string::npos)
        << seen_.err;
  }
  EXPECT_EQ(seen_.err.find("meshrun: stall "), std::string::npos) << seen_.err;
}

TEST_F(LiveDiagnosis, RankSkipsACollective) {
  seen_ = run_stalled("skip");
  expect_in_time(seen_);
  // It went on past the op (its pp broadcast #3 completed): it skipped it, not merely late.
  EXPECT_NE(seen_.verdict.find(": mesh0/tp all_reduce #3 (dim tp) — rank 3 skipped it and went "
                               "on with other ops while its peers wait in it; rank 3 last "
                               "completed mesh0/pp broadcast #3"),
            std::string::npos)
      << seen_.verdict;
}

TEST_F(LiveDiagnosis, RankCallsADifferentCollectiveOnOneDim) {
  seen_ = run_stalled("wrong_op");
  expect_in_time(seen_);
  EXPECT_NE(seen_.verdict.find(": mesh0/tp all_reduce #3 (dim tp) — "), std::string::npos)
      << seen_.verdict;
  EXPECT_NE(seen_.verdict.find("rank 3 called all_gather"), std::string::npos) << seen_.verdict;
  EXPECT_NE(seen_.verdict.find("type_mismatch"), std::string::npos) << seen_.verdict;
  // The tp group of 2 has no majority; its sibling group (ranks 0 and 1) ran all_reduce, so only
  // rank 3 is to blame.
  EXPECT_NE(seen_.verdict.find("culprit rank 3)"), std::string::npos) << seen_.verdict;
}

TEST_F(LiveDiagnosis, PipelineP2PDeadlock) {
  seen_ = run_stalled("p2p");
  expect_in_time(seen_);
  // Rank 2 waits for a send from rank 3 that never comes (it should have received from rank 0).
  EXPECT_NE(seen_.verdict.find(": world recv #1 — "), std::string::npos) << seen_.verdict;
  // Rank 2 named the wrong peer: it is blamed, not rank 3, which finished its part.
  EXPECT_NE(seen_.verdict.find("rank 2 posted recv #1 from rank 3 but rank 3 never sent to rank 2"),
            std::string::npos)
      << seen_.verdict;
  EXPECT_EQ(seen_.verdict.find("rank 3 did not post"), std::string::npos) << seen_.verdict;
}

TEST_F(LiveDiagnosis, DumpOnStallDumpsEveryRankAndTheJobGoesOn) {
  std::vector<std::string> reasons;
  bool still_running = false;
  seen_ = run_stalled("user_code", {{"MESHRT_DUMP_ON_STALL", "1"}}, [&](const fs::path& dir) {
    const auto deadline = Clock::now() + 5s;
    for (int r = 0; r < 4; ++r) {
      const fs::path dump = dir / "logs" / "attempt_0" / fmt::format("fr_trace_{}", r);
      while (!fs::exists(dump) && Clock::now() < deadline) std::this_thread::sleep_for(50ms);
      if (!fs::exists(dump)) continue;
      reasons.push_back(nlohmann::json::parse(read_all(dump))["dump_reason"]);
    }
    // Rank 3 still sleeps in user code: nothing ended the job.
    still_running = read_all(dir / "meshrun.out").find("done") == std::string::npos &&
                    read_all(dir / "meshrun.err").find("exited with code") == std::string::npos;
  });
  expect_in_time(seen_);
  EXPECT_EQ(reasons, std::vector<std::string>(4, "stall")) << seen_.err;
  EXPECT_TRUE(still_running) << seen_.err;
}

// The live view (docs/diagnosis.md): while the job stalls, meshrun's status page, loaded in
// headless Chromium, and `meshtrace live` name the stalled rank and op, and the page's stacks link
// shows where rank 3's main thread is.
TEST_F(LiveDiagnosis, StatusPageAndMeshtraceLiveNameTheStall) {
  const std::string chromium = [] {
    std::string c = run_command("command -v chromium || command -v chromium-browser");
    while (!c.empty() && c.back() == '\n') c.pop_back();
    return c;
  }();
  ASSERT_FALSE(chromium.empty())
      << "chromium is not installed: it is a declared test dependency (.ci/install-deps.sh)";
  std::string url, text, dom, stacks, metrics;
  int64_t culprit_pixels = -1;
  seen_ = run_stalled("user_code", {}, [&](const fs::path& dir) {
    const auto line = line_with(read_all(dir / "meshrun.err"), "meshrun: live status: http://");
    if (!line) return;
    const size_t at = line->find("http://");
    url = line->substr(at, line->find(' ', at) - at);
    text = run_command(fmt::format("timeout 20 '{}' live '{}' --once", MESHRT_MESHTRACE, url));
    // The page draws itself from /status.json: the DOM after its script ran shows the verdict.
    const std::string browse = fmt::format(
        "timeout 60 '{}' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
        "--disable-quic --no-first-run --disable-background-networking "
        "--disable-component-update --disable-sync --user-data-dir='{}' "
        "--virtual-time-budget=5000 --dump-dom ",
        chromium, (dir / "chromium").string());
    dom = run_command(browse + "'" + url + "' 2>/dev/null");
    // What people see: the mesh drawn, rank 3's cell outlined in the culprit's colour.
    const fs::path shot = dir / "status.png";
    run_command(fmt::format(
        "timeout 60 '{}' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
        "--no-first-run --user-data-dir='{}' --virtual-time-budget=5000 --hide-scrollbars "
        "--window-size=1200,900 --screenshot='{}' '{}' >/dev/null 2>&1",
        chromium, (dir / "chromium-shot").string(), shot.string(), url));
    culprit_pixels = count_pixels(shot, 0xff, 0x00, 0xaa);
    // The URL carries the job's token (?token=...): the stacks path goes before it.
    const size_t query = url.find('?');
    stacks = run_command(browse + "'" + url.substr(0, query) + "ranks/3/stacks" +
                         url.substr(query) + "' 2>/dev/null");
    // The live metrics while the stall stands (#27): the verdict's op as a gauge.
    metrics = run_command(fmt::format(
        "timeout 20 python3 -c 'import sys, urllib.request; "
        "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' '{}'",
        url.substr(0, query) + "metrics" + url.substr(query)));
  });
  expect_in_time(seen_);
  ASSERT_FALSE(url.empty()) << seen_.err;
  // Text: the verdict line, and rank 3's row in user code while rank 0 waits past the threshold.
  EXPECT_NE(text.find("verdict: stall "), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3 has not entered it"), std::string::npos) << text;
  EXPECT_NE(text.find("\n3     user code for "), std::string::npos) << text;
  EXPECT_NE(text.find("broadcast #3 running "), std::string::npos) << text;
  // The page: the verdict, drawn by the page's script, and a row per rank.
  EXPECT_NE(dom.find("<div id=\"verdict\" class=\"stall\">stall "), std::string::npos) << dom;
  EXPECT_NE(dom.find("rank 3 has not entered it"), std::string::npos) << dom;
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(dom.find(fmt::format("<tr id=\"rank-{}\">", r)), std::string::npos) << dom;
  }
  const size_t row3 = dom.find("<tr id=\"rank-3\">");
  ASSERT_NE(row3, std::string::npos) << dom;
  EXPECT_NE(dom.find("user code for", row3), std::string::npos) << dom;
  EXPECT_NE(dom.find("class=\"slow\">broadcast #3 running"), std::string::npos) << dom;
  // The mesh: a pp x tp grid, rank 3's cell the culprit, ranks 1 and 2 (in ops with it past the
  // threshold) pointing at it, and the outline on screen.
  EXPECT_NE(dom.find("mesh pp 2 x tp 2; culprit outlined"), std::string::npos) << dom;
  const size_t cell3 = dom.find("<td class=\"culprit\" id=\"cell-3\">");
  ASSERT_NE(cell3, std::string::npos) << dom;
  EXPECT_NE(dom.find("user code", cell3), std::string::npos) << dom;
  for (const int waiting : {1, 2}) {
    const size_t cell = dom.find(fmt::format("<td class=\"waiting\" id=\"cell-{}\">", waiting));
    ASSERT_NE(cell, std::string::npos) << dom;
    EXPECT_NE(dom.find("waits for rank 3", cell), std::string::npos) << dom;
  }
  EXPECT_GT(culprit_pixels, 500) << "the culprit's outline colour in the screenshot";
  // Its links carry the token on (every request wants it).
  EXPECT_NE(dom.find("href=\"ranks/3/stacks?token="), std::string::npos) << dom;
  EXPECT_NE(url.find("?token="), std::string::npos) << url;
  // /metrics: the stall verdict stands, on one of the step-3 ops rank 3 holds up (the longest in
  // flight); rank 3 computes; its counts are there.
  EXPECT_NE(metrics.find("\nmeshrt_stalled 1\n"), std::string::npos) << metrics;
  const size_t stalled = metrics.find("\nmeshrt_stalled_op{rank=\"");
  ASSERT_NE(stalled, std::string::npos) << metrics;
  EXPECT_NE(metrics.find(",seq=\"3\"} 1\n", stalled), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("meshrt_rank_state{rank=\"3\",state=\"user_code\"} 1"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("meshrt_ops_total{rank=\"3\",comm=\"mesh0/pp\",mesh_dim=\"pp\""),
            std::string::npos)
      << metrics;
  // The stacks link: rank 3's main thread sleeps in run_rank (examples/stall.cc:40).
  EXPECT_NE(stacks.find("(main thread)"), std::string::npos) << stacks;
  EXPECT_NE(stacks.find("run_rank (../examples/stall.cc:40)"), std::string::npos) << stacks;
}

// Without a launcher (MASTER_ADDR set by hand, as mpirun and srun jobs have no meshrun either),
// rank 0 hosts the store and starts meshrt-monitor, which gives the same verdict; it ends with
// rank 0.
TEST_F(LiveDiagnosis, WithoutMeshrunRankZeroStartsTheMonitor) {
  seen_.log_dir = fs::temp_directory_path() / fmt::format("meshrt_live_{}_nolauncher", ::getpid());
  fs::remove_all(seen_.log_dir);
  fs::create_directories(seen_.log_dir);
  const std::string port = std::to_string(meshrt::testing::free_port());
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string out = (seen_.log_dir / fmt::format("rank{}.out", r)).string();
      const std::string err = (seen_.log_dir / fmt::format("rank{}.err", r)).string();
      std::freopen(out.c_str(), "w", stdout);
      std::freopen(err.c_str(), "w", stderr);
      ::setenv("MESHRT_STALL_S", std::to_string(kStallS).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", "4", 1);
      ::setenv("MESHRT_DUMP_PREFIX", (seen_.log_dir / "fr_").c_str(), 1);
      ::execl(MESHRT_STALL_EXAMPLE, MESHRT_STALL_EXAMPLE, "--case", "user_code", "--timeout-ms",
              "60000", "--sleep-s", "60", static_cast<char*>(nullptr));
      _exit(127);
    }
    ranks.push_back(pid);
  }
  std::string err;
  const auto deadline = Clock::now() + 30s;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    err = read_all(seen_.log_dir / "rank0.err");
    if (err.find("meshrt-monitor: live status: http://") != std::string::npos) break;
  }
  // Its command line, as /proc/<pid>/cmdline has it (arguments end in NUL).
  const std::string monitor_of_rank0 = std::string("--parent-pid\0", 13) + std::to_string(ranks[0]);
  const auto monitors = meshrt::testing::processes_with(monitor_of_rank0);
  // Rank 0 killed outright: its monitor must not outlive it.
  for (const pid_t pid : ranks) ::kill(pid, SIGKILL);
  for (const pid_t pid : ranks) ::waitpid(pid, nullptr, 0);
  const auto gone_by = Clock::now() + 5s;
  while (!meshrt::testing::processes_with(monitor_of_rank0).empty() && Clock::now() < gone_by) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(monitors.size(), 1u) << "no meshrt-monitor was running for rank 0";
  EXPECT_TRUE(meshrt::testing::processes_with(monitor_of_rank0).empty())
      << "meshrt-monitor outlived rank 0";

  const auto verdict = line_with(err, "meshrt-monitor: stall ");
  ASSERT_TRUE(verdict) << err;
  EXPECT_TRUE(verdict->find(": mesh0/tp all_reduce #3 (dim tp) — rank 3 has not entered it;") !=
                  std::string::npos ||
              verdict->find(": mesh0/pp broadcast #3 (dim pp) — rank 3 has not entered it;") !=
                  std::string::npos)
      << *verdict;
  EXPECT_NE(verdict->find(", at run_rank (stall.cc:40) <- main (stall.cc:"), std::string::npos)
      << *verdict;
  // The verdict comes before the status page's address, which it announces.
  EXPECT_LT(err.find("meshrt-monitor: stall "), err.find("meshrt-monitor: live status: "));
  // The snapshots it judged are beside the dumps.
  EXPECT_TRUE(fs::exists(seen_.log_dir / "meshrt_live_default_0")) << err;
}

}  // namespace
