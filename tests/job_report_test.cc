// meshtrace report, on small hand-made inputs: the numbers of the page (rounded as shown) and of
// its JSON block, the aggregation over ranks, every section's note when its input is missing or
// partial, malformed input (exit status 2 naming the file), the failure section from
// flight-recorder dumps of a simulated hang, and names from the program kept as text.
#include "trace/analyze/job_report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/process_harness.h"
#include "trace/analyze/dump_fixtures.h"
#include "trace/analyze/dump_reader.h"
#include "trace/analyze/human_units.h"
#include "trace/atomic_file.h"
#include "trace/html_text.h"

#ifndef MESHRT_MESHTRACE
#error "MESHRT_MESHTRACE must name the meshtrace binary"
#endif

namespace meshrt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using trace::human_bytes;
using trace::human_gbps;
using trace::human_ms;
using trace::JobReport;
using trace::JobReportOptions;
using trace::make_job_report;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One comm logger row as MESHRT_COMMS_SUMMARY writes it (avg, p50, p99 and algbw are unused).
json comm_row(const char* dim, const char* op, int group, uint64_t bytes, uint64_t count,
              double total_ms, double busbw) {
  return {{"mesh_dim", dim ? dim : "world"},
          {"comm", dim ? fmt::format("mesh0/{}", dim) : "world"},
          {"op", op},
          {"group_size", group},
          {"bucket_bytes", bytes},
          {"count", count},
          {"total_ms", total_ms},
          {"avg_ms", total_ms / count},
          {"p50_ms", 0},
          {"p99_ms", 0},
          {"algbw_gbps", busbw / 2},
          {"busbw_gbps", busbw}};
}

// A scope-tree node as ScopeTree::json writes it; `dims` are the scope's own.
json scope(const std::string& path, const std::string& phase, json collectives, json dims,
           json children = json::array(), std::string name = "") {
  if (name.empty()) name = path.substr(path.rfind('/') + 1);
  return {{"scope", path},
          {"name", name},
          {"phase", phase},
          {"collectives", std::move(collectives)},
          {"self", json::object()},
          {"dims", std::move(dims)},
          {"children", std::move(children)}};
}

json dim_sums(uint64_t count, uint64_t bytes, double time_ms) {
  return {{"count", count}, {"bytes", bytes}, {"time_ms", time_ms}};
}

// A straggler report with one dim, tp, where rank 1 came last 3 times and rank 0 never.
json straggler_report() {
  return {{"ranks_reported", 2},
          {"missing_ranks", json::array()},
          {"hosts", 1},
          {"clock", "arrivals are one host's wall clock"},
          {"matched_ops", 20},
          {"incomplete_ops", 0},
          {"mismatched_ops", 0},
          {"dims",
           {{{"dim", "tp"},
             {"ops", 20},
             {"incomplete_ops", 0},
             {"skew_ms", {{"min", 0.001}, {"mean", 0.61725}, {"p50", 0.25}, {"max", 7.25}}},
             {"max_skew",
              {{"comm", "mesh0/tp"},
               {"seq", 7},
               {"op", "all_reduce"},
               {"last_rank", 1},
               {"skew_ms", 7.25}}},
             {"wait_ms_min", {{"rank", 1}, {"ms", 0.5}}},
             {"wait_ms_max", {{"rank", 0}, {"ms", 12.345}}},
             {"most_often_last", {{"rank", 1}, {"times", 3}}},
             {"top_late", {{{"rank", 1}, {"times_last", 3}, {"lateness_ms", 12.345}}}}}}},
          {"top_late", {{{"rank", 1}, {"times_last", 3}, {"lateness_ms", 12.345}}}},
          {"ranks",
           {{{"rank", 0},
             {"samples", 20},
             {"dropped", 0},
             {"ops", 20},
             {"comm_ms", 80},
             {"wait_ms", 12.345},
             {"times_last", 0},
             {"lateness_ms", 0}},
            {{"rank", 1},
             {"samples", 20},
             {"dropped", 0},
             {"ops", 20},
             {"comm_ms", 70},
             {"wait_ms", 0.5},
             {"times_last", 3},
             {"lateness_ms", 12.345}}}},
          {"incomplete", json::array()}};
}

