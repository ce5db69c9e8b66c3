// meshtrace analyze: every finding category, blame by majority whatever the load order, waits
// followed across groups, where ranks diverged (with call sites), p2p channels, coalesced groups,
// wrapped rings, missing, corrupt and hostile files, version checks, PyTorch FR pickles written by
// Python's own pickler, and the CLI's exit statuses and JSON. Dumps come from a simulated job
// (trace/analyze/dump_fixtures.h).
#include "trace/analyze/analyzer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tests/process_harness.h"
#include "trace/analyze/dump_fixtures.h"
#include "trace/analyze/format.h"
#include "trace/analyze/json_cursor.h"
#include "trace/analyze/live_verdict.h"
#include "trace/analyze/pickle_reader.h"
#include "trace/dump_format.h"
#include "trace/tracer.h"

#ifndef MESHRT_MESHTRACE
#error "MESHRT_MESHTRACE must name the meshtrace binary"
#endif

namespace meshrt {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using testing::FrGroup;
using testing::FrJob;
using trace::AnalyzeOptions;
using trace::Finding;
using trace::FindingKind;
using trace::Report;

constexpr const char* kPython = "/usr/bin/python3";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// 8 ranks as a 2 x 4 mesh (dp, tp): tp groups [0-3] and [4-7], dp groups [r, r+4], and world.
FrJob mesh_job() {
  FrJob job(8);
  job.add_group({"world", "default_pg", {0, 1, 2, 3, 4, 5, 6, 7}, std::nullopt});
  job.add_group({"mesh0/tp", "mesh_tp", {0, 1, 2, 3}, "tp"});
  job.add_group({"mesh0/tp", "mesh_tp", {4, 5, 6, 7}, "tp"});
  for (int r = 0; r < 4; ++r) job.add_group({"mesh0/dp", "mesh_dp", {r, r + 4}, "dp"});
  return job;
}

// Per step: tp all_reduce and all_gather, dp reduce_scatter, world all_reduce.
void train(FrJob& job, int steps) {
  for (int s = 0; s < steps; ++s) {
    job.collective("mesh0/tp", "all_reduce", 1024);
    job.collective("mesh0/tp", "all_gather", 256);
    job.collective("mesh0/dp", "reduce_scatter", 4096);
    job.collective("world", "all_reduce", 1);
  }
}

FrJob world_job(int n) {
  FrJob job(n);
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  job.add_group({"world", "default_pg", ranks, std::nullopt});
  return job;
}

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class AnalyzerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtrace-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  Report analyze(AnalyzeOptions options = {}) { return trace::analyze_directory(dir_, options); }

  // Runs meshtrace with a time limit; stdout and stderr apart.
  CliResult cli(const std::string& args) const {
    const fs::path err = dir_.string() + ".stderr";
    const std::string cmd = fmt::format("exec {} {} 2>'{}'", MESHRT_MESHTRACE, args, err.string());
    const auto results = testing::run_ranks({"/bin/sh", "-c", cmd}, 1, std::chrono::seconds(60));
    CliResult r{results[0].exit_code, results[0].output, read_text(err)};
    fs::remove(err);
    return r;
  }

  // Rewrites the JSON dumps as PyTorch FR pickles with Python's pickler (protocol 2): tuple
  // process_group, None for unknown discovery times, and with `torch_shape` only the keys
  // PyTorch writes (no meshrt extras, so p2p peers and channels come from profiling_name).
  void to_pickles(bool torch_shape) const {
    const char* script = R"(
import json, pickle, sys, os
torch_shape = sys.argv[1] == "torch"
for src in sys.argv[2:]:
    with open(src) as f:
        d = json.load(f)
    entries = d.get("entries", [])
    for e in entries:
        e["process_group"] = tuple(e["process_group"])
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if not e.get(k):
                e[k] = None
        if torch_shape:
            for k in ("mesh_dim", "group_ranks", "group_rank", "scope", "peer", "root",
                      "p2p_channel_seq", "reduce_op", "error", "caller"):
                e.pop(k, None)
            e["frames"] = [{"name": "step", "filename": "train.py", "line": 7}]
    d["entries"] = entries
    if torch_shape:
        for k in ("meshrt_dump_version", "producer", "rank", "world_size", "host", "pid",
                  "run_id", "dump_reason", "trigger", "clock", "buffer_size", "records_dropped"):
            d.pop(k, None)
        for g in d["pg_config"].values():
            g.pop("store_key", None)
            g.pop("mesh_dim", None)
    with open(src, "wb") as f:
        pickle.dump(d, f, protocol=2)
)";
    std::vector<std::string> argv = {kPython, "-c", script, torch_shape ? "torch" : "meshrt"};
    for (const auto& e : fs::directory_iterator(dir_)) argv.push_back(e.path().string());
    const auto r = testing::run_ranks(argv, 1, std::chrono::seconds(60));
    ASSERT_EQ(r[0].exit_code, 0) << r[0].output;
  }

  fs::path dir_;
};

#define SKIP_WITHOUT_PYTHON() \
  if (!fs::exists(kPython)) GTEST_SKIP() << kPython << " is absent"

std::string describe(const Report& report) { return trace::format_text(report); }

