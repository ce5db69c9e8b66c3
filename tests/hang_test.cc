// End to end with real processes: examples/hang on 4 Gloo ranks. Rank 0's extra all_reduce times
// out; its watchdog dumps and signals, every other rank dumps, rank 0 exits with the watchdog's
// status and `meshtrace analyze` names what happened and where the ranks parted. Also: a dump on
// request through the FIFO while the job runs, and the throw policy.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "runtime/watchdog.h"
#include "tests/process_harness.h"

#ifndef MESHRT_HANG_EXAMPLE
#error "MESHRT_HANG_EXAMPLE must name the hang example binary"
#endif

namespace meshrt {
namespace {

using nlohmann::json;
using testing::describe;
using testing::run_ranks;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

class HangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("meshrt_hang_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string prefix() const { return (dir_ / "fr_").string(); }
#ifdef MESHRT_MESHTRACE
  // `meshtrace analyze` on the test's dumps with `flags`: its exit status (-1 when it did not
  // exit) and its output.
  std::pair<int, std::string> analyze_dumps(const std::string& flags) const {
    const std::string out = (dir_ / "verdict.out").string();
    const std::string cmd = std::string(MESHRT_MESHTRACE) + " analyze " + dir_.string() +
                            " --prefix fr_ " + flags + " > " + out;
    const int status = std::system(cmd.c_str());
    std::ifstream in(out);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            std::string(std::istreambuf_iterator<char>(in), {})};
  }
#endif
  std::filesystem::path dir_;
};

TEST_F(HangTest, EveryRankDumpsAndTheHungRankExitsWithTheWatchdogStatus) {
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_ranks({MESHRT_HANG_EXAMPLE, "--timeout-ms", "1500"}, 4,
                                 std::chrono::seconds(60), {{"MESHRT_DUMP_PREFIX", prefix()}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  ASSERT_EQ(results[0].exit_code, kWatchdogExitCode) << describe(results);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(results[r].exit_code, 0) << describe(results);

  ASSERT_TRUE(std::filesystem::exists(dir_ / "fr_1")) << describe(results);
  const json d0 = read_json(dir_ / "fr_0");
  // Not the 1.5 s timeout: the others' exit records show they will never call it.
  EXPECT_EQ(d0["dump_reason"], "failure");
  // (Which of ranks 1-3 it names depends on which had reached their exit barrier.)
  const std::string detail = d0["trigger"]["detail"];
  EXPECT_NE(detail.find("left: "), std::string::npos) << detail;
  EXPECT_NE(detail.find("program (at the end-of-run barrier) after 'world' #4, so"),
            std::string::npos)
      << detail;
  EXPECT_NE(detail.find("will never call all_reduce #5, which this rank waits in"),
            std::string::npos)
      << detail;
  EXPECT_EQ(d0["trigger"]["seq"], 5);
  EXPECT_EQ(d0["world_size"], 4);
  const json& last = d0["entries"].back();
  EXPECT_EQ(last["collective_seq_id"], 5);
  EXPECT_EQ(last["profiling_name"], "gloo:all_reduce");
  EXPECT_EQ(last["state"], "started");
  EXPECT_FALSE(last.contains("frames")) << "per-op stacks are off unless asked";
  for (int r = 1; r < 4; ++r) {
    const json d = read_json(dir_ / ("fr_" + std::to_string(r)));
    EXPECT_EQ(d["dump_reason"], "remote") << r;
    EXPECT_EQ(d["trigger"]["rank"], 0) << r;
    ASSERT_EQ(d["entries"].size(), 4u) << r;
    EXPECT_EQ(d["entries"].back()["state"], "completed") << r;
  }
  for (const auto& f : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(f.path().filename().string().find(".tmp"), std::string::npos) << f.path();
  }

#ifdef MESHRT_MESHTRACE
  const auto [status, out] = analyze_dumps("--json");
  EXPECT_EQ(status, 1);  // A problem was found.
  const json verdict = json::parse(out);
  ASSERT_FALSE(verdict["findings"].empty()) << verdict.dump(1);
  const json& f = verdict["findings"][0];
  EXPECT_EQ(f["kind"], "not_joined") << f.dump(1);
  EXPECT_EQ(f["seq"], 5) << f.dump(1);
  EXPECT_EQ(f["op"], "all_reduce") << f.dump(1);
  EXPECT_EQ(f["missing_ranks"], json::array({1, 2, 3})) << f.dump(1);
  // Where the ranks parted, with the call sites the records carry (full paths in JSON): the
  // extra all_reduce is examples/hang.cc:40, the loop that rank 0 ran once more :45.
  const json& split = f["divergence"]["call_sites_differ"];
  ASSERT_TRUE(split.is_object()) << f.dump(1);
  EXPECT_EQ(split["seq"], 3) << f.dump(1);
  const std::string file = split["sites"][0]["file"];
  EXPECT_TRUE(file.ends_with("examples/hang.cc")) << file;
  EXPECT_EQ(split["sites"][0]["line"], 40) << f.dump(1);
  EXPECT_EQ(split["sites"][1]["line"], 45) << f.dump(1);

  // The verdict for people: the finding, then the divergence on a line of its own (basenames).
  const auto [text_status, text] = analyze_dumps("");
  EXPECT_EQ(text_status, 1);
  EXPECT_NE(text.find("rank 0 issued all_reduce #5 that ranks [1, 2, 3] never called"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n      diverged: rank 0 ran all_reduce #5 at hang.cc:45; ranks [1, 2, 3] "
                      "ran their last all_reduce (#4) at hang.cc:45 and moved on; call sites "
                      "first differ at all_reduce #3: rank 0 at hang.cc:40, ranks [1, 2, 3] at "
                      "hang.cc:45\n"),
            std::string::npos)
      << text;
#endif
}

TEST_F(HangTest, TraceStacksPutEachOpsCallStackInTheDump) {
  const auto results =
      run_ranks({MESHRT_HANG_EXAMPLE, "--timeout-ms", "1000"}, 2, std::chrono::seconds(60),
                {{"MESHRT_DUMP_PREFIX", prefix()}, {"MESHRT_TRACE_STACKS", "1"}});
  ASSERT_EQ(results[0].exit_code, kWatchdogExitCode) << describe(results);
  for (int r = 0; r < 2; ++r) {
    const json d = read_json(dir_ / ("fr_" + std::to_string(r)));
    ASSERT_EQ(d["entries"].size(), r == 0 ? 5u : 4u) << r;
    for (const json& e : d["entries"]) {
      // Innermost first, meshrt's own frames folded away: the program's call, then main.
      const json& frames = e["frames"];
      ASSERT_GE(frames.size(), 2u) << e.dump(1);
      EXPECT_NE(frames[0]["name"].get<std::string>().find("run_rank"), std::string::npos)
          << frames.dump(1);
      EXPECT_TRUE(frames[0]["filename"].get<std::string>().ends_with("examples/hang.cc"))
          << frames.dump(1);
      // Two all_reduces at hang.cc:35, rank 0's extra one at :40, the rest at :45.
      const int seq = e["collective_seq_id"];
      const int line = seq <= 2 ? 35 : r == 0 && seq == 3 ? 40 : 45;
      EXPECT_EQ(frames[0]["line"], line) << frames.dump(1);
      EXPECT_EQ(frames[1]["name"], "main") << frames.dump(1);
      EXPECT_EQ(e["caller"], frames[0]["filename"].get<std::string>() + ":" + std::to_string(line));
    }
  }
}

TEST_F(HangTest, ThrowPolicyFailsTheOpAndTheJobEndsWithDumps) {
  const auto results =
      run_ranks({MESHRT_HANG_EXAMPLE, "--timeout-ms", "1000"}, 2, std::chrono::seconds(60),
                {{"MESHRT_DUMP_PREFIX", prefix()}, {"MESHRT_ON_TIMEOUT", "throw"}});
  EXPECT_EQ(results[0].exit_code, 1) << describe(results);
  EXPECT_NE(results[0].output.find("hang: meshrt [timeout] rank 0, comm 'world', all_reduce #5"),
            std::string::npos)
      << describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "fr_0"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "fr_1"));
}

TEST_F(HangTest, ADumpThatCannotBeWrittenIsLoggedAndTheAbortPolicyStillEndsTheJob) {
  std::ofstream(dir_ / "file") << "a file where a directory should be";
  const auto prefix = dir_ / "file" / "sub" / "fr_";
  const auto results =
      run_ranks({MESHRT_HANG_EXAMPLE, "--timeout-ms", "1000"}, 2, std::chrono::seconds(60),
                {{"MESHRT_DUMP_PREFIX", prefix.string()}});
  EXPECT_EQ(results[0].exit_code, kWatchdogExitCode) << describe(results);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(results[r].output.find("could not write the flight recorder dump to " +
                                     prefix.string() + std::to_string(r) + ": cannot create " +
                                     (dir_ / "file" / "sub").string() + ": Not a directory"),
              std::string::npos)
        << describe(results);
  }
}