// The JSON block of a page, as a tool would read it back.
json embedded_data(const std::string& html) {
  const std::string open = R"(<script type="application/json" id="report-data">)";
  const size_t at = html.find(open);
  if (at == std::string::npos) return nullptr;
  const size_t begin = at + open.size();
  return json::parse(html.substr(begin, html.find("</script>", begin) - begin));
}

class JobReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtrace-report-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  void write(const std::string& name, const json& doc) const { write(name, doc.dump(2)); }

  // Two ranks of a 1 x 2 (dp x tp) mesh: every input of a complete job.
  void write_complete_job() const {
    write("comms_0.json", json{{"rank", 0},
                               {"rows",
                                {comm_row("tp", "all_reduce", 2, 1024, 10, 20.0, 0.001),
                                 comm_row("tp", "all_reduce", 2, 4096, 10, 30.0, 0.002),
                                 comm_row("dp", "all_reduce", 2, 65536, 5, 12.5, 0.75),
                                 comm_row(nullptr, "all_gather", 2, 32, 1, 3.0, 0.00001)}}});
    write("comms_1.json", json{{"rank", 1},
                               {"rows",
                                {comm_row("tp", "all_reduce", 2, 1024, 10, 60.0, 0.0005),
                                 comm_row("tp", "all_reduce", 2, 4096, 10, 10.0, 0.004),
                                 comm_row("dp", "all_reduce", 2, 65536, 5, 12.5, 0.25),
                                 comm_row(nullptr, "barrier", 2, 0, 1, 0.5, 0)}}});
    write("stragglers.json", straggler_report());
    for (int rank : {0, 1}) {
      const json fc1 =
          scope("MLP/fc1", "forward", {{"all_reduce", 2}}, {{"tp", dim_sums(2, 2048, 1.5)}});
      const json mlp =
          scope("MLP", "forward", {{"all_reduce", 3}}, {{"dp", dim_sums(1, 4096, 0.25)}}, {fc1});
      const json root = scope("", "other", {{"all_reduce", 3}}, json::object(), {mlp});
      write(fmt::format("scope_tree_{}.json", rank),
            json{{"rank", rank}, {"noise_level", 0}, {"root", root}});
    }
  }

  JobReport report(const fs::path& dumps = {}, const std::string& prefix = {}) const {
    return make_job_report(JobReportOptions{dir_, dumps, prefix});
  }

  // Runs meshtrace with a time limit; stdout and stderr together.
  testing::RankResult cli(const std::string& args) const {
    const std::string cmd = fmt::format("exec {} {} 2>&1", MESHRT_MESHTRACE, args);
    return testing::run_ranks({"/bin/sh", "-c", cmd}, 1, std::chrono::seconds(60))[0];
  }

  fs::path dir_;
};