// The ranks root findings blame or miss, sorted: who the verdict points at.
std::vector<int> root_blame(const Report& report) {
  std::vector<int> ranks;
  for (const Finding& f : report.findings) {
    if (!f.root) continue;
    ranks.insert(ranks.end(), f.culprit_ranks.begin(), f.culprit_ranks.end());
    ranks.insert(ranks.end(), f.missing_ranks.begin(), f.missing_ranks.end());
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

TEST_F(AnalyzerTest, CleanJobHasNoFindings) {
  FrJob job = mesh_job();
  train(job, 5);
  job.write(dir_);
  const Report report = analyze();
  EXPECT_TRUE(report.findings.empty()) << describe(report);
  EXPECT_EQ(report.ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Per step: 2 tp groups x 2 ops + 4 dp groups + world.
  EXPECT_EQ(report.collectives_checked, 5 * (2 * 2 + 4 + 1));
  const CliResult r = cli("analyze " + dir_.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no problem found"), std::string::npos) << r.out;
}

// The issue's example: rank 6 never joins tp's all_reduce because it waits in a dp all_gather
// that its dp peer (rank 2) never called. The dp op is the root; the tp one follows from it.
TEST_F(AnalyzerTest, FollowsWaitsAcrossGroupsToTheRoot) {
  FrJob job = mesh_job();
  train(job, 3);
  job.call(6, "mesh0/dp", "all_gather", 64, "started");
  for (const int r : {0, 1, 2, 3}) job.call(r, "mesh0/tp", "all_reduce", 1024);
  for (const int r : {4, 5, 7}) job.call(r, "mesh0/tp", "all_reduce", 1024, "started");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 2u) << describe(report);

  const Finding& root = report.findings[0];
  EXPECT_TRUE(root.root);
  EXPECT_EQ(root.kind, FindingKind::kNotJoined);
  EXPECT_EQ(root.group, "mesh0/dp");
  EXPECT_EQ(root.group_ranks, (std::vector<int>{2, 6}));
  EXPECT_EQ(root.mesh_dim, "dp");
  EXPECT_EQ(root.seq, 4);
  EXPECT_EQ(root.op, "all_gather");
  EXPECT_EQ(root.missing_ranks, std::vector<int>{2});
  EXPECT_EQ(root.culprit_ranks, std::vector<int>{2});
  EXPECT_NE(root.detail.find("rank 2 has nothing pending"), std::string::npos) << root.detail;

  const Finding& tp = report.findings[1];
  EXPECT_FALSE(tp.root);
  EXPECT_EQ(tp.kind, FindingKind::kNotJoined);
  EXPECT_EQ(tp.group, "mesh0/tp");
  EXPECT_EQ(tp.group_ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(tp.seq, 7);
  EXPECT_EQ(tp.missing_ranks, std::vector<int>{6});
  EXPECT_EQ(tp.culprit_ranks, std::vector<int>{6});
  EXPECT_NE(tp.detail.find("rank 6 did not join all_reduce #7"), std::string::npos) << tp.detail;
  EXPECT_NE(tp.detail.find("rank 6 is blocked in all_gather #4 on dim dp"), std::string::npos)
      << tp.detail;
  EXPECT_NE(tp.detail.find("which rank 2 did not join"), std::string::npos) << tp.detail;

  // Where dp parted: rank 6 ran the all_gather, rank 2 stopped after its reduce_scatter. Only
  // root causes say where ranks parted.
  ASSERT_TRUE(root.divergence.has_value());
  ASSERT_EQ(root.divergence->sides.size(), 2u);
  const trace::DivergenceSide& issuer = root.divergence->sides[0];
  EXPECT_EQ(issuer.ranks, std::vector<int>{6});
  ASSERT_TRUE(issuer.first_unmatched.has_value());
  EXPECT_EQ(issuer.first_unmatched->op, "all_gather");
  EXPECT_EQ(issuer.first_unmatched->seq, 4);
  const trace::DivergenceSide& idle = root.divergence->sides[1];
  EXPECT_EQ(idle.ranks, std::vector<int>{2});
  EXPECT_FALSE(idle.first_unmatched.has_value());
  ASSERT_TRUE(idle.last_matched.has_value());
  EXPECT_EQ(idle.last_matched->op, "reduce_scatter");
  EXPECT_EQ(idle.last_matched->seq, 3);
  EXPECT_TRUE(idle.moved_on);
  EXPECT_FALSE(tp.divergence.has_value());

  const std::string text = trace::format_text(report);
  EXPECT_LT(text.find("Root causes"), text.find("mesh dim dp, group mesh0/dp [2, 6]"));
  EXPECT_LT(text.find("mesh dim dp, group mesh0/dp [2, 6]"), text.find("Consequences"));
  EXPECT_NE(text.find("mesh dim tp, group mesh0/tp [4, 5, 6, 7]: rank 6 did not join"),
            std::string::npos)
      << text;
}

// A tp pair has no majority (rank 2 all_reduce, rank 3 all_gather): the three sibling tp pairs
// all ran all_reduce at that seq, so rank 3 is the odd one out, and rank 2 is innocent.
TEST_F(AnalyzerTest, UsesSiblingGroupsOfTheMeshDimWhenAGroupHasNoMajority) {
  for (const bool odd_gathers : {true, false}) {
    FrJob job = testing::dp_tp_job(4, 2);  // tp pairs [0, 1] ... [6, 7].
    for (int s = 0; s < 2; ++s) {
      job.collective("mesh0/tp", "all_reduce", 256);
      job.collective("mesh0/dp", "all_reduce", 1024);
    }
    const int odd = odd_gathers ? 3 : 2;
    for (int r = 0; r < 8; ++r) {
      const bool pair = r == 2 || r == 3;
      job.call(r, "mesh0/tp", r == odd ? "all_gather" : "all_reduce", 256,
               pair ? "started" : "completed");
    }
    for (const int r : {0, 1, 4, 5, 6, 7}) job.call(r, "mesh0/dp", "all_reduce", 1024, "started");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    job.write(dir_);
    const Report report = analyze();
    std::vector<const Finding*> roots;
    for (const Finding& f : report.findings) {
      if (f.root) roots.push_back(&f);
      // The dp groups wait for the pair: consequences that point at the tp finding.
      if (!f.root) {
        EXPECT_NE(f.detail.find("has a type_mismatch finding"), std::string::npos) << f.detail;
      }
    }
    ASSERT_EQ(roots.size(), 1u) << describe(report);
    EXPECT_EQ(roots[0]->kind, FindingKind::kTypeMismatch);
    EXPECT_EQ(roots[0]->group_ranks, (std::vector<int>{2, 3}));
    EXPECT_EQ(roots[0]->seq, 3);
    EXPECT_EQ(roots[0]->culprit_ranks, std::vector<int>{odd});
    EXPECT_NE(roots[0]->detail.find("as did all 3 other mesh0/tp groups of dim tp"),
              std::string::npos)
        << roots[0]->detail;
  }
}

// 2 x 2 (dp, tp): rank 2 is killed (no dump) in the middle of step 3. Rank 3 waits for it in tp,
// rank 0 in dp, and rank 1 in dp for rank 3: only rank 2 is the root; ranks 3 and 0 are victims,
// named with the op they waited in.
TEST_F(AnalyzerTest, VictimsOfAKilledRankAreNotRootCauses) {
  FrJob job = testing::dp_tp_job(2, 2);
  for (int s = 0; s < 2; ++s) {
    job.collective("mesh0/tp", "all_reduce", 256);
    job.collective("mesh0/dp", "all_reduce", 1024);
  }
  for (const int r : {0, 1}) job.call(r, "mesh0/tp", "all_reduce", 256);
  job.call(3, "mesh0/tp", "all_reduce", 256, "started");
  for (const int r : {0, 1}) job.call(r, "mesh0/dp", "all_reduce", 1024, "started");
  job.write(dir_, "fr_", {0, 1, 3});
  const Report report =
      analyze({.prefix = "", .allow_incomplete_ranks = true, .threads = 0, .limits = {}});
  EXPECT_EQ(root_blame(report), std::vector<int>{2}) << describe(report);
  // Rank 3's wait is followed to rank 2 and named.
  const auto victim =
      std::find_if(report.findings.begin(), report.findings.end(), [](const Finding& f) {
        return f.group_ranks == std::vector{1, 3};
      });
  ASSERT_NE(victim, report.findings.end()) << describe(report);
  EXPECT_FALSE(victim->root);
  EXPECT_NE(victim->detail.find("rank 3 is blocked in all_reduce #3 on dim tp"), std::string::npos)
      << victim->detail;
  EXPECT_NE(victim->detail.find("waiting for rank 2, which left no dump"), std::string::npos)
      << victim->detail;
}

// Rank 1 skipped the last all_reduce (a clear verdict); rank 3, which joined it, died of a
// signal before dumping. The verdict stays rank 1; rank 3's missing dump is no root beside it.
TEST_F(AnalyzerTest, ADumplessRankDoesNotHideAClearVerdict) {
  FrJob job = world_job(4);
  job.collective("world", "all_reduce", 8);
  for (const int r : {0, 2, 3}) job.call(r, "world", "all_reduce", 8, "started");
  job.write(dir_, "fr_", {0, 1, 2});
  const Report report =
      analyze({.prefix = "", .allow_incomplete_ranks = true, .threads = 0, .limits = {}});
  EXPECT_EQ(root_blame(report), std::vector<int>{1}) << describe(report);
  ASSERT_EQ(report.findings.size(), 2u) << describe(report);
  EXPECT_EQ(report.findings[1].kind, FindingKind::kMissingDump);
  EXPECT_FALSE(report.findings[1].root);
}

// A 2 x 2 dp x tp job, each step {tp all_reduce; dp all_reduce}; from step 5 rank 3 skips its tp
// all_reduce and goes on with dp. The waits close into a cycle (2 -> 3 -> 1 -> 0 -> 2), but only
// rank 3 completed ops past the point where its tp peer waits for it: it is the one root.
TEST_F(AnalyzerTest, ARankThatSkipsOneDimAndGoesOnIsTheCulpritNotACycle) {
  FrJob job = testing::dp_tp_job(2, 2);
  for (int s = 0; s < 4; ++s) {
    job.collective("mesh0/tp", "all_reduce", 256);
    job.collective("mesh0/dp", "all_reduce", 1024);
  }
  // Step 5: tp #5 completes on ranks 0 and 1; rank 2 waits in it for rank 3, which skips it.
  for (const int r : {0, 1}) job.call(r, "mesh0/tp", "all_reduce", 256);
  job.call(2, "mesh0/tp", "all_reduce", 256, "started");
  // dp #5: ranks 1 and 3 complete it; rank 0 waits for rank 2.
  for (const int r : {1, 3}) job.call(r, "mesh0/dp", "all_reduce", 1024);
  job.call(0, "mesh0/dp", "all_reduce", 1024, "started");
  // Step 6: rank 1 waits in tp #6 for rank 0; rank 3 skips tp again and waits in dp #6.
  job.call(1, "mesh0/tp", "all_reduce", 256, "started");
  job.call(3, "mesh0/dp", "all_reduce", 1024, "started");
  job.write(dir_);
  const Report report = analyze();
  EXPECT_EQ(root_blame(report), std::vector<int>{3}) << describe(report);
  const auto root = std::find_if(report.findings.begin(), report.findings.end(),
                                 [](const Finding& f) { return f.root; });
  ASSERT_NE(root, report.findings.end());
  EXPECT_EQ(root->group, "mesh0/tp");
  EXPECT_EQ(root->mesh_dim, "tp");
  EXPECT_EQ(root->seq, 5);
  EXPECT_NE(root->detail.find("rank 3 skipped all_reduce #5"), std::string::npos) << root->detail;
  EXPECT_NE(root->detail.find("completed 2 ops elsewhere (dp all_reduce #4, dp all_reduce #5)"),
            std::string::npos)
      << root->detail;
  EXPECT_EQ(root->detail.find("cycle"), std::string::npos) << root->detail;
  for (const Finding& f : report.findings) {
    EXPECT_EQ(f.detail.find("form a cycle"), std::string::npos) << describe(report);
  }
}

// Issue #28's nested split: a split of the tp communicator of ranks 2 and 3 runs 3200 ops (the
// 2000-record rings wrapped); rank 3 skips #3201 and goes to the world barrier that follows,
// where ranks 0 and 1 wait too. Only rank 3 is a root; rank 2, blocked in the split's #3201, is
// a victim in the barrier, and the split's finding carries its parent's dim.
TEST_F(AnalyzerTest, ASkipInANestedSplitBlamesOnlyTheRankThatSkipped) {
  FrJob job = testing::dp_tp_job(2, 2);
  job.add_group({"mesh0/tp/split0", "split", {2, 3}, "tp"});
  job.collective("world", "barrier", 1);
  for (int i = 0; i < 3200; ++i) {
    for (const int r : {2, 3}) job.call(r, "mesh0/tp/split0", "all_reduce", 64);
  }
  job.call(2, "mesh0/tp/split0", "all_reduce", 64, "started");
  for (const int r : {0, 1, 3}) job.call(r, "world", "barrier", 1, "started");
  for (int r = 0; r < 4; ++r) job.keep_last(r, 2000);
  job.write(dir_);
  const Report report = analyze();
  EXPECT_EQ(root_blame(report), std::vector<int>{3}) << describe(report);
  // Not a deadlock: rank 3's own order (all_reduce after all_reduce) has it call the split's
  // #3201, as rank 2 does; it called the barrier instead.
  const Finding& root = report.findings.front();
  EXPECT_TRUE(root.root);
  EXPECT_FALSE(root.cycle) << describe(report);
  EXPECT_NE(root.detail.find("rank 3 skipped all_reduce #3201 (issued by rank 2): its own ops "
                             "repeat in a fixed order that puts its next op on mesh0/tp/split0, "
                             "where its peers wait, but it called barrier #2 on world instead"),
            std::string::npos)
      << describe(report);
  for (const Finding& f : report.findings) {
    if (f.group == "mesh0/tp/split0") {
      EXPECT_EQ(f.mesh_dim, "tp") << describe(report);
    }
  }
}

// The same waits without anyone going on (ranks 0 and 1 call a and b in opposite orders): a real
// deadlock, both roots.
TEST_F(AnalyzerTest, OppositeOrdersStayADeadlockWithoutAGoOnCulprit) {
  FrJob job = world_job(2);
  job.add_group({"a", "a", {0, 1}, std::nullopt});
  job.add_group({"b", "b", {0, 1}, std::nullopt});
  job.collective("world", "all_reduce", 4);
  job.call(0, "a", "all_reduce", 4, "started");
  job.call(1, "b", "all_reduce", 4, "started");
  job.write(dir_);
  const Report report = analyze();
  EXPECT_EQ(root_blame(report), (std::vector<int>{0, 1})) << describe(report);
  for (const Finding& f : report.findings) {
    EXPECT_EQ(f.detail.find("skipped"), std::string::npos) << f.detail;
  }
}

// A progress record as runtime/progress_publisher.cc writes it: one op in flight on "world", or
// none.
std::string progress_record(int rank, const std::string& state, int64_t state_ms, int64_t age_ms,
                            int64_t in_flight_seq) {
  nlohmann::json in_flight = nullptr;
  if (in_flight_seq > 0) {
    in_flight = {{"op", "all_reduce"}, {"seq", in_flight_seq}, {"p2p", false},
                 {"channel_seq", 0},   {"peer", -1},           {"running_ms", state_ms}};
  }
  const nlohmann::json j = {
      {"rank", rank},
      {"wall_ns", trace::wall_now_ns() - age_ms * 1'000'000},
      {"state", state},
      {"state_ms", state_ms},
      {"comms", {{{"name", "world"}, {"mesh_dim", ""}, {"in_flight", in_flight}}}}};
  return j.dump();
}

// Live: rank 1 returned from its program (no communicator, no snapshot) while rank 0 waits in
// all_reduce #2 with it. Not "every member has entered it".
TEST_F(AnalyzerTest, LiveVerdictNamesARankThatFinishedEarly) {
  FrJob job = world_job(2);
  job.collective("world", "all_reduce", 8);
  job.call(0, "world", "all_reduce", 8, "started");
  job.write(dir_, "fr_", {0});
  std::ofstream(dir_ / "progress_0.json") << progress_record(0, "in_op", 12000, 0, 2);
  std::ofstream(dir_ / "progress_1.json") << progress_record(1, "finished", 12000, 0, 0);
  const std::string v = trace::live_verdict_from_directory(dir_, "fr_");
  EXPECT_NE(v.find("stall 12 s: world all_reduce #2 — rank 1 finished its program (no "
                   "communicator for 12 s) while the others wait in ops with it"),
            std::string::npos)
      << v;
}

// Live: rank 1 is stopped (SIGSTOP) inside all_reduce #2: no snapshot, a stale progress record.
TEST_F(AnalyzerTest, LiveVerdictNamesARankThatDidNotAnswer) {
  FrJob job = world_job(2);
  job.collective("world", "all_reduce", 8);
  job.call(0, "world", "all_reduce", 8, "started");
  job.call(1, "world", "all_reduce", 8, "started");
  job.write(dir_, "fr_", {0});
  std::ofstream(dir_ / "progress_0.json") << progress_record(0, "in_op", 12000, 0, 2);
  std::ofstream(dir_ / "progress_1.json") << progress_record(1, "in_op", 5000, 7000, 2);
  const std::string v = trace::live_verdict_from_directory(dir_, "fr_");
  EXPECT_NE(v.find("stall 12 s: world all_reduce #2 — rank 1 (last progress record 7 s old, in "
                   "world all_reduce #2) did not answer the snapshot request"),
            std::string::npos)
      << v;
}

// The verdict shows where a root culprit's main thread was when it dumped, and says so when that
// thread did not answer the stack request (a dump written before then has no "answered").
TEST_F(AnalyzerTest, TheCulpritsMainThreadIsShownOrSaidNotToHaveAnswered) {
  for (const bool answered : {true, false}) {
    FrJob job = world_job(2);
    job.collective("world", "all_reduce", 8);
    job.call(0, "world", "all_reduce", 8, "started");
    job.write(dir_, "fr_", {0, 1});
    auto dump = nlohmann::json::parse(read_text(dir_ / "fr_1"));
    nlohmann::json frames = nlohmann::json::array();
    if (answered) {
      frames.push_back({{"function", "train_step"}, {"file", "/src/train.cc"}, {"line", 42}});
      frames.push_back({{"function", "main"}, {"file", "/src/train.cc"}, {"line", 90}});
    }
    dump[std::string(trace::dump_format::kMeshrtThreads)] = {
        {{"tid", 7}, {"main", false}, {"frames", frames}},
        {{"tid", 1}, {"main", true}, {"frames", frames}}};
    if (!answered) dump[std::string(trace::dump_format::kMeshrtThreads)][1]["answered"] = false;
    write_text(dir_ / "fr_1", dump.dump());
    const std::string text = describe(analyze());
    EXPECT_NE(text.find(answered ? "rank 1 main thread: train_step (train.cc:42) <- main "
                                   "(train.cc:90)\n"
                                 : "rank 1 main thread: (no stack: the thread did not answer in "
                                   "time)\n"),
              std::string::npos)
        << text;
  }
}

// Rank 0 was killed inside dp all_reduce #3: the verdict names the op it died in, as its peer's
// own error does ("all_reduce #3: rank 0 exited"), not only that it left no dump.
TEST_F(AnalyzerTest, AKilledRankIsNamedWithTheOpItDiedIn) {
  FrJob job = testing::dp_tp_job(2, 2);
  for (int s = 0; s < 2; ++s) {
    job.collective("mesh0/tp", "all_reduce", 256);
    job.collective("mesh0/dp", "all_reduce", 1024);
  }
  job.call(2, "mesh0/dp", "all_reduce", 1024, "started");
  job.write(dir_, "fr_", {1, 2, 3});
  const Report report =
      analyze({.prefix = "", .allow_incomplete_ranks = true, .threads = 0, .limits = {}});
  const auto missing =
      std::find_if(report.findings.begin(), report.findings.end(),
                   [](const Finding& f) { return f.kind == FindingKind::kMissingDump; });
  ASSERT_NE(missing, report.findings.end()) << describe(report);
  EXPECT_EQ(missing->culprit_ranks, std::vector<int>{0});
  EXPECT_EQ(missing->op, "all_reduce");
  EXPECT_EQ(missing->seq, 3);
  EXPECT_EQ(missing->group, "mesh0/dp");
  EXPECT_EQ(missing->mesh_dim, "dp");
  EXPECT_NE(missing->detail.find("last seen in all_reduce #3 on dim dp (group mesh0/dp [0, 2]; "
                                 "rank 2 entered it and never finished)"),
            std::string::npos)
      << missing->detail;
}

// Rank 0 waits in group a for rank 1, which waits in group b for rank 0: neither finding follows
// from the other alone; both are reported as roots of one deadlock.
TEST_F(AnalyzerTest, WaitCycleIsADeadlock) {
  FrJob job = world_job(2);
  job.add_group({"a", "a", {0, 1}, std::nullopt});
  job.add_group({"b", "b", {0, 1}, std::nullopt});
  job.collective("world", "all_reduce", 4);
  job.call(0, "a", "all_reduce", 4, "started");
  job.call(1, "b", "all_reduce", 4, "started");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 2u) << describe(report);
  for (const Finding& f : report.findings) {
    EXPECT_TRUE(f.root);
    EXPECT_NE(f.detail.find("cycle (a deadlock)"), std::string::npos) << f.detail;
  }
  EXPECT_EQ(report.findings[0].group, "a");
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{1});
  EXPECT_NE(report.findings[0].detail.find("rank 1 is blocked in all_reduce #1 in group b"),
            std::string::npos)
      << report.findings[0].detail;
}

// Ranks 1-3 finished the program; rank 0 issued one more all_reduce: the one who issued it is
// to blame, not the three who never called it.
TEST_F(AnalyzerTest, BlamesAMinorityThatIssuedAnExtraCollective) {
  FrJob job = world_job(4);
  for (int i = 0; i < 4; ++i) job.collective("world", "all_reduce", 32);
  job.call(0, "world", "all_reduce", 32, "started");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.kind, FindingKind::kNotJoined);
  EXPECT_EQ(f.seq, 5);
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{0});
  EXPECT_EQ(f.missing_ranks, (std::vector<int>{1, 2, 3}));
  EXPECT_NE(f.detail.find("rank 0 issued all_reduce #5 that ranks [1, 2, 3] never called"),
            std::string::npos)
      << f.detail;
  EXPECT_NE(f.detail.find("their last op in this group, all_reduce #4, completed"),
            std::string::npos)
      << f.detail;
}