TEST_F(HangTest, WritingToTheDumpPipeDumpsWhileTheJobRuns) {
  const std::string pipe_stem = (dir_ / "pipe_").string();
  auto job = std::async(std::launch::async, [&] {
    return run_ranks({MESHRT_HANG_EXAMPLE, "--timeout-ms", "6000"}, 2, std::chrono::seconds(60),
                     {{"MESHRT_DUMP_PREFIX", prefix()}, {"MESHRT_DUMP_PIPE", pipe_stem}});
  });
  // Rank 1 finishes quickly and waits at the exit for rank 0, which hangs for 6 s.
  const auto fifo = dir_ / "pipe_1.pipe";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!std::filesystem::exists(fifo) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(fifo));
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "1", 1), 1);
  ::close(fd);
  const auto dump = dir_ / "fr_1";
  while (!std::filesystem::exists(dump) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(dump)) << "no dump within the deadline";
  EXPECT_EQ(read_json(dump)["dump_reason"], "pipe");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "fr_0"));  // Only the rank asked dumped.
  const auto results = job.get();
  EXPECT_EQ(results[0].exit_code, kWatchdogExitCode) << describe(results);
  EXPECT_EQ(read_json(dump)["dump_reason"], "remote");  // Then the hang's dump replaced it.
}

}  // namespace
}  // namespace meshrt