TEST(HumanUnits, RoundToThreeDigitsInAUnitThatKeepsThemFew) {
  EXPECT_EQ(trace::three_digits(0.00123456), "0.00123");
  EXPECT_EQ(trace::three_digits(12.345), "12.3");
  EXPECT_EQ(trace::three_digits(1234.5), "1230");
  EXPECT_EQ(trace::three_digits(2.0), "2");
  EXPECT_EQ(human_bytes(4), "4 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1024), "1 KiB");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(184560), "180 KiB");
  EXPECT_EQ(human_bytes(1048575), "1 MiB");  // 1023.999 KiB rounds into the next unit.
  EXPECT_EQ(human_bytes(3.5 * (1 << 30)), "3.5 GiB");
  EXPECT_EQ(human_ms(0), "0 ms");
  EXPECT_EQ(human_ms(0.00085), "850 ns");
  EXPECT_EQ(human_ms(0.1767), "177 µs");
  EXPECT_EQ(human_ms(2.2203), "2.22 ms");
  EXPECT_EQ(human_ms(133.221593), "133 ms");
  EXPECT_EQ(human_ms(999.7), "1 s");
  EXPECT_EQ(human_ms(1234), "1.23 s");
  EXPECT_EQ(human_gbps(0.000922), "922 KB/s");
  EXPECT_EQ(human_gbps(0.0012), "1.2 MB/s");
  EXPECT_EQ(human_gbps(11.52), "11.5 GB/s");
  EXPECT_EQ(human_gbps(0), "0 B/s");
}

TEST(RankPath, ReplacesEveryRankField) {
  EXPECT_EQ(trace::output_path("run/scope_tree_{rank}.json", 12), "run/scope_tree_12.json");
  EXPECT_EQ(trace::output_path("{rank}/{rank}", 3), "3/3");
  EXPECT_EQ(trace::output_path("one_file.json", 3), "one_file.json");
  trace::set_process_count(4);  // A job of 4 processes: ranks must not share a file.
  EXPECT_EQ(trace::output_path("run/one_file.json", 3), "run/one_file_rank3.json");
  EXPECT_EQ(trace::output_path("run/{rank}.json", 3), "run/3.json");
  trace::set_process_count(1);
}

TEST_F(JobReportTest, ShowsEverySectionWithItsNumbersRounded) {
  write_complete_job();
  const JobReport r = report();
  const json data = json::parse(r.data);
  EXPECT_TRUE(r.missing.empty()) << r.missing[0];
  EXPECT_EQ(embedded_data(r.html), data);
  EXPECT_EQ(data["ranks"], json({0, 1}));
  // Mesh dims by name, then groups outside a mesh.
  ASSERT_EQ(data["dims"].size(), 3u);
  EXPECT_EQ(data["dims"][0]["name"], "dp");
  EXPECT_EQ(data["dims"][1]["name"], "tp");
  EXPECT_EQ(data["dims"][2]["name"], "world");
  EXPECT_FALSE(data["dims"][2]["in_mesh"].get<bool>());
  EXPECT_TRUE(data["failure"].is_null());

  // busbw per point: the ranks' values weighted by their time. tp at 1 KiB: (0.001 x 20 +
  // 0.0005 x 60) / 80 = 0.000625 GB/s; 20 ops in 80 ms, 4 ms each.
  const json& series = data["comms"]["series"];
  ASSERT_EQ(series.size(), 4u);  // dp all_reduce, tp all_reduce, world all_gather, world barrier.
  EXPECT_EQ(series[1]["dim"], "tp");
  const json& p = series[1]["points"][0];
  EXPECT_EQ(p["bytes"], 1024);
  EXPECT_EQ(p["count"], 20);
  EXPECT_DOUBLE_EQ(p["total_ms"].get<double>(), 80.0);
  EXPECT_DOUBLE_EQ(p["avg_ms"].get<double>(), 4.0);
  EXPECT_NEAR(p["busbw_gbps"].get<double>(), 0.000625, 1e-12);
  EXPECT_EQ(p["ranks"].size(), 2u);
  const std::string tp_row =
      R"(<tr data-dim="tp" data-op="all_reduce" data-bytes="1024"><td><span class="chip")";
  ASSERT_TRUE(contains(r.html, tp_row)) << r.html;
  const std::string row = r.html.substr(r.html.find(tp_row), 700);
  EXPECT_TRUE(contains(row, R"(<td class="num">1 KiB</td><td class="num">20</td>)"
                            R"(<td class="num">4 ms</td>)"))
      << row;
  EXPECT_TRUE(contains(row, R"(<td class="num busbw">625 KB/s</td>)"
                            R"(<td class="num">500 KB/s</td><td class="num">1 MB/s</td>)"))
      << row;
  // dp: (0.75 x 12.5 + 0.25 x 12.5) / 25 = 0.5 GB/s.
  EXPECT_TRUE(contains(r.html, R"(<td class="num busbw">500 MB/s</td>)")) << r.html;

  // One line per (dim, op) that moved data: the barrier moved none.
  EXPECT_EQ(count(r.html, R"(<g class="series")"), 3u);
  EXPECT_TRUE(contains(r.html, R"(<g class="series" data-dim="tp" data-op="all_reduce">)"));
  EXPECT_TRUE(contains(r.html, "<title>rank 1: 500 KB/s (10 ops, 6 ms each)</title>")) << r.html;
  EXPECT_TRUE(contains(r.html, R"(text-anchor="middle">32 B</text>)"));  // An x-axis tick.

  // Time per rank, stacked by dim: rank 0 has 20 + 30 (tp) + 12.5 (dp) + 3 (world) = 65.5 ms.
  EXPECT_EQ(count(r.html, R"(<svg class="chart bar-chart")"), 1u);
  const json& t0 = data["comms"]["time"][0];
  EXPECT_DOUBLE_EQ(t0["total_ms"].get<double>(), 65.5);
  EXPECT_DOUBLE_EQ(t0["dims"]["tp"].get<double>(), 50.0);
  EXPECT_TRUE(contains(r.html, R"(<text class="bar-total")")) << r.html;
  EXPECT_TRUE(contains(r.html, ">65.5 ms</text>")) << r.html;
  EXPECT_TRUE(contains(r.html, "<title>rank 0, tp: 50 ms (76% of its time in collectives)</title>"))
      << r.html;

  // Stragglers: rank 1 was last on tp, rank 0 is not listed there.
  EXPECT_TRUE(
      contains(r.html, R"x( data-rank="1" data-dim="tp" style="background:rgba(225,87,89,0.88)")x"))
      << r.html;
  EXPECT_TRUE(contains(r.html, R"(>12.3 ms</td>)"));
  EXPECT_TRUE(contains(r.html, R"(<td class="heat none" data-rank="0" data-dim="tp")")) << r.html;
  EXPECT_TRUE(contains(r.html, "<td>all_reduce #7, rank 1 last</td><td>rank 1 (3 times)</td>"))
      << r.html;
  EXPECT_TRUE(contains(r.html, R"(<td class="num">250 µs</td><td class="num">617 µs</td>)"
                               R"(<td class="num">7.25 ms</td>)"))
      << r.html;
  EXPECT_EQ(data["stragglers"]["ranks"][0]["lateness_ms"]["tp"], nullptr);

  // Scope trees: the root sums its descendants (tp from fc1, dp from MLP itself).
  const json& rows = data["scope_trees"]["trees"][1]["rows"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["dims"]["tp"], dim_sums(2, 2048, 1.5));
  EXPECT_EQ(rows[0]["dims"]["dp"], dim_sums(1, 4096, 0.25));
  EXPECT_EQ(rows[2]["depth"], 2);
  EXPECT_TRUE(contains(r.html, R"(<details class="rank-tree" data-rank="0" open>)"));
  EXPECT_TRUE(contains(r.html, R"(<details class="rank-tree" data-rank="1">)"));
  EXPECT_TRUE(contains(r.html, R"(<td class="num" data-dim="dp">1</td><td class="num">4 KiB</td>)"
                               R"(<td class="num">250 µs</td>)"
                               R"(<td class="num" data-dim="tp">2</td><td class="num">2 KiB</td>)"
                               R"(<td class="num">1.5 ms</td>)"))
      << r.html;
  EXPECT_TRUE(contains(r.html, R"(<tr data-scope="MLP/fc1" data-phase="forward">)"));

  // Self-contained: no script runs, nothing is fetched.
  EXPECT_FALSE(contains(r.html, "<script>"));
  EXPECT_FALSE(contains(r.html, "http://"));
  EXPECT_FALSE(contains(r.html, "https://"));
  EXPECT_FALSE(contains(r.html, "<link"));
}

// The header names a straggler only when the evidence says so: last to most of its collectives
// and waited for far longer than anyone else.
TEST_F(JobReportTest, CallsARankAStragglerOnlyWhenItComesLastMostOfTheTime) {
  write_complete_job();
  std::string html = report().html;
  EXPECT_TRUE(contains(html,
                       "<div class=\"label\">Most waited for</div><div class=\"value\">"
                       "rank 1</div><div class=\"detail\">last to 3 of its 20 "
                       "collectives;"))
      << html;
  EXPECT_FALSE(contains(html, ">Straggler<")) << html;
  json st = straggler_report();
  st["ranks"][1]["times_last"] = 18;
  write("stragglers.json", st);
  html = report().html;
  EXPECT_TRUE(contains(html,
                       "<div class=\"card warn\"><div class=\"label\">Straggler</div>"
                       "<div class=\"value\">rank 1</div><div class=\"detail\">last to "
                       "18 of its 20 collectives; the others waited "))
      << html;
}

TEST_F(JobReportTest, SaysWhatIsMissingAndWhatProducesIt) {
  JobReport r = report();
  json data = json::parse(r.data);
  EXPECT_TRUE(data["comms"].is_null());
  EXPECT_TRUE(data["stragglers"].is_null());
  EXPECT_TRUE(data["scope_trees"].is_null());
  EXPECT_TRUE(data["failure"].is_null());
  ASSERT_EQ(r.missing.size(), 3u);
  EXPECT_TRUE(
      contains(r.missing[0], "MESHRT_COMMS_SUMMARY=" + dir_.string() + "/comms_{rank}.json"))
      << r.missing[0];
  EXPECT_TRUE(contains(r.missing[1], "MESHRT_STRAGGLER_REPORT=")) << r.missing[1];
  EXPECT_TRUE(contains(r.missing[2], "MESHRT_SCOPE_TREE=")) << r.missing[2];
  for (const auto& m : r.missing) {
    EXPECT_TRUE(contains(r.html, R"(<p class="missing">)" + trace::html_escape(m) + "</p>")) << m;
  }
  EXPECT_TRUE(contains(r.html, "No failure recorded"));
  EXPECT_FALSE(contains(r.html, R"(<section id="failure">)"));

  // Partial: rank 1 left a scope tree but no summary (it did not exit normally).
  write("comms_0.json", json{{"rank", 0}, {"rows", {comm_row("tp", "all_reduce", 2, 8, 1, 1, 1)}}});
  write("scope_tree_1.json",
        json{{"rank", 1}, {"root", scope("", "other", json::object(), json::object())}});
  r = report();
  data = json::parse(r.data);
  EXPECT_EQ(data["comms"]["missing_ranks"], json({1}));
  EXPECT_EQ(data["scope_trees"]["missing_ranks"], json({0}));
  EXPECT_TRUE(contains(r.html, "No comm logger summary from rank 1")) << r.html;
  EXPECT_TRUE(contains(r.html, "No scope tree from rank 0")) << r.html;
  EXPECT_EQ(count(r.html, R"(<g class="series")"), 1u);
}

// The size column shows what the ops moved, not their bucket's floor (2 KiB for 3 KiB ops).
TEST_F(JobReportTest, ShowsRealSizesNotTheBucketFloor) {
  auto sized = [](json row, uint64_t mean, uint64_t min, uint64_t max) {
    row["mean_bytes"] = mean;
    row["min_bytes"] = min;
    row["max_bytes"] = max;
    return row;
  };
  write("comms_0.json",
        json{{"rank", 0},
             {"rows",
              {sized(comm_row("tp", "all_reduce", 2, 2048, 4, 4.0, 1), 3072, 3072, 3072),
               sized(comm_row("dp", "all_gather", 2, 2048, 2, 2.0, 1), 3000, 2500, 3500)}}});
  write("comms_1.json",
        json{{"rank", 1},
             {"rows",
              {sized(comm_row("tp", "all_reduce", 2, 2048, 4, 4.0, 1), 3072, 3072, 3072),
               sized(comm_row("dp", "all_gather", 2, 2048, 2, 2.0, 1), 3000, 2500, 3500)}}});
  const JobReport r = report();
  const json data = json::parse(r.data);
  for (const json& s : data["comms"]["series"]) {
    const json& p = s["points"][0];
    EXPECT_EQ(p["bucket_bytes"], 2048);
    if (s["dim"] == "tp") {
      EXPECT_DOUBLE_EQ(p["bytes"].get<double>(), 3072.0);
    } else {
      EXPECT_DOUBLE_EQ(p["bytes"].get<double>(), 3000.0);
      EXPECT_EQ(p["min_bytes"], 2500);
      EXPECT_EQ(p["max_bytes"], 3500);
    }
  }
  EXPECT_TRUE(contains(r.html, R"(<td class="num">3 KiB</td><td class="num">8</td>)")) << r.html;
  EXPECT_TRUE(contains(r.html, R"(<td class="num">2.44 KiB &ndash; 3.42 KiB</td>)")) << r.html;
  EXPECT_FALSE(contains(r.html, R"(<td class="num">2 KiB</td>)")) << r.html;
}

TEST_F(JobReportTest, MalformedInputNamesTheFile) {
  write("comms_0.json", json{{"rank", 0}, {"rows", json::array()}});
  write("comms_1.json", std::string(R"({"rank": 1, "rows": [)"));
  try {
    report();
    FAIL() << "no error";
  } catch (const trace::InputError& e) {
    EXPECT_TRUE(contains(e.what(), (dir_ / "comms_1.json").string() + ": not valid JSON"))
        << e.what();
  }
  const auto r = cli("report " + dir_.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "meshtrace: error: " + (dir_ / "comms_1.json").string()))
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "report.html"));

  // Valid JSON, but not what MESHRT_STRAGGLER_REPORT writes.
  fs::remove(dir_ / "comms_1.json");
  write("stragglers.json", json{{"dims", json::object()}});
  try {
    report();
    FAIL() << "no error";
  } catch (const trace::InputError& e) {
    EXPECT_TRUE(contains(e.what(), (dir_ / "stragglers.json").string() +
                                       ": not a straggler report (MESHRT_STRAGGLER_REPORT)"))
        << e.what();
  }
  EXPECT_EQ(cli("report " + dir_.string()).exit_code, 2);
}