// A program like examples/hang.cc (whose real run tests/hang_test.cc checks): every rank runs two
// all_reduces at line 12 and two at line 20, and rank 0 one more at line 15 in between, so its #5
// finds no partner. The verdict says where the ranks parted, and that their call sites first
// differ at #3: the extra call.
TEST_F(AnalyzerTest, DivergenceNamesTheCallSitesOfAnExtraCollective) {
  const std::string file = "/src/job/step.cc";
  FrJob job = world_job(4);
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 2; ++i) job.call(r, "world", "all_reduce", 12).caller = file + ":12";
    if (r == 0) job.call(r, "world", "all_reduce", 12).caller = file + ":15";
    for (int i = 0; i < 2; ++i) {
      const bool hung = r == 0 && i == 1;
      job.call(r, "world", "all_reduce", 12, hung ? "started" : "completed").caller = file + ":20";
    }
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  const Finding& f = report.findings[0];
  ASSERT_TRUE(f.divergence.has_value()) << describe(report);
  const trace::Divergence& d = *f.divergence;
  ASSERT_EQ(d.sides.size(), 2u);
  EXPECT_EQ(d.sides[0].ranks, std::vector<int>{0});
  EXPECT_EQ(d.sides[0].first_unmatched,
            (trace::OpCall{.op = "all_reduce", .seq = 5, .peer = -1, .at = {file, 20}}));
  EXPECT_EQ(d.sides[0].last_matched,
            (trace::OpCall{.op = "all_reduce", .seq = 4, .peer = -1, .at = {file, 20}}));
  EXPECT_FALSE(d.sides[0].moved_on);
  EXPECT_EQ(d.sides[1].ranks, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(d.sides[1].first_unmatched.has_value());
  EXPECT_EQ(d.sides[1].last_matched,
            (trace::OpCall{.op = "all_reduce", .seq = 4, .peer = -1, .at = {file, 20}}));
  EXPECT_TRUE(d.sides[1].moved_on);
  ASSERT_TRUE(d.call_sites_differ.has_value());
  EXPECT_EQ(d.call_sites_differ->op, "all_reduce");
  EXPECT_EQ(d.call_sites_differ->seq, 3);
  ASSERT_EQ(d.call_sites_differ->sites.size(), 2u);
  EXPECT_EQ(d.call_sites_differ->sites[0].ranks, std::vector<int>{0});
  EXPECT_EQ(d.call_sites_differ->sites[0].at, (trace::CallSite{file, 15}));
  EXPECT_EQ(d.call_sites_differ->sites[1].ranks, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(d.call_sites_differ->sites[1].at, (trace::CallSite{file, 20}));

  // Text: basenames, on a line of its own after the finding (the demo greps the finding's).
  const std::string text = trace::format_text(report);
  EXPECT_NE(text.find("rank 0 issued all_reduce #5 that ranks [1, 2, 3] never called"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n      diverged: rank 0 ran all_reduce #5 at step.cc:20; ranks [1, 2, 3] "
                      "ran their last all_reduce (#4) at step.cc:20 and moved on; call sites "
                      "first differ at all_reduce #3: rank 0 at step.cc:15, ranks [1, 2, 3] at "
                      "step.cc:20\n"),
            std::string::npos)
      << text;

  // JSON: full paths, next to the keys that were there before.
  const CliResult r = cli("analyze " + dir_.string() + " --json");
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out)["findings"][0];
  EXPECT_EQ(j["detail"], f.detail);
  const auto& side = j["divergence"]["sides"][0];
  EXPECT_EQ(side["ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(side["first_unmatched"]["file"], file);
  EXPECT_EQ(side["first_unmatched"]["line"], 20);
  EXPECT_EQ(side["first_unmatched"]["seq"], 5);
  EXPECT_TRUE(side["first_unmatched"]["peer"].is_null());
  EXPECT_EQ(j["divergence"]["sides"][1]["last_matched"]["seq"], 4);
  EXPECT_EQ(j["divergence"]["sides"][1]["moved_on"], true);
  const auto& split = j["divergence"]["call_sites_differ"];
  EXPECT_EQ(split["seq"], 3);
  EXPECT_EQ(split["sites"][0]["file"], file);
  EXPECT_EQ(split["sites"][0]["line"], 15);
  EXPECT_EQ(split["sites"][1]["ranks"], nlohmann::json::array({1, 2, 3}));
}

// A type mismatch: the culprit's first unmatched op and the last op the sides matched, each
// with its call site; where the sides called the matched op from different places, both.
TEST_F(AnalyzerTest, DivergenceOfAMismatchGivesEachSidesCallSites) {
  for (const bool same_before : {true, false}) {
    FrJob job = world_job(4);
    for (int r = 0; r < 4; ++r) {
      job.call(r, "world", "all_reduce", 8).caller =
          same_before || r != 3 ? "model.cc:30" : "src/other.cc:5";
      job.call(r, "world", r == 3 ? "all_gather" : "all_reduce", 8).caller =
          r == 3 ? "/abs/model.cc:40" : "model.cc:38";
    }
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    job.write(dir_);
    const Report report = analyze();
    ASSERT_EQ(report.findings.size(), 1u) << describe(report);
    ASSERT_TRUE(report.findings[0].divergence.has_value());
    const trace::Divergence& d = *report.findings[0].divergence;
    ASSERT_EQ(d.sides.size(), 2u);
    EXPECT_EQ(d.sides[0].ranks, std::vector<int>{3});
    EXPECT_EQ(
        d.sides[0].first_unmatched,
        (trace::OpCall{.op = "all_gather", .seq = 2, .peer = -1, .at = {"/abs/model.cc", 40}}));
    EXPECT_EQ(d.sides[1].ranks, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(d.sides[1].first_unmatched->at, (trace::CallSite{"model.cc", 38}));
    EXPECT_EQ(d.sides[1].last_matched->at, (trace::CallSite{"model.cc", 30}));
    const std::string text = trace::format_text(report);
    const std::string start =
        "diverged: rank 3 ran all_gather #2 at model.cc:40; ranks [0, 1, 2] ran all_reduce #2 at "
        "model.cc:38; the last op they matched: all_reduce #1 ";
    if (same_before) {
      EXPECT_FALSE(d.call_sites_differ.has_value());
      EXPECT_NE(text.find(start + "at model.cc:30\n"), std::string::npos) << text;
    } else {
      ASSERT_TRUE(d.call_sites_differ.has_value());
      EXPECT_EQ(d.call_sites_differ->seq, 1);
      EXPECT_NE(text.find(start + "(rank 3 at other.cc:5, ranks [0, 1, 2] at model.cc:30); call "
                                  "sites first differ at all_reduce #1: rank 3 at other.cc:5, "
                                  "ranks [0, 1, 2] at model.cc:30\n"),
                std::string::npos)
          << text;
    }
  }
}

// A send nobody received: each end's last op on the channel. Send and recv sit at different
// lines by nature, so p2p findings compare no call sites. Records without callers say no place.
TEST_F(AnalyzerTest, DivergenceOnAP2pChannelAndWithoutCallers) {
  FrJob job = world_job(2);
  job.add_group({"pp", "pp", {0, 1}, "pp"});
  for (int i = 0; i < 2; ++i) {
    job.send(0, "pp", 1, 8).caller = "pp.cc:12";
    job.recv(1, "pp", 0, 8).caller = "pp.cc:20";
  }
  job.send(0, "pp", 1, 8, "started").caller = "pp.cc:12";
  job.call(0, "world", "all_reduce", 4).caller = "";
  job.call(1, "world", "all_reduce", 4).caller = "";
  job.call(0, "world", "all_reduce", 4, "started").caller = "";
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 2u) << describe(report);
  const std::string text = trace::format_text(report);
  EXPECT_NE(text.find("diverged: rank 0 ran send #3 to rank 1 at pp.cc:12; rank 1 ran its last "
                      "recv from rank 0 (#2) at pp.cc:20 and moved on\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("diverged: rank 0 ran all_reduce #2; rank 1 ran its last all_reduce (#1) "
                      "and moved on\n"),
            std::string::npos)
      << text;
  for (const Finding& f : report.findings) {
    ASSERT_TRUE(f.divergence.has_value()) << describe(report);
    EXPECT_FALSE(f.divergence->call_sites_differ.has_value()) << describe(report);
  }
}

// 7 of 8 ranks agree: the odd one is the culprit, whichever rank it is (rank 0 included: the
// file that loads first) and in whatever order the dumps are given.
TEST_F(AnalyzerTest, MajorityBlameIndependentOfLoadOrder) {
  for (int odd = 0; odd < 8; ++odd) {
    FrJob job = world_job(8);
    job.collective("world", "all_reduce", 64);
    job.collective("world", "all_reduce", 64);
    for (int r = 0; r < 8; ++r) job.call(r, "world", r == odd ? "all_gather" : "all_reduce", 64);
    job.collective("world", "all_reduce", 64);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    job.write(dir_);
    auto dumps = trace::read_dumps(trace::find_dump_files(dir_, ""));
    std::shuffle(dumps.begin(), dumps.end(), std::mt19937(odd));
    const Report report = trace::analyze(std::move(dumps), {});
    ASSERT_EQ(report.findings.size(), 1u) << "odd rank " << odd << "\n" << describe(report);
    const Finding& f = report.findings[0];
    EXPECT_EQ(f.kind, FindingKind::kTypeMismatch);
    EXPECT_EQ(f.seq, 3);
    EXPECT_EQ(f.culprit_ranks, std::vector<int>{odd});
    EXPECT_NE(f.detail.find(fmt::format("rank {} called all_gather", odd)), std::string::npos)
        << f.detail;
    EXPECT_NE(f.detail.find("7 of 8 agree"), std::string::npos) << f.detail;
  }
}

TEST_F(AnalyzerTest, SizeMismatch) {
  FrJob job = world_job(4);
  job.collective("world", "all_reduce", 1024);
  for (int r = 0; r < 4; ++r) job.call(r, "world", "all_reduce", r == 3 ? 512 : 1024);
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kSizeMismatch);
  EXPECT_EQ(report.findings[0].seq, 2);
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{3});
  EXPECT_NE(report.findings[0].detail.find("[[512]]"), std::string::npos);
}

