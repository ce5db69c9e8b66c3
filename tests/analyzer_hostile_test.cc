// meshtrace on hostile input: crafted dumps claiming huge world sizes or ranks, files that are
// not dumps (a 1 GiB garbage file, a JSON array, an unknown pickle), peers outside their group.
// Each must end in exit status 2 with a message naming the file and the fault, fast and without
// allocating what the file claims.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/process_harness.h"
#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_fixtures.h"

#ifndef MESHRT_MESHTRACE
#error "MESHRT_MESHTRACE must name the meshtrace binary"
#endif

namespace meshrt {
namespace {

namespace fs = std::filesystem;
using testing::FrJob;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Replaces the first `from` in `text` (which must hold it).
std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

struct CliResult {
  int exit_code = -1;
  std::string err;
  double seconds = 0;
};

class AnalyzerHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtrace-hostile-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    FrJob job(3);
    job.add_group({"world", "default_pg", {0, 1, 2}, std::nullopt});
    job.collective("world", "all_reduce", 4);
    job.send(0, "world", 1, 8);
    job.recv(1, "world", 0, 8);
    job.write(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // meshtrace analyze on the directory, its address space capped at 1 GiB so that an
  // allocation sized by a crafted number fails the test instead of swapping the machine.
  CliResult analyze() const {
    const fs::path err = dir_.string() + ".stderr";
    const std::string cmd = fmt::format("ulimit -v 1048576; exec {} analyze {} 2>'{}'",
                                        MESHRT_MESHTRACE, dir_.string(), err.string());
    const auto start = std::chrono::steady_clock::now();
    const auto results = testing::run_ranks({"/bin/sh", "-c", cmd}, 1, std::chrono::seconds(60));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    CliResult r{results[0].exit_code, read_text(err), took.count()};
    fs::remove(err);
    return r;
  }

  // Rewrites rank 1's dump with `from` replaced by `to`; expects exit 2 naming fr_1 and `says`.
  void expect_refused(const std::string& from, const std::string& to, const std::string& says) {
    const std::string original = read_text(dir_ / "fr_1");
    write_text(dir_ / "fr_1", replace(original, from, to));
    const CliResult r = analyze();
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("fr_1"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    write_text(dir_ / "fr_1", original);
  }

  fs::path dir_;
};

TEST_F(AnalyzerHostileTest, TheUntouchedJobIsAnalyzed) { EXPECT_EQ(analyze().exit_code, 0); }

TEST_F(AnalyzerHostileTest, HugeWorldSizesAndRanksAreRefusedBeforeAllocating) {
  expect_refused("\"world_size\":3", "\"world_size\":4000000000000",
                 "world_size 4000000000000 is outside 1..1048576");
  expect_refused("\"world_size\":3", "\"world_size\":-5", "world_size -5 is outside");
  expect_refused("\"world_size\":3", "\"world_size\":1000000", "says world_size 1000000");
  // A group member beyond the dump's world, and beyond any world (pg_config's string and array
  // forms).
  expect_refused("\"ranks\":\"[0, 1, 2]\"", "\"ranks\":\"[0, 1, 999999]\"",
                 "group 'world' names rank 999999, outside world_size 3");
  expect_refused("\"ranks\":\"[0, 1, 2]\"", "\"ranks\":\"[0, 1, 2147483647]\"", "is too large");
  expect_refused("\"ranks\":\"[0, 1, 2]\"", "\"ranks\":\"[0, 1, 99999999999]\"", "bad rank list");
  expect_refused("\"ranks\":\"[0, 1, 2]\"", "\"ranks\":[0,1,99999999999]",
                 "rank 99999999999 is out of range");
  expect_refused("\"peer\":0", "\"peer\":2000000000", "peer 2000000000 is out of range");
  expect_refused("\"version\":\"2.10\"", "\"version\":\"99999999999.10\"",
                 "is not '<major>.<minor>'");
  // A file named for a rank no world holds.
  fs::rename(dir_ / "fr_2", dir_ / "fr_999999999");
  const CliResult r = analyze();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fr_999999999"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 999999999 is outside"), std::string::npos) << r.err;
}

TEST_F(AnalyzerHostileTest, PeerOutsideItsGroupIsRefused) {
  FrJob job(4);
  job.add_group({"world", "default_pg", {0, 1, 2, 3}, std::nullopt});
  job.add_group({"pair", "pair", {0, 1}, std::nullopt});
  job.send(0, "pair", 1, 8);
  job.recv(1, "pair", 0, 8);
  job.write(dir_);
  expect_refused("\"peer\":0", "\"peer\":3", "peer rank 3 is not a member of group 'pair'");
}

TEST_F(AnalyzerHostileTest, NonDumpsFailFromTheirFirstBytes) {
  expect_refused(read_text(dir_ / "fr_1"), "[1, 2, 3]", "neither a JSON object nor a pickle");
  expect_refused(read_text(dir_ / "fr_1"), "\x80\x09garbage", "pickle of unknown protocol 9");
  expect_refused(read_text(dir_ / "fr_1"), "", "empty file");
  expect_refused(read_text(dir_ / "fr_1"), "{", "neither a JSON object nor a pickle");

  // 1 GiB of garbage (sparse: no disk), under a 1 GiB address-space cap: reading it whole
  // could not even be tried; the first bytes settle it at once.
  {
    std::ofstream out(dir_ / "fr_1", std::ios::binary | std::ios::trunc);
    out << "GARBAGE!";
  }
  fs::resize_file(dir_ / "fr_1", uintmax_t{1} << 30);
  const CliResult r = analyze();
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fr_1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("starts with 'GARBAGE!"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10.0);
}

}  // namespace
}  // namespace meshrt