TEST_F(JobReportTest, CommandWritesThePage) {
  write_complete_job();
  auto r = cli("report " + dir_.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "meshtrace: wrote " + (dir_ / "report.html").string()))
      << r.output;
  EXPECT_EQ(embedded_data(read_text(dir_ / "report.html")), json::parse(report().data));
  r = cli(fmt::format("report {} -o {}", dir_.string(), (dir_ / "other.html").string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "other.html"));
  EXPECT_EQ(cli("report /nonexistent/meshrt-report").exit_code, 2);
}

// A hang as in examples/hang: rank 0 runs one all_reduce more than ranks 1-3.
testing::FrJob hang_job() {
  testing::FrJob job(4);
  job.add_group({"world", "default_pg", {0, 1, 2, 3}, std::nullopt});
  for (int i = 0; i < 6; ++i) job.collective("world", "all_reduce", 12);
  job.call(0, "world", "all_reduce", 12, "started");
  return job;
}

TEST_F(JobReportTest, FailureShowsTheVerdictAndTheEntriesAroundTheCulpritsOp) {
  write_complete_job();
  const fs::path dumps = dir_ / "attempt_0";
  fs::create_directories(dumps);
  hang_job().write(dumps, "fr_trace_");
  const JobReport r = report(dumps, "fr_trace_");
  const json data = json::parse(r.data);
  const json& failure = data["failure"];
  ASSERT_FALSE(failure.is_null());
  ASSERT_FALSE(failure.contains("error")) << failure["error"];
  ASSERT_EQ(failure["findings"].size(), 1u) << failure["verdict"];
  const json& finding = failure["findings"][0];
  EXPECT_EQ(finding["kind"], "not_joined");
  EXPECT_EQ(finding["culprit_ranks"], json({0}));
  EXPECT_EQ(finding["seq"], 7);
  EXPECT_TRUE(contains(failure["verdict"], "[not_joined]")) << failure["verdict"];

  // The culprit's op and the 5 before it; the last 5 entries of each rank it waited for.
  const json& entries = failure["entries"];
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0]["role"], "culprit");
  ASSERT_EQ(entries[0]["rows"].size(), 6u);
  const json& focus = entries[0]["rows"][5];
  EXPECT_TRUE(focus["focus"].get<bool>());
  EXPECT_EQ(focus["seq"], 7);
  EXPECT_EQ(focus["state"], "started");
  EXPECT_EQ(focus["time_ms"], 0.0);
  EXPECT_EQ(focus["sizes"], "[12]");
  EXPECT_EQ(entries[1]["role"], "waiting");
  EXPECT_EQ(entries[1]["rank"], 1);
  EXPECT_EQ(entries[1]["rows"].size(), 5u);
  EXPECT_EQ(entries[1]["rows"][4]["seq"], 6);
  EXPECT_LT(entries[1]["rows"][4]["time_ms"].get<double>(), 0);

  EXPECT_TRUE(contains(r.html, R"(<section id="failure">)"));
  EXPECT_TRUE(contains(r.html, "Failed: rank 0"));
  EXPECT_TRUE(contains(r.html, R"(<p class="culprit">culprit: rank 0</p>)"));
  EXPECT_TRUE(contains(r.html, R"(<tr class="focus"><td>)")) << r.html;
  EXPECT_TRUE(contains(r.html, R"(<td class="num">0 ms</td><td>world</td><td>#7</td>)")) << r.html;
  EXPECT_TRUE(contains(r.html, R"(<figure class="entries waiting" data-rank="3">)"));

  // Dumps in the report's own directory are found without --dumps.
  fs::remove_all(dumps);
  hang_job().write(dir_, "fr_");
  EXPECT_EQ(json::parse(report().data)["failure"]["findings"].size(), 1u);
}