TEST_F(AnalyzerTest, DtypeMismatch) {
  FrJob job = world_job(4);
  for (int r = 0; r < 4; ++r) {
    job.call(r, "world", "all_gather", 16, "completed", r == 2 ? "Half" : "Float");
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kDtypeMismatch);
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{2});
  EXPECT_NE(report.findings[0].detail.find("Half"), std::string::npos);
}

TEST_F(AnalyzerTest, StateMismatch) {
  FrJob job = world_job(4);
  job.collective("world", "all_reduce", 16);
  for (int r = 0; r < 4; ++r)
    job.call(r, "world", "all_gather", 16, r == 3 ? "scheduled" : "started");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kStateMismatch);
  EXPECT_EQ(report.findings[0].seq, 2);
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{3});
}

// A symmetric collective completed on some ranks completed everywhere: ranks whose dump still
// shows it running (or shows nothing yet) only dumped earlier. No finding.
TEST_F(AnalyzerTest, CompletedSymmetricCollectiveIsNoFinding) {
  FrJob job = world_job(4);
  job.collective("world", "all_reduce", 16);
  for (int r = 0; r < 3; ++r)
    job.call(r, "world", "all_reduce", 16, r == 0 ? "completed" : "started");
  job.write(dir_);
  const Report report = analyze();
  EXPECT_TRUE(report.findings.empty()) << describe(report);
}

// A broadcast (not symmetric: the root may finish first) that three tp ranks completed and one
// never started: the rank behind is blamed, named with its group, op, seq and mesh dim.
TEST_F(AnalyzerTest, StateMismatchBlamesTheRankThatNeverStartedIt) {
  FrJob job = mesh_job();
  train(job, 2);
  for (int r = 4; r < 8; ++r)
    job.call(r, "mesh0/tp", "broadcast", 64, r == 6 ? "scheduled" : "completed");
  for (int r = 0; r < 4; ++r) job.call(r, "mesh0/tp", "broadcast", 64);
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.kind, FindingKind::kStateMismatch);
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{6});
  EXPECT_EQ(f.group, "mesh0/tp");
  EXPECT_EQ(f.group_ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(f.mesh_dim, "tp");
  EXPECT_EQ(f.op, "broadcast");
  EXPECT_EQ(f.seq, 5);
  // The report's line names the dim and group; the detail the op, seq, states and ranks.
  EXPECT_NE(describe(report).find("[state_mismatch] mesh dim tp, group mesh0/tp [4, 5, 6, 7]: "
                                  "broadcast #5 is"),
            std::string::npos)
      << describe(report);
  EXPECT_NE(f.detail.find("broadcast #5 is ranks [4, 5, 7] "
                          "completed, rank 6 scheduled: rank 6 never started it"),
            std::string::npos)
      << f.detail;
}

// An all_reduce one rank completed while its peer, whose dump shows its ops starting, never
// started it: no correct transport completes a symmetric collective without every member.
TEST_F(AnalyzerTest, SymmetricCollectiveCompletedWhereAPeerNeverStartedItIsSaid) {
  FrJob job = testing::dp_tp_job(2, 2);  // dp groups [0, 2] and [1, 3].
  for (int s = 0; s < 3; ++s) job.collective("mesh0/dp", "all_reduce", 256);
  for (int r = 0; r < 4; ++r)
    job.call(r, "mesh0/dp", "all_reduce", 256, r == 3 ? "scheduled" : "completed");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.kind, FindingKind::kStateMismatch);
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{3});
  EXPECT_EQ(f.group_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(f.mesh_dim, "dp");
  EXPECT_EQ(f.seq, 4);
  EXPECT_NE(f.detail.find("all_reduce #4: rank 1 completed it "
                          "but rank 3 never started it"),
            std::string::npos)
      << f.detail;
  EXPECT_NE(f.detail.find("cannot happen with a correct transport"), std::string::npos) << f.detail;
  EXPECT_NE(describe(report).find("[state_mismatch] mesh dim dp, group mesh0/dp [1, 3]: "
                                  "all_reduce #4: rank 1 completed it"),
            std::string::npos)
      << describe(report);

  // The same records from a rank that never records starts (NCCL untimed): "scheduled" only
  // says it had not completed when it dumped, which a peer's completion makes harmless.
  fs::remove_all(dir_);
  fs::create_directory(dir_);
  job.dump(3).records_starts = false;
  job.write(dir_);
  const Report untimed = analyze();
  EXPECT_TRUE(untimed.findings.empty()) << describe(untimed);
}

// Two ranks in an all_gather, two not yet: no majority of states, but the ranks in it wait on
// the two that never started it.
TEST_F(AnalyzerTest, StateMismatchWithoutMajorityBlamesTheRanksBehind) {
  FrJob job = world_job(4);
  job.collective("world", "all_reduce", 16);
  for (int r = 0; r < 4; ++r)
    job.call(r, "world", "all_gather", 16, r < 2 ? "started" : "scheduled");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kStateMismatch);
  EXPECT_EQ(report.findings[0].culprit_ranks, (std::vector<int>{2, 3}));
}

TEST_F(AnalyzerTest, AllToAllNumelMismatch) {
  FrJob job = world_job(4);
  for (int r = 0; r < 4; ++r) {
    testing::FrEntry& e = job.call(r, "world", "all_to_all", 16, "started");
    if (r == 3) e.output_sizes = {{12}};
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kNumelMismatch);
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{3});
  EXPECT_NE(report.findings[0].detail.find("send 64 elements in all but receive 60"),
            std::string::npos)
      << report.findings[0].detail;
}

// Uneven all_to_all splits that add up are fine.
TEST_F(AnalyzerTest, UnevenAllToAllThatAddsUpIsFine) {
  FrJob job = world_job(2);
  job.call(0, "world", "all_to_all", 10).output_sizes = {{6}};
  job.call(1, "world", "all_to_all", 2).output_sizes = {{6}};
  job.write(dir_);
  const Report report = analyze();
  EXPECT_TRUE(report.findings.empty()) << describe(report);
}

// Rank 2 skipped one all_reduce: its later ops carry lower sequence numbers, so every later
// op of the group disagrees. Only the first mismatch is a root.
// A GPT-2 step on `ranks` of world: the gradient all_reduce (136,960 floats), then the loss's
// (1 float), each from its own line.
void gpt2_step(FrJob& job, const std::vector<int>& ranks, bool grad = true,
               const std::string& state = "completed") {
  for (const int r : ranks) {
    if (grad) job.call(r, "world", "all_reduce", 136960, state).caller = "train_gpt2.py:88";
    job.call(r, "world", "all_reduce", 1, state).caller = "train_gpt2.py:95";
  }
}

// Two ranks, no majority: rank 1 skipped the gradient all_reduce at step 20 and called the
// loss's against rank 0's gradient one. Each rank's own alternation says which one broke it.
TEST_F(AnalyzerTest, ATwoRankTieIsBrokenByEachRanksOwnPattern) {
  FrJob job = world_job(2);
  for (int step = 0; step < 20; ++step) gpt2_step(job, {0, 1});
  job.call(0, "world", "all_reduce", 136960, "started").caller = "train_gpt2.py:88";
  job.call(1, "world", "all_reduce", 1, "started").caller = "train_gpt2.py:95";
  job.write(dir_);
  const Report report = analyze();
  ASSERT_FALSE(report.findings.empty());
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.kind, FindingKind::kSizeMismatch) << describe(report);
  EXPECT_EQ(f.seq, 41);
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{1}) << describe(report);
  EXPECT_EQ(root_blame(report), std::vector<int>{1}) << describe(report);
  EXPECT_NE(f.detail.find("rank 1 departed from its own pattern: its ops on world repeat every 2 "
                          "(all_reduce 136960 x Float, all_reduce 1 x Float), and at #41 it "
                          "called all_reduce 1 x Float where its history predicts all_reduce "
                          "136960 x Float; rank 0 kept its own"),
            std::string::npos)
      << f.detail;
  EXPECT_EQ(f.detail.find("no majority:"), std::string::npos) << f.detail;

  // The same from the command line: the verdict names rank 1 alone.
  const CliResult r = cli(fmt::format("analyze --json {}", dir_.string()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["findings"][0]["culprit_ranks"], nlohmann::json::array({1})) << r.out;
}

// Too little history, or none that repeats: the tie stays a tie.
TEST_F(AnalyzerTest, ATieWithoutAClearHistoryStaysNoMajority) {
  auto expect_no_majority = [&](FrJob& job, int64_t seq) {
    fs::remove_all(dir_);
    fs::create_directory(dir_);
    job.write(dir_);
    const Report report = analyze();
    ASSERT_FALSE(report.findings.empty());
    const Finding& f = report.findings[0];
    EXPECT_EQ(f.seq, seq) << describe(report);
    EXPECT_EQ(f.culprit_ranks, (std::vector<int>{0, 1})) << describe(report);
    EXPECT_NE(f.detail.find("no majority:"), std::string::npos) << f.detail;
    EXPECT_EQ(f.detail.find("departed"), std::string::npos) << f.detail;
  };
  {
    // Two steps: a period of 2 seen twice is not enough.
    FrJob job = world_job(2);
    for (int step = 0; step < 2; ++step) gpt2_step(job, {0, 1});
    job.call(0, "world", "all_reduce", 136960, "started").caller = "train_gpt2.py:88";
    job.call(1, "world", "all_reduce", 1, "started").caller = "train_gpt2.py:95";
    expect_no_majority(job, 5);
  }
  {
    // A long history of ops that never repeat (every size differs).
    FrJob job = world_job(2);
    for (int i = 0; i < 30; ++i) {
      for (int r = 0; r < 2; ++r) job.call(r, "world", "all_reduce", 100 + i).caller = "a.py:1";
    }
    job.call(0, "world", "all_reduce", 500, "started").caller = "a.py:1";
    job.call(1, "world", "all_reduce", 7, "started").caller = "a.py:1";
    expect_no_majority(job, 31);
  }
  {
    // Both ranks depart from their patterns: nothing to choose between them.
    FrJob job = world_job(2);
    for (int step = 0; step < 10; ++step) gpt2_step(job, {0, 1});
    job.call(0, "world", "all_reduce", 4096, "started").caller = "train_gpt2.py:88";
    job.call(1, "world", "all_reduce", 8192, "started").caller = "train_gpt2.py:88";
    expect_no_majority(job, 21);
  }
}

// A 2-vs-2 tie in a 4-rank group: ranks 2 and 3 skipped the gradient all_reduce at step 12.
TEST_F(AnalyzerTest, ATwoAgainstTwoTieIsBrokenByTheSidesOwnPatterns) {
  FrJob job = world_job(4);
  for (int step = 0; step < 12; ++step) gpt2_step(job, {0, 1, 2, 3});
  gpt2_step(job, {0, 1}, /*grad=*/true, "started");
  gpt2_step(job, {2, 3}, /*grad=*/false, "started");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_FALSE(report.findings.empty());
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.seq, 25) << describe(report);
  EXPECT_EQ(f.culprit_ranks, (std::vector<int>{2, 3})) << describe(report);
  EXPECT_EQ(root_blame(report), (std::vector<int>{2, 3})) << describe(report);
  EXPECT_NE(f.detail.find("ranks [2, 3] departed from their own pattern: their ops on world repeat "
                          "every 2"),
            std::string::npos)
      << f.detail;
  EXPECT_NE(f.detail.find("ranks [0, 1] kept their own"), std::string::npos) << f.detail;
}

TEST_F(AnalyzerTest, SkippedCollectiveShiftsSequenceNumbers) {
  FrJob job = world_job(4);
  for (int step = 0; step < 4; ++step) {
    for (int r = 0; r < 4; ++r) {
      if (!(step == 1 && r == 2)) job.call(r, "world", "all_reduce", 128);
      job.call(r, "world", "all_gather", 32, step == 3 ? "started" : "completed");
    }
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_FALSE(report.findings.empty());
  const Finding& root = report.findings[0];
  EXPECT_TRUE(root.root);
  EXPECT_EQ(root.kind, FindingKind::kTypeMismatch);
  EXPECT_EQ(root.seq, 3);
  EXPECT_EQ(root.culprit_ranks, std::vector<int>{2});
  bool shifted = false;
  for (size_t i = 1; i < report.findings.size(); ++i) {
    EXPECT_FALSE(report.findings[i].root) << describe(report);
    shifted |= report.findings[i].detail.find("sequence numbers shifted") != std::string::npos;
  }
  EXPECT_TRUE(shifted) << describe(report);
}

TEST_F(AnalyzerTest, CoalescedGroups) {
  FrJob job = world_job(4);
  for (int r = 0; r < 4; ++r) job.coalesced(r, "world", {{"all_reduce", 16}, {"all_reduce", 32}});
  for (int r = 0; r < 4; ++r) {
    job.coalesced(r, "world", {{"all_reduce", 16}, {"all_reduce", r == 1 ? 64 : 32}}, "started");
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.kind, FindingKind::kSizeMismatch);
  EXPECT_EQ(f.seq, 2);
  EXPECT_EQ(f.op, "coalesced");
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{1});
  EXPECT_NE(f.detail.find("(member 2)"), std::string::npos) << f.detail;
}

TEST_F(AnalyzerTest, CoalescedGroupOfAnotherLength) {
  FrJob job = world_job(4);
  for (int r = 0; r < 4; ++r) {
    if (r == 0) {
      job.coalesced(r, "world", {{"all_reduce", 16}}, "started");
    } else {
      job.coalesced(r, "world", {{"all_reduce", 16}, {"all_reduce", 32}}, "started");
    }
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kSizeMismatch);
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{0});
  EXPECT_NE(report.findings[0].detail.find("coalesced 1 op while"), std::string::npos);
}

TEST_F(AnalyzerTest, LoneSendAndLoneRecv) {
  FrJob job = world_job(3);
  job.add_group({"pp01", "pp", {0, 1}, "pp"});
  job.add_group({"pp12", "pp", {1, 2}, "pp"});
  for (int i = 0; i < 2; ++i) {
    job.send(0, "pp01", 1, 8);
    job.recv(1, "pp01", 0, 8);
  }
  job.send(0, "pp01", 1, 8, "started");  // Rank 1 never receives it.
  job.recv(2, "pp12", 1, 8, "started");  // Rank 1 never sends it.
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 2u) << describe(report);
  const Finding& send = report.findings[0];
  EXPECT_EQ(send.kind, FindingKind::kNotJoined);
  EXPECT_EQ(send.group, "pp01");
  EXPECT_EQ(send.op, "send");
  EXPECT_EQ(send.seq, 3);
  EXPECT_EQ(send.missing_ranks, std::vector<int>{1});
  EXPECT_EQ(send.culprit_ranks, std::vector<int>{1});
  EXPECT_NE(send.detail.find("rank 1 did not post the recv matching rank 0's send #3 to rank 1"),
            std::string::npos)
      << send.detail;
  const Finding& recv = report.findings[1];
  EXPECT_EQ(recv.group, "pp12");
  EXPECT_EQ(recv.op, "recv");
  EXPECT_EQ(recv.seq, 1);
  EXPECT_EQ(recv.missing_ranks, std::vector<int>{1});
}

// Four pipeline stages pass 4 microbatches forward; stage 2 skipped its recv of microbatch 3,
// so stage 1's last send never finds its recv. One finding, on channel 1->2.
TEST_F(AnalyzerTest, PipelineStageThatSkippedARecv) {
  FrJob job = world_job(4);
  for (int mb = 1; mb <= 4; ++mb) {
    for (int stage = 0; stage < 4; ++stage) {
      if (stage > 0 && !(stage == 2 && mb == 3)) job.recv(stage, "world", stage - 1, 256);
      if (stage < 3) {
        job.send(stage, "world", stage + 1, 256, stage == 1 && mb == 4 ? "started" : "completed");
      }
    }
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.kind, FindingKind::kNotJoined);
  EXPECT_EQ(f.op, "send");
  EXPECT_EQ(f.seq, 4);
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{2});
  EXPECT_EQ(f.missing_ranks, std::vector<int>{2});
  EXPECT_TRUE(f.root);
}