TEST_F(JobReportTest, DumpsThatCannotBeUsed) {
  // None where --dumps points: the section says so, the rest of the report stands.
  fs::create_directories(dir_ / "empty");
  JobReport r = report(dir_ / "empty", "fr_trace_");
  EXPECT_TRUE(json::parse(r.data)["failure"].contains("error"));
  EXPECT_TRUE(contains(r.html, "The analyzer could not use the dumps in")) << r.html;
  EXPECT_TRUE(contains(r.html, "Dumps unreadable"));
  // A corrupt dump is malformed input.
  std::ofstream(dir_ / "empty" / "fr_trace_0") << "{\"version\": ";
  EXPECT_THROW(report(dir_ / "empty", "fr_trace_"), trace::InputError);
}

TEST_F(JobReportTest, NamesFromTheProgramStayText) {
  const std::string hostile = "</script><b id=\"x\">";
  const json child = scope(hostile, "forward", {{"all_reduce", 1}}, {{"tp", dim_sums(1, 8, 1)}},
                           json::array(), hostile);
  write("scope_tree_0.json",
        json{{"rank", 0},
             {"root", scope("", "other", {{"all_reduce", 1}}, json::object(), {child})}});
  const JobReport r = report();
  EXPECT_FALSE(contains(r.html, "<b id")) << r.html;
  EXPECT_TRUE(contains(r.html, "&lt;/script&gt;&lt;b id=&quot;x&quot;&gt;"));
  // The JSON block did not end early: it reads back whole, the name intact.
  const json data = embedded_data(r.html);
  EXPECT_EQ(data["scope_trees"]["trees"][0]["rows"][1]["name"], hostile);
}

}  // namespace
}  // namespace meshrt