// A 3-stage pipeline whose middle stage posts its recv from the wrong peer (stage 2, which never
// sends to it): rank 1 is named first, as the rank whose op has no matching peer op; stage 0
// waits on it, and stages 1 and 2 wait on each other.
TEST_F(AnalyzerTest, P2pDeadlockNamesTheRankThatReceivedFromTheWrongPeer) {
  FrJob job = world_job(3);
  for (int mb = 0; mb < 3; ++mb) {
    job.send(0, "world", 1, 256);
    job.recv(1, "world", 0, 256);
    job.send(1, "world", 2, 256);
    job.recv(2, "world", 1, 256);
  }
  job.send(0, "world", 1, 256, "started");
  job.recv(1, "world", 2, 256, "started");
  job.recv(2, "world", 1, 256, "started");
  job.write(dir_);
  const Report report = analyze();
  ASSERT_FALSE(report.findings.empty()) << describe(report);
  const Finding& first = report.findings[0];
  EXPECT_TRUE(first.root) << describe(report);
  EXPECT_EQ(first.culprit_ranks, std::vector<int>{1}) << describe(report);
  EXPECT_EQ(first.op, "recv") << describe(report);
  EXPECT_NE(first.detail.find("rank 1 posted recv #1 from rank 2 but rank 2 never sent to rank 1"),
            std::string::npos)
      << first.detail;
  EXPECT_NE(first.detail.find("cycle (a deadlock)"), std::string::npos) << first.detail;
  for (const Finding& f : report.findings) {
    if (f.root) {
      EXPECT_EQ(f.culprit_ranks, std::vector<int>{1}) << describe(report);
    }
  }
}

// No cycle this time (examples/stall's p2p case): stages 0 and 1 send to stages 2 and 3; rank 2
// receives from rank 3 instead of rank 0. Rank 3 finished its part and waits on nothing, rank 0's
// send to rank 2 waits: rank 2, whose recv has no matching peer op, is the culprit, not rank 3.
TEST_F(AnalyzerTest, WrongPeerRecvOutsideACycleBlamesTheReceiverNotTheIdlePeer) {
  FrJob job = world_job(4);
  job.send(1, "world", 3, 256);
  job.recv(3, "world", 1, 256);
  job.send(3, "world", 1, 256);
  job.recv(1, "world", 3, 256);
  job.send(0, "world", 2, 256, "started");
  job.recv(2, "world", 3, 256, "started");
  job.write(dir_);
  const Report report = analyze();
  std::vector<int> roots;
  for (const Finding& f : report.findings) {
    if (f.root) roots.insert(roots.end(), f.culprit_ranks.begin(), f.culprit_ranks.end());
  }
  EXPECT_EQ(roots, std::vector<int>{2}) << describe(report);
  ASSERT_FALSE(report.findings.empty());
  EXPECT_NE(report.findings[0].detail.find(
                "rank 2 posted recv #1 from rank 3 but rank 3 never sent to rank 2"),
            std::string::npos)
      << describe(report);
}

// PyTorch's own-size rules, on ops every rank called alike: sizes that cannot fit the op.
TEST_F(AnalyzerTest, OpsWhoseOwnSizesCannotFit) {
  struct Case {
    std::string type;
    std::vector<int64_t> in, out;
    std::string rule;
  };
  const Case cases[] = {
      {"all_reduce", {4}, {8}, "all_reduce needs its output the size of its input"},
      {"all_gather", {256}, {768}, "all_gather needs an output 4 times its input"},
      {"reduce_scatter", {512}, {256}, "reduce_scatter needs an input 4 times its output"},
  };
  for (const Case& c : cases) {
    FrJob job = world_job(4);
    job.collective("world", "all_reduce", 16);
    for (int r = 0; r < 4; ++r) {
      testing::FrEntry& e = job.call(r, "world", c.type, 1, "started");
      e.input_sizes = {c.in};
      e.output_sizes = {c.out};
    }
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    job.write(dir_);
    const Report report = analyze();
    ASSERT_EQ(report.findings.size(), 1u) << describe(report);
    const Finding& f = report.findings[0];
    EXPECT_EQ(f.kind, FindingKind::kSizeMismatch) << f.detail;
    EXPECT_EQ(f.seq, 2);
    EXPECT_EQ(f.culprit_ranks, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_NE(f.detail.find(c.rule), std::string::npos) << f.detail;
  }
}

// meshrt records an op of no elements with shapes [] (as a barrier's): an empty all_gather or
// reduce_scatter fits its own sizes, and is no finding (a CI post-mortem once named them as the
// root cause of a hang elsewhere).
TEST_F(AnalyzerTest, EmptyOpsFitTheirOwnSizes) {
  FrJob job = world_job(4);
  for (const char* type : {"all_gather", "reduce_scatter"}) {
    for (int r = 0; r < 4; ++r) {
      testing::FrEntry& e = job.call(r, "world", type, 1, "completed");
      e.input_sizes = {{}};
      e.output_sizes = {{}};
    }
  }
  job.write(dir_);
  const Report report = analyze();
  EXPECT_TRUE(report.findings.empty()) << describe(report);
}

// The v-collectives' blocks differ per rank (all_gather_v's inputs, reduce_scatter_v's outputs)
// while the whole buffers agree: no finding. A whole that differs is still a size mismatch.
TEST_F(AnalyzerTest, VCollectivesBlocksDifferPerRankWholesMustAgree) {
  FrJob job = world_job(3);
  for (int r = 0; r < 3; ++r) {
    testing::FrEntry& g = job.call(r, "world", "all_gather_v", 1, "completed");
    g.input_sizes = {{r + 1}};
    g.output_sizes = {{6}};
    testing::FrEntry& s = job.call(r, "world", "reduce_scatter_v", 2, "completed");
    s.input_sizes = {{6}};
    s.output_sizes = {{r == 0 ? 0 : r * 2}};
  }
  for (int r = 0; r < 3; ++r) {
    testing::FrEntry& g = job.call(r, "world", "all_gather_v", 3, "completed");
    g.input_sizes = {{2}};
    g.output_sizes = {{r == 2 ? 7 : 6}};
  }
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kSizeMismatch);
  EXPECT_EQ(report.findings[0].culprit_ranks, (std::vector<int>{2}));
}

// Rank 2 describes the tp group as another one: the dumps cannot be matched, exit 2.
TEST_F(AnalyzerTest, GroupDescribedDifferentlyAcrossRanksIsRefused) {
  FrJob job = world_job(3);
  job.collective("world", "all_reduce", 4);
  job.dump(2).groups[0].desc = "mesh_dp";
  job.write(dir_);
  const CliResult r = cli("analyze " + dir_.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("group 'world' [0, 1, 2] is 'default_pg' in '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("but 'mesh_dp' in '" + (dir_ / "fr_2").string() + "'"), std::string::npos)
      << r.err;
}

TEST_F(AnalyzerTest, P2pSizeMismatch) {
  FrJob job = world_job(2);
  job.send(0, "world", 1, 8);
  job.recv(1, "world", 0, 4);
  job.write(dir_);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kSizeMismatch);
  EXPECT_EQ(report.findings[0].culprit_ranks, (std::vector<int>{0, 1}));
}

// Rings that wrapped at different points: busy ranks lost more records, one lost every record
// of a group, one kept only the tail of a coalesced group. None of it is a finding; the real
// hang at the end still is.
TEST_F(AnalyzerTest, WrappedRingsGiveNoFalseFindings) {
  FrJob job = mesh_job();
  for (int r = 0; r < 8; ++r) job.coalesced(r, "world", {{"all_reduce", 8}, {"all_gather", 8}});
  job.collective("mesh0/dp", "broadcast", 16);  // Completing it proves nothing about the others.
  train(job, 2);
  for (int i = 0; i < 30; ++i) job.collective("mesh0/tp", "all_reduce", 64);
  for (const int r : {0, 1, 2, 3, 4, 5, 7}) job.call(r, "world", "all_reduce", 4, "started");
  job.keep_last(0, 10);  // Only tp records left (and the hang): no dp record at all.
  job.keep_last(1, 25);
  job.keep_last(5, 42);  // Starts inside the coalesced group.
  job.write(dir_);
  ASSERT_EQ(job.dump(5).entries.front().type, "all_gather");
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kNotJoined);
  EXPECT_EQ(report.findings[0].group, "world");
  EXPECT_EQ(report.findings[0].missing_ranks, std::vector<int>{6});
}

TEST_F(AnalyzerTest, MissingDumpFiles) {
  FrJob job = mesh_job();
  train(job, 2);
  job.write(dir_, "fr_", {0, 1, 2, 4, 5, 6, 7});
  EXPECT_THROW(analyze(), trace::InputError);
  const CliResult bad = cli("analyze " + dir_.string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("missing dump files from rank 3"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;

  const CliResult ok = cli("analyze " + dir_.string() + " --allow-incomplete-ranks --json");
  EXPECT_EQ(ok.exit_code, 1) << ok.err;
  const auto j = nlohmann::json::parse(ok.out);
  ASSERT_EQ(j["findings"].size(), 1u) << ok.out;
  EXPECT_EQ(j["findings"][0]["kind"], "missing_dump");
  EXPECT_EQ(j["findings"][0]["missing_ranks"], nlohmann::json::array({3}));
  EXPECT_EQ(j["findings"][0]["group"], "world");
  EXPECT_EQ(j["ranks"], nlohmann::json::array({0, 1, 2, 4, 5, 6, 7}));
}

TEST_F(AnalyzerTest, VersionMismatchIsRefused) {
  FrJob job = world_job(3);
  job.collective("world", "all_reduce", 4);
  job.dump(2).version = "2.8";
  job.write(dir_);
  const CliResult r = cli("analyze " + dir_.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("different versions"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("version 2.8 (meshrt_dump_version 1) from rank 2"), std::string::npos)
      << r.err;

  job.dump(2).version = "2.10";
  job.dump(1).meshrt_dump_version = trace::dump_format::kMeshrtDumpVersion + 1;
  job.write(dir_);
  const CliResult newer = cli("analyze " + dir_.string());
  EXPECT_EQ(newer.exit_code, 2);
  EXPECT_NE(newer.err.find(fmt::format("meshrt_dump_version {} is newer",
                                       trace::dump_format::kMeshrtDumpVersion + 1)),
            std::string::npos)
      << newer.err;
}

TEST_F(AnalyzerTest, CorruptJsonIsNamed) {
  FrJob job = world_job(3);
  job.collective("world", "all_reduce", 4);
  job.write(dir_);
  const std::string text = read_text(dir_ / "fr_1");
  write_text(dir_ / "fr_1", text.substr(0, text.size() / 2));
  const CliResult r = cli("analyze " + dir_.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fr_1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;

  write_text(dir_ / "fr_1", "{\"version\": \"2.10\", \"pg_config\": {}, \"entries\": [1,,2]}");
  const CliResult garbage = cli("analyze " + dir_.string());
  EXPECT_EQ(garbage.exit_code, 2);
  EXPECT_NE(garbage.err.find("fr_1"), std::string::npos) << garbage.err;
}

TEST_F(AnalyzerTest, PrefixInferenceAndFiles) {
  FrJob job = world_job(2);
  job.collective("world", "all_reduce", 4);
  fs::create_directories(dir_ / "node0");
  fs::create_directories(dir_ / "node1");
  job.write(dir_ / "node0", "trace_rank_", {0});
  job.write(dir_ / "node1", "trace_rank_", {1});
  write_text(dir_ / "node1" / "trace_rank_1.tmp.4242", "partial");  // A writer's temp file.
  EXPECT_EQ(analyze().ranks, (std::vector<int>{0, 1}));

  write_text(dir_ / "other_7", "{}");
  const CliResult r = cli("analyze " + dir_.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'trace_rank_' (2 files), 'other_' (1 file)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pass --prefix"), std::string::npos) << r.err;
  EXPECT_EQ(cli("analyze " + dir_.string() + " --prefix trace_rank_").exit_code, 0);
}

// Jobs without meshrun share the default prefix /tmp/meshrt_fr_: meshrt-monitor tells meshtrace
// the job's world size and start, so that an earlier, larger job's files are left out, not read as
// this job's (which would refuse: "world_size 24 but ... 2") or blamed.
TEST_F(AnalyzerTest, AnEarlierJobsFilesAreLeftOutWhenTheJobIsNamed) {
  FrJob old_job = world_job(4);
  old_job.collective("world", "all_reduce", 4);
  old_job.call(0, "world", "all_reduce", 4);  // Rank 0 waits in #2: the others "hung".
  old_job.write(dir_);
  const auto long_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (int r = 0; r < 4; ++r) fs::last_write_time(dir_ / fmt::format("fr_{}", r), long_ago);
  FrJob job = world_job(2);
  job.collective("world", "all_reduce", 4);
  job.write(dir_);
  const CliResult mixed = cli("analyze " + dir_.string());
  EXPECT_EQ(mixed.exit_code, 2);
  EXPECT_NE(mixed.err.find("says world_size 4 but"), std::string::npos) << mixed.err;

  const auto start = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now() -
                                                              std::chrono::minutes(1));
  const CliResult r = cli(fmt::format("analyze {} --world-size 2 --since {}", dir_.string(),
                                      start.time_since_epoch().count()));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 ranks [0, 1]"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("fr_3: rank 3 is outside this job's world of 2"), std::string::npos)
      << r.err;

  // A rank of this job that left no dump: its old file is not taken for it.
  fs::last_write_time(dir_ / "fr_1", long_ago);
  const CliResult one = cli(fmt::format("analyze {} --world-size 2 --since {}", dir_.string(),
                                        start.time_since_epoch().count()));
  EXPECT_NE(one.err.find("fr_1: last written before this job began"), std::string::npos) << one.err;
  EXPECT_EQ(one.exit_code, 2) << one.out << one.err;  // Rank 1's dump is missing.
  EXPECT_EQ(cli(fmt::format("analyze {} --world-size 2 --since {} --allow-incomplete-ranks",
                            dir_.string(), start.time_since_epoch().count()))
                .exit_code,
            1);
}

TEST_F(AnalyzerTest, CliJsonAndFlags) {
  FrJob job = world_job(4);
  job.collective("world", "all_reduce", 4);
  for (int r = 0; r < 4; ++r) job.call(r, "world", "all_reduce", r == 1 ? 8 : 4);
  job.write(dir_);
  const CliResult r = cli("analyze " + dir_.string() + " --json");
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"], nlohmann::json::array({0, 1, 2, 3}));
  EXPECT_EQ(j["collectives_checked"], 2);
  ASSERT_EQ(j["findings"].size(), 1u);
  const auto& f = j["findings"][0];
  EXPECT_EQ(f["kind"], "size_mismatch");
  EXPECT_EQ(f["group"], "world");
  EXPECT_EQ(f["group_ranks"], nlohmann::json::array({0, 1, 2, 3}));
  EXPECT_TRUE(f["mesh_dim"].is_null());
  EXPECT_EQ(f["seq"], 2);
  EXPECT_EQ(f["op"], "all_reduce");
  EXPECT_EQ(f["culprit_ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(f["missing_ranks"], nlohmann::json::array());
  EXPECT_TRUE(f["detail"].is_string());

  const CliResult help = cli("analyze --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--allow-incomplete-ranks"), std::string::npos);
  const CliResult bad = cli("analyze " + dir_.string() + " --frobnicate");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_EQ(cli("analyze").exit_code, 2);
  EXPECT_EQ(cli("analyze " + dir_.string() + " --selected-ranks 1").exit_code, 2);  // needs -j
  EXPECT_EQ(cli("analyze /nonexistent/dir").exit_code, 2);
}

TEST_F(AnalyzerTest, JustPrintEntries) {
  FrJob job = mesh_job();
  train(job, 1);
  job.write(dir_);
  const CliResult r =
      cli("analyze " + dir_.string() + " -j --selected-ranks 0 5 --pg-filters mesh_tp");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string header, rule, row1, row2, extra;
  std::getline(lines, header);
  std::getline(lines, rule);
  std::getline(lines, row1);
  std::getline(lines, row2);
  EXPECT_EQ(header.substr(0, 6), "rank 0");
  EXPECT_NE(header.find("| rank 5"), std::string::npos) << r.out;
  EXPECT_NE(row1.find("mesh0/tp #1 all_reduce [[1024]] Float completed"), std::string::npos)
      << r.out;
  EXPECT_NE(row2.find("all_gather"), std::string::npos) << r.out;
  EXPECT_FALSE(std::getline(lines, extra)) << r.out;  // Only the two tp entries.
}

TEST_F(AnalyzerTest, PyTorchPicklesCleanAndMismatched) {
  SKIP_WITHOUT_PYTHON();
  FrJob job = mesh_job();
  train(job, 2);
  for (int r = 0; r < 8; ++r)
    job.call(r, "world", r == 5 ? "broadcast" : "all_reduce", 8, "started");
  job.write(dir_);
  to_pickles(true);
  ASSERT_EQ(static_cast<unsigned char>(read_text(dir_ / "fr_0")[0]), 0x80);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].kind, FindingKind::kTypeMismatch);
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{5});
  EXPECT_FALSE(report.findings[0].mesh_dim.has_value());
  EXPECT_EQ(report.collectives_checked, 2 * (2 * 2 + 4 + 1) + 1);
}

// PyTorch dumps carry no peer or channel numbers: both come from profiling_name ("send 1->2",
// group-local ranks mapped through sorted(group ranks)) and counting.
TEST_F(AnalyzerTest, PyTorchPicklePipeline) {
  SKIP_WITHOUT_PYTHON();
  FrJob job(8);
  job.add_group({"pp", "pp", {1, 3, 5, 7}, std::nullopt});
  for (int mb = 1; mb <= 3; ++mb) {
    for (int s = 0; s < 4; ++s) {
      const int rank = 2 * s + 1;
      if (s > 0 && !(s == 3 && mb == 3)) job.recv(rank, "pp", rank - 2, 64);
      if (s < 3) job.send(rank, "pp", rank + 2, 64, s == 2 && mb == 3 ? "started" : "completed");
    }
  }
  job.write(dir_, "fr_", {1, 3, 5, 7});
  to_pickles(true);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].op, "send");
  EXPECT_EQ(report.findings[0].seq, 3);
  EXPECT_EQ(report.findings[0].culprit_ranks, std::vector<int>{7});
  EXPECT_NE(report.findings[0].detail.find("p2p channel 5->7"), std::string::npos)
      << report.findings[0].detail;
}

TEST_F(AnalyzerTest, MeshrtPicklesKeepMeshDims) {
  SKIP_WITHOUT_PYTHON();
  FrJob job = mesh_job();
  train(job, 1);
  job.call(6, "mesh0/dp", "all_gather", 64, "started");
  job.write(dir_);
  to_pickles(false);
  const Report report = analyze();
  ASSERT_EQ(report.findings.size(), 1u) << describe(report);
  EXPECT_EQ(report.findings[0].mesh_dim, "dp");
  EXPECT_EQ(report.findings[0].missing_ranks, std::vector<int>{2});
}

TEST_F(AnalyzerTest, TruncatedAndUnsafePicklesAreRefused) {
  SKIP_WITHOUT_PYTHON();
  FrJob job = world_job(2);
  job.collective("world", "all_reduce", 4);
  job.write(dir_);
  to_pickles(true);
  const std::string bytes = read_text(dir_ / "fr_1");
  write_text(dir_ / "fr_1", bytes.substr(0, bytes.size() - 40));
  const CliResult truncated = cli("analyze " + dir_.string());
  EXPECT_EQ(truncated.exit_code, 2);
  EXPECT_NE(truncated.err.find("fr_1"), std::string::npos) << truncated.err;
  EXPECT_NE(truncated.err.find("truncated"), std::string::npos) << truncated.err;

  // A pickle that would run code: a class instance (GLOBAL + REDUCE) inside a dump.
  const std::string script =
      "import pickle, datetime, sys\n"
      "pickle.dump({'version': '2.10', 'pg_config': {}, 'entries': [],"
      " 'x': datetime.date(2020, 1, 1)}, open(sys.argv[1], 'wb'), protocol=2)\n";
  const auto r = testing::run_ranks({kPython, "-c", script, (dir_ / "fr_1").string()}, 1,
                                    std::chrono::seconds(60));
  ASSERT_EQ(r[0].exit_code, 0) << r[0].output;
  const CliResult unsafe = cli("analyze " + dir_.string());
  EXPECT_EQ(unsafe.exit_code, 2);
  EXPECT_NE(unsafe.err.find("fr_1"), std::string::npos) << unsafe.err;
  EXPECT_NE(unsafe.err.find("opcode GLOBAL (0x63) is not allowed"), std::string::npos)
      << unsafe.err;
}

// The reader against Python's own pickler: every plain-data opcode of protocols 2 and 4,
// shared (memoized) objects, and the expected value from Python's json module; as a DOM and
// as the JSON text the dump reader parses.
TEST_F(AnalyzerTest, PickleReaderMatchesPython) {
  SKIP_WITHOUT_PYTHON();
  const std::string script = R"(
import json, pickle, sys
shared = [1, 2]
obj = {"ints": [0, 1, 255, 256, 65535, 65536, -1, -129, 2**31 - 1, -2**31, 2**31, 2**40,
                -2**40, 2**63 - 1, -2**63],
       "floats": [0.25, -1.5e300, 1e-300],
       "none": None, "t": True, "f": False, "text": "héllo \u2603 \U0001F600", "ctl": "a\tb\nc\"d\\e\x01",
       "tuple1": (1,), "tuple2": ("a", "b"), "tuple3": (1, 2, 3), "tuple0": (),
       "nested": [[shared, shared], {"k": shared}], "big": list(range(2500)),
       "dict": {str(i): i for i in range(1200)}}
for proto in (2, 4):
    with open(sys.argv[1] + str(proto), "wb") as f:
        pickle.dump(obj, f, protocol=proto)
with open(sys.argv[1] + "json", "w") as f:
    json.dump(obj, f)
)";
  const std::string base = (dir_ / "obj.").string();
  const auto r = testing::run_ranks({kPython, "-c", script, base}, 1, std::chrono::seconds(60));
  ASSERT_EQ(r[0].exit_code, 0) << r[0].output;
  const auto expected = nlohmann::json::parse(read_text(base + "json"));
  for (const char* proto : {"2", "4"}) {
    const std::string bytes = read_text(base + proto);
    const std::span<const std::byte> data(reinterpret_cast<const std::byte*>(bytes.data()),
                                          bytes.size());
    EXPECT_EQ(trace::read_pickle(data), expected) << "protocol " << proto;
    EXPECT_EQ(nlohmann::json::parse(trace::pickle_to_json_text(data)), expected)
        << "protocol " << proto;
  }
}

// meshtrace on hostile input: crafted dumps claiming huge world sizes or ranks, files that are
// not dumps (a 1 GiB garbage file, a JSON array, an unknown pickle), peers outside their group.
// Each must end in exit status 2 with a message naming the file and the fault, fast and without
// allocating what the file claims.

// Replaces the first `from` in `text` (which must hold it).
std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

struct HostileRun {
  int exit_code = -1;
  std::string err;
  double seconds = 0;
};

class AnalyzerHostileTest : public AnalyzerTest {
 protected:
  void SetUp() override {
    AnalyzerTest::SetUp();
    FrJob job(3);
    job.add_group({"world", "default_pg", {0, 1, 2}, std::nullopt});
    job.collective("world", "all_reduce", 4);
    job.send(0, "world", 1, 8);
    job.recv(1, "world", 0, 8);
    job.write(dir_);
  }
  // meshtrace analyze on the directory, its memory capped at 1 GiB (the address space; under a
  // sanitizer, its allocator's limits) so that an allocation sized by a crafted number fails the
  // test instead of swapping the machine.
  HostileRun analyze(const std::string& options = "") const {
    const fs::path err = dir_.string() + ".stderr";
#if defined(__SANITIZE_ADDRESS__)
    // ASan reserves terabytes of shadow address space, so no `ulimit -v` lets it start: its own
    // allocator caps instead (any one allocation, and the resident set, at 1 GiB; over: abort).
    const char* cap =
        "ASAN_OPTIONS=\"$ASAN_OPTIONS:max_allocation_size_mb=1024:hard_rss_limit_mb=1024\"; "
        "export ASAN_OPTIONS;";
#elif defined(__SANITIZE_THREAD__)
    // Likewise TSan's shadow memory: its allocator refuses any one allocation over 1 GiB (abort).
    const char* cap =
        "TSAN_OPTIONS=\"$TSAN_OPTIONS:max_allocation_size_mb=1024\"; export TSAN_OPTIONS;";
#else
    const char* cap = "ulimit -v 1048576;";
#endif
    const std::string cmd = fmt::format("{} exec {} analyze {} {} 2>'{}'", cap, MESHRT_MESHTRACE,
                                        options, dir_.string(), err.string());
    const auto start = std::chrono::steady_clock::now();
    const auto results = testing::run_ranks({"/bin/sh", "-c", cmd}, 1, std::chrono::seconds(60));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    HostileRun r{results[0].exit_code, read_text(err), took.count()};
    fs::remove(err);
    return r;
  }

  // Rewrites rank 1's dump with `from` replaced by `to`; expects exit 2 naming fr_1 and `says`.
  void expect_refused(const std::string& from, const std::string& to, const std::string& says) {
    const std::string original = read_text(dir_ / "fr_1");
    write_text(dir_ / "fr_1", replace(original, from, to));
    const HostileRun r = analyze();
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("fr_1"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    write_text(dir_ / "fr_1", original);
  }
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
  const HostileRun r = analyze();
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
  const HostileRun r = analyze();
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fr_1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("starts with 'GARBAGE!"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10.0);
}

// Reading a dump takes a multiple of its size (docs/reliability.md), so files over a limit are
// refused before they are read: one file over --max-input-mib (256 MiB by default), or all of
// them over --max-total-input-mib; the message names the file, its size, the limit and the
// option that raises it.
TEST_F(AnalyzerHostileTest, FilesOverTheSizeLimitsAreRefusedNamingTheOptionThatRaisesThem) {
  // A real dump padded to 2 MiB and one byte (JSON allows the trailing spaces).
  const std::string original = read_text(dir_ / "fr_1");
  write_text(dir_ / "fr_1", original + std::string((size_t{2} << 20) + 1 - original.size(), ' '));
  HostileRun r = analyze("--max-input-mib 2");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fr_1': 2.0 MiB (2097153 bytes) is over the limit of 2.0 MiB (2097152 "
                       "bytes) for one dump file"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("raise the limit with --max-input-mib"), std::string::npos) << r.err;
  r = analyze("--max-input-mib 3");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = analyze("--max-total-input-mib 2");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the 3 dump files hold 2.0 MiB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("over the limit of 2.0 MiB (2097152 bytes) for all of them; if they are "
                       "real dumps, raise the limit with --max-total-input-mib"),
            std::string::npos)
      << r.err;
  r = analyze("--max-input-mib 0");
  EXPECT_EQ(r.exit_code, 2) << r.err;

  // The default: a dump that starts right but is 300 MiB (sparse: no disk) is refused at once,
  // under the 1 GiB address-space cap that reading it whole would not fit.
  {
    std::ofstream out(dir_ / "fr_1", std::ios::binary | std::ios::trunc);
    out << original.substr(0, 200);
  }
  fs::resize_file(dir_ / "fr_1", uintmax_t{300} << 20);
  r = analyze();
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fr_1': 300.0 MiB (314572800 bytes) is over the limit of 256.0 MiB"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 10.0);
}

// Cheap refusals that keep a file of tiny items from costing a hundred times its size: entries
// without an op name, too many groups, too many distinct strings.
TEST_F(AnalyzerHostileTest, BulkTinyItemsAreRefusedBeforeTheyCostMuch) {
  const std::string head = R"({"version":"2.10","pg_config":{"g":{"ranks":"[1]"}},"entries":[)";
  auto refused = [&](const std::string& text, const std::string& says) {
    write_text(dir_ / "fr_1", text);
    const HostileRun r = analyze();
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("fr_1"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  };
  std::string empties = head;
  for (int i = 0; i < 100000; ++i) empties += "{},";
  refused(empties + "{}]}", "entry 0 has no 'profiling_name'");
  refused(head + R"({"process_group":["g"],"profiling_name":"a"},{"process_group":["g"]}]})",
          "entry 1 has no 'profiling_name'");
  std::string groups = R"({"version":"2.10","pg_config":{)";
  for (int i = 0; i <= 1 << 16; ++i) groups += fmt::format("\"{:x}\":{{}},", i);
  refused(groups + "\"z\":{}}}", "the dump names more than 65536 groups");
  std::string strings = head + R"({"process_group":["g"],"profiling_name":"a","input_dtypes":[)";
  for (int i = 0; i <= 1 << 20; ++i) strings += fmt::format("\"{:x}\",", i);
  refused(strings + "\"z\"]}]}", "more than 1048576 distinct strings");
}

TEST(PickleReader, RejectsMalformedInput) {
  auto read = [](std::string_view bytes) {
    return trace::read_pickle({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()});
  };
  auto error = [&](std::string_view bytes) {
    try {
      read(bytes);
    } catch (const trace::PickleError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Hex escapes are split from following hex-digit letters ("\x02" "c").
  EXPECT_EQ(read("\x80\x02K\x07."s), 7);
  EXPECT_NE(error("\x80\x02K\x07"s).find("ends before STOP"), std::string::npos);
  EXPECT_NE(error("\x80\x02X\x10\x00\x00\x00"
                  "ab."s)
                .find("truncated"),
            std::string::npos);
  EXPECT_NE(error("\x80\x02"
                  "cos\nsystem\n."s)
                .find("GLOBAL (0x63) is not allowed"),
            std::string::npos);
  EXPECT_NE(error("\x80\x02"
                  "cos\nsystem\n."s)
                .find("at offset 2"),
            std::string::npos);
  EXPECT_NE(error("\x80\x02]K\x01R."s).find("REDUCE"), std::string::npos);
  EXPECT_NE(error("\x80\x02}K\x01K\x02s."s).find("not a string"), std::string::npos);
  EXPECT_NE(error("\x80\x02h\x05."s).find("memo"), std::string::npos);
  EXPECT_NE(error("\x80\x02K\x01K\x02."s).find("malformed stack"), std::string::npos);
  // A list that contains itself.
  EXPECT_NE(error("\x80\x02]q\x00h\x00"
                  "a."s)
                .find("nested too deeply"),
            std::string::npos);
  // Memo references that double at each level: a small file, a value of 2^40 nodes.
  std::string laughs = "\x80\x02(]q\x00"s;
  for (char i = 0; i < 40; ++i) {
    laughs += "(h"s + i + "h" + i + "lq" + static_cast<char>(i + 1);
  }
  EXPECT_NE(error(laughs + "l.").find("expand"), std::string::npos);
}

TEST(JsonCursor, ReadsAndRejects) {
  trace::JsonCursor c(R"( {"a": "x\"y\\u00e9\ud83d\ude00", "b": [1, -2, 3.5e2], "c": null} )");
  std::string_view key;
  c.begin_object();
  ASSERT_TRUE(c.next_key(key));
  EXPECT_EQ(key, "a");
  EXPECT_EQ(c.read_string(), "x\"y\\u00e9\xF0\x9F\x98\x80");
  ASSERT_TRUE(c.next_key(key));
  c.begin_array();
  ASSERT_TRUE(c.next_element());
  EXPECT_EQ(c.read_int(), 1);
  ASSERT_TRUE(c.next_element());
  EXPECT_EQ(c.read_int(), -2);
  ASSERT_TRUE(c.next_element());
  c.skip_value();  // 3.5e2
  EXPECT_FALSE(c.next_element());
  ASSERT_TRUE(c.next_key(key));
  EXPECT_TRUE(c.read_null());
  EXPECT_FALSE(c.next_key(key));
  c.expect_end();

  for (const char* bad : {"{\"a\":1,}", "[1 2]", "{\"a\" 1}", "[01]", "\"abc", "[1]x",
                          "{\"a\":tru}", "[\"\t\"]", "[1.]"}) {
    trace::JsonCursor bc(bad);
    EXPECT_THROW(
        {
          bc.skip_value();
          bc.expect_end();
        },
        trace::JsonSyntaxError)
        << bad;
  }
}

}  // namespace
}  // namespace meshrt
