// The trace exports from real ops: the Chrome trace (one process per rank, one track per mesh
// dim, slices with their args, scope spans above them, ranks on one clock), its per-rank files
// merged, JSON lines parsed back field by field, the Prometheus text parsed back and checked
// against values recomputed from the JSON lines, the ring of kept records, and the MESHRT_TRACE_*
// files written at exit by in-process ranks and by Gloo processes: promtool accepts the
// Prometheus file, every export names size buckets and mesh dims alike, and the merged trace of
// the training demo is valid trace-event JSON with scopes enclosing their ops.
#include "trace/exports.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "tests/process_harness.h"
#include "trace/bandwidth.h"
#include "trace/chrome_trace.h"
#include "trace/comm_logger.h"
#include "trace/labels.h"
#include "trace/prometheus_export.h"
#include "trace/scope.h"

#ifndef MESHRT_MESH_DEMO
#error "MESHRT_MESH_DEMO must name the mesh_demo binary"
#endif
#ifndef MESHRT_TP_MLP_TRAIN
#error "MESHRT_TP_MLP_TRAIN must name the tp_mlp_train binary"
#endif

namespace meshrt {
namespace {

using nlohmann::json;
using trace::ExportFormat;
using trace::Exports;

namespace fs = std::filesystem;

constexpr int kWorld = 4;

// A fresh directory under /tmp, removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<json> parse_lines(const std::string& text) {
  std::vector<json> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

// Checks what Perfetto and chrome://tracing need of a trace-event file: every event has ph, ts,
// pid and tid; complete events have a duration; B/E pairs balance; and the slices of one track
// nest (a slice that starts inside another ends inside it), within 1 ns of rounding.
void check_trace_event_format(const json& trace) {
  ASSERT_TRUE(trace.is_object() && trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> slices;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::string>> open;  // B without its E.
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string()) << e;
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e;
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
    const std::string ph = e["ph"];
    const std::pair<int64_t, int64_t> track{e["pid"], e["tid"]};
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number() && e["dur"].get<double>() >= 0) << e;
      ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e;
      slices[track].emplace_back(e["ts"].get<double>(),
                                 e["ts"].get<double>() + e["dur"].get<double>());
    } else if (ph == "B") {
      open[track].push_back(e.value("name", ""));
    } else if (ph == "E") {
      ASSERT_FALSE(open[track].empty()) << "E without B: " << e;
      open[track].pop_back();
    } else {
      ASSERT_EQ(ph, "M") << "meshrt writes X, B/E and M events only: " << e;
      ASSERT_TRUE(e.contains("name") && e.contains("args")) << e;
    }
  }
  for (const auto& [track, names] : open) EXPECT_TRUE(names.empty()) << "unbalanced B/E";
  constexpr double kNsInUs = 1e-3;
  for (auto& [track, list] : slices) {
    // Enclosing slices first where slices start together.
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> ends;  // Of the slices enclosing the current one.
    for (const auto& [begin, end] : list) {
      while (!ends.empty() && ends.back() <= begin + kNsInUs) ends.pop_back();
      if (!ends.empty()) {
        EXPECT_LE(end, ends.back() + kNsInUs)
            << "slice [" << begin << ", " << end << "] of pid " << track.first << " tid "
            << track.second << " overlaps the one it starts in";
      }
      ends.push_back(end);
    }
  }
}

// Runs `promtool check metrics` on `path` and expects no complaint. promtool comes with Debian's
// prometheus package, which .ci/install-deps.sh installs: without it the test fails.
void expect_promtool_accepts(const std::string& path) {
  ASSERT_EQ(std::system("command -v promtool > /dev/null 2>&1"), 0)
      << "promtool not found: install Debian's prometheus package (bash .ci/install-deps.sh)";
  const std::string cmd = "promtool check metrics < '" + path + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << cmd;
  std::string report;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) report.append(buf, n);
  const int status = ::pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << cmd << " exited with " << status << ":\n"
      << report;
  EXPECT_EQ(report, "") << cmd;
}

trace::ExportOptions enabled(size_t max_ops_per_rank = 100000) {
  trace::ExportOptions o;
  o.enabled = true;
  o.max_ops_per_rank = max_ops_per_rank;
  return o;
}

// A 2x2 (dp, tp) mesh on 4 in-process ranks. The ops under test run in scope "step" (mesh
// creation runs collectives of its own on the world): per rank 3 all_reduce of 64 B and one
// all_gather of 8000 B on tp, one all_reduce of 4000 B on dp, a barrier on the world; rank 0
// sends 32 B to rank 1; ranks 2 and 3 all_reduce 16 B on a communicator of dim "aa", a track that
// sorts first and exists on those ranks only, so their per-rank files number tracks differently.
class ExportsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Exports::instance().configure(enabled());
    Exports::instance().reset();
    run_inproc(kWorld, [](Communicator& world) {
      auto mesh = init_device_mesh({2, 2}, {"dp", "tp"});
      CommOptions options;
      options.name = "pair";
      options.mesh_dim = "aa";
      auto pair = world.split(world.rank() >= 2 ? 0 : kNoColor, world.rank(), options);
      trace::Scope step("step", trace::Phase::kForward);
      std::vector<float> small(16), big(1000), out(2000), msg(8);
      for (int i = 0; i < 3; ++i) mesh->comm("tp").all_reduce(view(small))->wait();
      mesh->comm("tp").all_gather(view(big), view(out))->wait();
      mesh->comm("dp").all_reduce(view(big))->wait();
      world.barrier()->wait();
      if (world.rank() == 0) world.send(view(msg), 1)->wait();
      if (world.rank() == 1) world.recv(view(msg), 0)->wait();
      if (pair) pair->all_reduce(view(std::span(msg).first(4)))->wait();
    });
  }
  void TearDown() override {
    Exports::instance().configure({});
    Exports::instance().reset();
  }

  // The ops' X events of the step, by pid and track name.
  static std::map<int, std::map<std::string, std::vector<json>>> step_events(const json& trace) {
    std::map<std::pair<int, int>, std::string> tracks;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name")
        tracks[{e["pid"], e["tid"]}] = e["args"]["name"];
    }
    std::map<int, std::map<std::string, std::vector<json>>> out;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X" || e["cat"] == "scope" || e["args"]["scope"] != "step") continue;
      out[e["pid"]][tracks.at({e["pid"], e["tid"]})].push_back(e);
    }
    return out;
  }
};

// Checks the step's events of one rank's trace.
void check_rank_events(int rank, const std::map<std::string, std::vector<json>>& tracks) {
  SCOPED_TRACE("rank " + std::to_string(rank));
  ASSERT_EQ(tracks.at("tp").size(), 4u);
  ASSERT_EQ(tracks.at("dp").size(), 1u);
  ASSERT_EQ(tracks.at("world").size(), rank < 2 ? 2u : 1u);
  ASSERT_EQ(tracks.count("aa"), rank < 2 ? 0u : 1u);
  if (rank >= 2) {
    ASSERT_EQ(tracks.at("aa").size(), 1u);
    EXPECT_EQ(tracks.at("aa")[0]["args"]["comm"], "pair");
    EXPECT_EQ(tracks.at("aa")[0]["args"]["bytes"], 16);
  }
  for (int i = 0; i < 3; ++i) {
    const json& e = tracks.at("tp")[i];
    EXPECT_EQ(e["name"], "all_reduce");
    EXPECT_EQ(e["cat"], "tp");
    EXPECT_EQ(e["args"]["comm"], "mesh0/tp");
    EXPECT_EQ(e["args"]["seq"], i + 1);
    EXPECT_EQ(e["args"]["bytes"], 64);
    EXPECT_EQ(e["args"]["dtype"], "f32");
    EXPECT_EQ(e["args"]["group_size"], 2);
    EXPECT_EQ(e["args"]["state"], "completed");
    EXPECT_EQ(e["args"]["phase"], "forward");
    const double dur = e["dur"];
    ASSERT_GT(dur, 0.0);
    EXPECT_NEAR(e["args"]["algbw_gbps"].get<double>(), 64 / (dur * 1e3), 1e-6 * 64 / dur);
    // all_reduce on a group of 2: busbw = algbw x 2(n-1)/n = algbw.
    EXPECT_NEAR(e["args"]["busbw_gbps"].get<double>(), e["args"]["algbw_gbps"].get<double>(),
                1e-12);
  }
  const json& gather = tracks.at("tp")[3];
  EXPECT_EQ(gather["name"], "all_gather");
  EXPECT_EQ(gather["args"]["bytes"], 8000);
  EXPECT_NEAR(gather["args"]["busbw_gbps"].get<double>(),
              gather["args"]["algbw_gbps"].get<double>() * 0.5, 1e-12);
  EXPECT_EQ(tracks.at("dp")[0]["args"]["bytes"], 4000);
  EXPECT_EQ(tracks.at("world")[0]["name"], "barrier");
  if (rank < 2) {
    const json& p2p = tracks.at("world")[1];
    EXPECT_EQ(p2p["name"], rank == 0 ? "send" : "recv");
    EXPECT_EQ(p2p["args"]["seq"], 1);  // the p2p sequence number
    EXPECT_EQ(p2p["args"]["root_or_peer"], 1 - rank);
    EXPECT_EQ(p2p["args"]["bytes"], 32);
  }
  // One op at a time per communicator: slices on a track never overlap.
  for (const auto& [name, events] : tracks) {
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_LE(events[i - 1]["ts"].get<double>() + events[i - 1]["dur"].get<double>(),
                events[i]["ts"].get<double>() + 1e-3)
          << name << " slice " << i;
    }
  }
}

// Members of one group are inside the same collective at the same time, so on a common clock
// their slices of it intersect.
void check_groups_overlap(const std::map<int, std::map<std::string, std::vector<json>>>& events,
                          const std::string& track, std::pair<int, int> members) {
  const auto& a = events.at(members.first).at(track);
  const auto& b = events.at(members.second).at(track);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]["args"]["seq"], b[i]["args"]["seq"]);
    const double a0 = a[i]["ts"], a1 = a0 + a[i]["dur"].get<double>();
    const double b0 = b[i]["ts"], b1 = b0 + b[i]["dur"].get<double>();
    EXPECT_LT(std::max(a0, b0), std::min(a1, b1))
        << track << " #" << a[i]["args"]["seq"] << " of ranks " << members.first << ","
        << members.second << ": [" << a0 << ", " << a1 << "] vs [" << b0 << ", " << b1 << "]";
  }
}

TEST_F(ExportsTest, ChromeTraceHasAProcessPerRankAndATrackPerDim) {
  const json trace = json::parse(Exports::instance().render(ExportFormat::kChromeTrace));
  check_trace_event_format(trace);
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_GT(trace["otherData"]["origin_wall_ns"].get<int64_t>(), 0);
  std::map<int, std::string> process_names;
  std::map<std::string, std::set<int>> tids_by_name;
  std::map<int, std::set<std::string>> names_by_pid;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (e["name"] == "thread_name") {
      tids_by_name[e["args"]["name"]].insert(e["tid"].get<int>());
      names_by_pid[e["pid"]].insert(e["args"]["name"]);
    }
  }
  ASSERT_EQ(process_names.size(), 4u);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(process_names[r], "rank " + std::to_string(r));
    EXPECT_EQ(names_by_pid[r],
              r < 2 ? (std::set<std::string>{"user scopes", "dp", "tp", "world"})
                    : (std::set<std::string>{"user scopes", "aa", "dp", "tp", "world"}));
  }
  for (const auto& [name, tids] : tids_by_name) EXPECT_EQ(tids.size(), 1u) << name;
  EXPECT_EQ(tids_by_name.size(), 5u);
  // Scopes first: Perfetto draws them above the ops.
  EXPECT_EQ(*tids_by_name.at("user scopes").begin(), 1);
  const auto events = step_events(trace);
  ASSERT_EQ(events.size(), 4u);
  for (int r = 0; r < kWorld; ++r) check_rank_events(r, events.at(r));
  check_groups_overlap(events, "tp", {0, 1});
  check_groups_overlap(events, "tp", {2, 3});
  check_groups_overlap(events, "dp", {0, 2});
}

// The scope spans of one trace, by pid (on its "user scopes" track).
std::map<int, std::vector<json>> scope_spans(const json& trace) {
  std::map<std::pair<int, int>, std::string> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name")
      tracks[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  std::map<int, std::vector<json>> out;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "scope") continue;
    EXPECT_EQ(tracks.at({e["pid"], e["tid"]}), "user scopes") << e;
    out[e["pid"]].push_back(e);
  }
  return out;
}

// Whether slice `outer` encloses slice `inner` (within 1 ns of rounding).
bool encloses(const json& outer, const json& inner) {
  const double begin = outer["ts"], end = begin + outer["dur"].get<double>();
  const double in_begin = inner["ts"], in_end = in_begin + inner["dur"].get<double>();
  return begin <= in_begin + 1e-3 && in_end <= end + 1e-3;
}

TEST_F(ExportsTest, ChromeTraceHasScopeSpansEnclosingTheirOps) {
  const json trace = json::parse(Exports::instance().render(ExportFormat::kChromeTrace));
  const auto spans = scope_spans(trace);
  const auto events = step_events(trace);
  ASSERT_EQ(spans.size(), 4u);
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    // Mesh creation and the split ran outside any scope: the step is the only span.
    ASSERT_EQ(spans.at(r).size(), 1u);
    const json& step = spans.at(r)[0];
    EXPECT_EQ(step["name"], "step / forward");
    EXPECT_EQ(step["args"]["scope"], "step");
    EXPECT_EQ(step["args"]["phase"], "forward");
    EXPECT_EQ(step["args"]["ops"], 7);
    size_t ops = 0;
    for (const auto& [track, list] : events.at(r)) {
      for (const json& op : list) {
        EXPECT_TRUE(encloses(step, op)) << track << " " << op;
        ++ops;
      }
    }
    EXPECT_EQ(ops, 7u);
  }
}

TEST_F(ExportsTest, PerRankFilesMergeIntoOneTrace) {
  TempDir dir("meshrt-exports-merge");
  const auto written =
      Exports::instance().write(ExportFormat::kChromeTrace, dir.file("trace_{rank}.json"));
  ASSERT_EQ(written.size(), 4u);
  size_t x_events = 0;
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(written[r], dir.file("trace_" + std::to_string(r) + ".json"));
    const json one = json::parse(read_file(written[r]));
    for (const auto& e : one["traceEvents"]) {
      EXPECT_EQ(e["pid"], r);
      x_events += e["ph"] == "X";
    }
    const auto events = step_events(one);
    ASSERT_EQ(events.size(), 1u);
    check_rank_events(r, events.at(r));
  }
  const json merged = json::parse(trace::merge_chrome_traces(written));
  check_trace_event_format(merged);
  std::set<int> pids;
  std::map<std::string, std::set<int>> tids_by_name;
  std::map<int, std::set<std::string>> names_by_tid;
  size_t merged_x = 0;
  for (const auto& e : merged["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    merged_x += e["ph"] == "X";
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      tids_by_name[e["args"]["name"]].insert(e["tid"].get<int>());
      names_by_tid[e["tid"]].insert(e["args"]["name"]);
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(merged_x, x_events);
  ASSERT_EQ(tids_by_name.size(), 5u);
  EXPECT_EQ(*tids_by_name.at("user scopes").begin(), 1);
  for (const auto& [name, tids] : tids_by_name) EXPECT_EQ(tids.size(), 1u) << name;
  for (const auto& [tid, names] : names_by_tid) EXPECT_EQ(names.size(), 1u) << tid;
  const auto events = step_events(merged);
  for (int r = 0; r < kWorld; ++r) check_rank_events(r, events.at(r));
  check_groups_overlap(events, "tp", {0, 1});
  check_groups_overlap(events, "dp", {1, 3});
  check_groups_overlap(events, "aa", {2, 3});

  // The same rank twice, or a file that is not there, is an error that names the files.
  const std::vector<std::string> twice = {written[0], written[1], written[0]};
  try {
    trace::merge_chrome_traces(twice);
    ADD_FAILURE() << "merging rank 0 twice did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 is in both " + written[0]), std::string::npos)
        << e.what();
  }
  const std::vector<std::string> missing = {dir.file("nope.json")};
  EXPECT_THROW(trace::merge_chrome_traces(missing), std::runtime_error);
}

const std::vector<std::string> kJsonlKeys = {
    "rank",        "comm",         "comm_uid",    "store_key",       "description",
    "mesh_dim",    "backend",      "group_size",  "group_rank",      "op",
    "dtype",       "reduce_op",    "algorithm",   "collective_seq",  "p2p_seq",
    "op_seq",      "is_p2p",       "input_count", "output_count",    "bytes",
    "size_bucket", "root_or_peer", "timeout_ms",  "created_wall_ns", "enqueue_ns",
    "start_ns",    "end_ns",       "state",       "duration_us",     "algbw_gbps",
    "busbw_gbps",  "scope",        "phase",       "setup",           "thread_id",
    "caller_file", "caller_line"};

TEST_F(ExportsTest, JsonlHasOneLinePerOpWithEveryField) {
  TempDir dir("meshrt-exports-jsonl");
  ASSERT_EQ(Exports::instance().write(ExportFormat::kJsonl, dir.file("ops.jsonl")).size(), 1u);
  std::map<int, std::vector<json>> step;
  std::map<int, int> setup;
  std::stringstream in(read_file(dir.file("ops.jsonl")));
  for (std::string text; std::getline(in, text);) {
    const nlohmann::ordered_json line = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (auto it = line.begin(); it != line.end(); ++it) keys.push_back(it.key());
    ASSERT_EQ(keys, kJsonlKeys) << text;
    if (line["scope"] == "step") step[line["rank"]].push_back(json::parse(text));
    if (line["setup"] == true) {
      // meshrt's own: the mesh's agreement check and the splits (dp, tp, pair), on the world.
      EXPECT_EQ(line["op"], "all_gather") << text;
      EXPECT_EQ(line["comm"], "world") << text;
      EXPECT_EQ(line["scope"], "") << text;
      ++setup[line["rank"]];
    }
  }
  EXPECT_EQ(setup, (std::map<int, int>{{0, 4}, {1, 4}, {2, 4}, {3, 4}}));
  ASSERT_EQ(step.size(), 4u);
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& ops = step[r];
    ASSERT_EQ(ops.size(), 7u);
    const json& ar = ops[0];
    EXPECT_EQ(ar["op"], "all_reduce");
    EXPECT_EQ(ar["comm"], "mesh0/tp");
    EXPECT_EQ(ar["mesh_dim"], "tp");
    EXPECT_EQ(ar["backend"], "inproc");
    EXPECT_EQ(ar["group_size"], 2);
    EXPECT_EQ(ar["group_rank"], r % 2);
    EXPECT_EQ(ar["dtype"], "f32");
    EXPECT_EQ(ar["reduce_op"], "sum");
    EXPECT_EQ(ar["collective_seq"], 1);
    EXPECT_EQ(ar["is_p2p"], false);
    EXPECT_EQ(ar["input_count"], 16);
    EXPECT_EQ(ar["bytes"], 64);
    EXPECT_EQ(ar["size_bucket"], "64-128B");
    EXPECT_EQ(ar["state"], "completed");
    EXPECT_EQ(ar["phase"], "forward");
    EXPECT_EQ(ar["setup"], false);
    EXPECT_NE(ar["caller_file"].get<std::string>().find("exports_test.cc"), std::string::npos);
    EXPECT_GT(ar["caller_line"].get<int>(), 0);
    EXPECT_GT(ar["created_wall_ns"].get<int64_t>(), 0);
    EXPECT_LE(ar["enqueue_ns"].get<int64_t>(), ar["start_ns"].get<int64_t>());
    EXPECT_LT(ar["start_ns"].get<int64_t>(), ar["end_ns"].get<int64_t>());
    EXPECT_NEAR(ar["duration_us"].get<double>(),
                (ar["end_ns"].get<int64_t>() - ar["start_ns"].get<int64_t>()) / 1e3, 1e-9);
    EXPECT_EQ(ops[1]["collective_seq"], 2);
    EXPECT_EQ(ops[3]["op"], "all_gather");
    EXPECT_EQ(ops[3]["output_count"], 2000);
    EXPECT_EQ(ops[4]["mesh_dim"], "dp");
    EXPECT_EQ(ops[4]["size_bucket"], "2-4KiB");  // 4000 B
    EXPECT_EQ(ops[5]["op"], "barrier");
    EXPECT_EQ(ops[5]["mesh_dim"], "world");  // The default group, outside any mesh.
    EXPECT_EQ(ops[5]["size_bucket"], "0B");
    EXPECT_EQ(ops[5]["comm"], "world");
    EXPECT_EQ(ops[5]["dtype"], "");
    if (r < 2) {
      EXPECT_EQ(ops[6]["op"], r == 0 ? "send" : "recv");
      EXPECT_EQ(ops[6]["is_p2p"], true);
      EXPECT_EQ(ops[6]["p2p_seq"], 1);
      EXPECT_EQ(ops[6]["root_or_peer"], 1 - r);
    } else {
      EXPECT_EQ(ops[6]["comm"], "pair");
      EXPECT_EQ(ops[6]["mesh_dim"], "aa");
      EXPECT_EQ(ops[6]["group_rank"], r - 2);
    }
  }
}

// One sample of a Prometheus text file.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The family a sample belongs to: its name, or for a histogram's series the name without the
// _bucket, _sum or _count suffix.
std::string family_of(const std::string& name, const std::string& family,
                      const std::map<std::string, std::string>& types) {
  if (!types.count(family) || types.at(family) != "histogram") return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (name == family + suffix) return family;
  }
  return name;
}

// Parses the exposition format strictly: each family's HELP, then TYPE, then its samples, and
// families never interleave.
std::vector<Sample> parse_prometheus(const std::string& text,
                                     std::map<std::string, std::string>* types) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (gauge|counter|histogram))");
  static const std::regex sample_head(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+))");
  std::vector<Sample> samples;
  std::string family;
  std::set<std::string> finished;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      EXPECT_EQ(finished.count(m[1]), 0u) << "family " << m[1] << " appears twice";
      if (!family.empty()) finished.insert(family);
      family = m[1];
    } else if (std::regex_match(line, m, type)) {
      EXPECT_EQ(m[1], family) << "TYPE without its HELP: " << line;
      (*types)[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample_head)) {
      EXPECT_EQ(family_of(m[1], family, *types), family) << "sample outside its family: " << line;
      EXPECT_TRUE(types->count(family)) << "sample before its TYPE: " << line;
      Sample s{m[1], {}, std::stod(m[3])};
      const std::string labels = m[2];
      size_t i = 0;
      while (i < labels.size()) {
        const size_t eq = labels.find("=\"", i);
        EXPECT_NE(eq, std::string::npos) << line;
        if (eq == std::string::npos) break;
        const std::string key = labels.substr(i, eq - i);
        EXPECT_TRUE(std::regex_match(key, std::regex("[a-zA-Z_][a-zA-Z0-9_]*"))) << key;
        std::string value;
        size_t j = eq + 2;
        for (; j < labels.size() && labels[j] != '"'; ++j) {
          if (labels[j] == '\\') {
            ++j;
            value += labels[j] == 'n' ? '\n' : labels[j];
          } else {
            value += labels[j];
          }
        }
        EXPECT_TRUE(s.labels.emplace(key, value).second) << "label " << key << " twice";
        i = j + 1;
        if (i < labels.size()) {
          EXPECT_EQ(labels[i], ',') << line;
          ++i;
        }
      }
      samples.push_back(std::move(s));
    } else {
      ADD_FAILURE() << "not a valid exposition line: '" << line << "'";
    }
  }
  return samples;
}

const Sample* find_sample(const std::vector<Sample>& samples, const std::string& name,
                          const std::map<std::string, std::string>& labels) {
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all = all && s.labels.count(k) && s.labels.at(k) == v;
    if (all) return &s;
  }
  return nullptr;
}

TEST_F(ExportsTest, PrometheusTextUsesInspectorNamesInBaseUnitsAndParsesBack) {
  TempDir dir("meshrt-exports-prom");
  // Every rank, collectives and p2p ops: promtool accepts the whole file.
  ASSERT_EQ(Exports::instance().write(ExportFormat::kPrometheus, dir.file("all.prom")).size(), 1u);
  expect_promtool_accepts(dir.file("all.prom"));
  const std::vector<int> rank0 = {0};
  std::map<std::string, std::string> types;
  const auto samples =
      parse_prometheus(Exports::instance().render(ExportFormat::kPrometheus, rank0), &types);
  EXPECT_EQ(types, (std::map<std::string, std::string>{
                       {"nccl_bus_bandwidth_bytes_per_second", "gauge"},
                       {"nccl_collective_exec_time_seconds", "histogram"},
                       {"nccl_collectives_total", "counter"},
                       {"nccl_p2p_bus_bandwidth_bytes_per_second", "gauge"},
                       {"nccl_p2p_exec_time_seconds", "histogram"},
                       {"nccl_p2p_total", "counter"}}));
  for (const Sample& s : samples) {
    const bool p2p = s.name.starts_with("nccl_p2p");
    std::set<std::string> keys;
    for (const auto& [k, v] : s.labels) keys.insert(k);
    std::set<std::string> want = {"version", "slurm_job_id", "node",         "gpu",  "comm_name",
                                  "n_nodes", "nranks",       "message_size", "rank", "mesh_dim"};
    want.insert(p2p ? "p2p_operation" : "collective");
    if (!p2p) want.insert("algo_proto");
    if (s.name.ends_with("_bucket")) want.insert("le");
    EXPECT_EQ(keys, want) << s.name;
    EXPECT_EQ(s.labels.at("rank"), "0");
  }
  const std::map<std::string, std::string> tp_small = {
      {"comm_name", "mesh0/tp"},   {"mesh_dim", "tp"}, {"collective", "AllReduce"},
      {"message_size", "64-128B"}, {"nranks", "2"},    {"n_nodes", "1"},
      {"algo_proto", "inproc"}};
  const Sample* count = find_sample(samples, "nccl_collectives_total", tp_small);
  ASSERT_NE(count, nullptr);
  EXPECT_EQ(count->value, 3);
  // Inspector's values from the same ops' JSON lines, in base units: the time histogram, the
  // geometric mean of busbw in bytes per second.
  std::vector<double> seconds;
  double log_busbw = 0;
  for (const auto& line : parse_lines(Exports::instance().render(ExportFormat::kJsonl, rank0))) {
    if (line["mesh_dim"] != "tp" || line["op"] != "all_reduce") continue;
    seconds.push_back(line["duration_us"].get<double>() / 1e6);
    log_busbw += std::log(line["busbw_gbps"].get<double>() * 1e9);
  }
  ASSERT_EQ(seconds.size(), 3u);
  const double sum_s = std::accumulate(seconds.begin(), seconds.end(), 0.0);
  const Sample* time_sum = find_sample(samples, "nccl_collective_exec_time_seconds_sum", tp_small);
  ASSERT_NE(time_sum, nullptr);
  EXPECT_NEAR(time_sum->value, sum_s, 1e-9 * sum_s);
  EXPECT_EQ(find_sample(samples, "nccl_collective_exec_time_seconds_count", tp_small)->value, 3);
  // Cumulative buckets: every `le` (in seconds) counts the ops that took at most that long.
  std::map<std::string, std::string> le = tp_small;
  for (double bound : trace::kExecTimeBucketsSeconds) {
    le["le"] = fmt::format("{}", bound);
    const Sample* bucket = find_sample(samples, "nccl_collective_exec_time_seconds_bucket", le);
    ASSERT_NE(bucket, nullptr) << le["le"];
    EXPECT_EQ(bucket->value,
              std::count_if(seconds.begin(), seconds.end(), [&](double s) { return s <= bound; }))
        << le["le"];
  }
  le["le"] = "+Inf";
  EXPECT_EQ(find_sample(samples, "nccl_collective_exec_time_seconds_bucket", le)->value, 3);
  const Sample* busbw = find_sample(samples, "nccl_bus_bandwidth_bytes_per_second", tp_small);
  ASSERT_NE(busbw, nullptr);
  EXPECT_NEAR(busbw->value, std::exp(log_busbw / 3), 1e-9 * busbw->value);
  EXPECT_GT(busbw->value, 0.0);

  const Sample* gather = find_sample(samples, "nccl_collectives_total",
                                     {{"collective", "AllGather"}, {"message_size", "4-8KiB"}});
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->value, 1);
  const Sample* dp = find_sample(samples, "nccl_collectives_total",
                                 {{"mesh_dim", "dp"}, {"message_size", "2-4KiB"}});
  ASSERT_NE(dp, nullptr);
  EXPECT_EQ(dp->value, 1);
  // Barrier: zero bytes, no busbw (left out of the mean, so the gauge reads 0).
  const std::map<std::string, std::string> barrier = {
      {"collective", "Barrier"}, {"comm_name", "world"}, {"mesh_dim", "world"}};
  ASSERT_NE(find_sample(samples, "nccl_collectives_total", barrier), nullptr);
  EXPECT_EQ(find_sample(samples, "nccl_bus_bandwidth_bytes_per_second", barrier)->value, 0);
  const Sample* send = find_sample(samples, "nccl_p2p_total",
                                   {{"p2p_operation", "Send"}, {"message_size", "32-64B"}});
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->value, 1);
  EXPECT_NE(find_sample(samples, "nccl_p2p_exec_time_seconds_count", {{"p2p_operation", "Send"}}),
            nullptr);
  const std::vector<int> rank1 = {1};
  std::map<std::string, std::string> types1;
  EXPECT_NE(find_sample(parse_prometheus(
                            Exports::instance().render(ExportFormat::kPrometheus, rank1), &types1),
                        "nccl_p2p_total", {{"p2p_operation", "Recv"}, {"rank", "1"}}),
            nullptr);
}

TEST(ExportLabels, SizeBucketsAndMeshDims) {
  const std::pair<uint64_t, const char*> sizes[] = {{0, "0B"},
                                                    {1, "1-2B"},
                                                    {3, "2-4B"},
                                                    {700, "512B-1KiB"},
                                                    {1024, "1-2KiB"},
                                                    {4000, "2-4KiB"},
                                                    {3u << 20, "2-4MiB"},
                                                    {(5ull << 30) + 1, "4-8GiB"},
                                                    {~uint64_t{0}, "8-16EiB"}};
  for (const auto& [bytes, label] : sizes) EXPECT_EQ(trace::size_bucket_label(bytes), label);
  trace::CommInfo world;
  world.name = "world";
  EXPECT_EQ(trace::mesh_dim_label(world), "world");
  trace::CommInfo tp;
  tp.name = "mesh0/tp";
  tp.mesh_dim = "tp";
  EXPECT_EQ(trace::mesh_dim_label(tp), "tp");
  EXPECT_EQ(trace::nccl_op_name("all_reduce"), "AllReduce");
  EXPECT_EQ(trace::nccl_op_name("reduce_scatter"), "ReduceScatter");
  EXPECT_EQ(trace::nccl_op_name("send"), "Send");
  EXPECT_EQ(trace::escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(PrometheusLabels, OddCommunicatorNamesAreEscapedAndParseBack) {
  Exports::instance().configure(enabled());
  Exports::instance().reset();
  run_inproc(2, [](Communicator& world) {
    CommOptions options;
    options.name = "we\"ird\\name";
    options.mesh_dim = "d\nim";
    auto odd = world.split(0, world.rank(), options);
    std::vector<float> x(4);
    odd->all_reduce(view(x))->wait();
  });
  TempDir dir("meshrt-exports-odd");
  ASSERT_EQ(Exports::instance().write(ExportFormat::kPrometheus, dir.file("odd.prom")).size(), 1u);
  expect_promtool_accepts(dir.file("odd.prom"));
  std::map<std::string, std::string> types;
  const auto samples = parse_prometheus(read_file(dir.file("odd.prom")), &types);
  const Sample* s = find_sample(samples, "nccl_collectives_total",
                                {{"comm_name", "we\"ird\\name"}, {"mesh_dim", "d\nim"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, 1);
  Exports::instance().configure({});
  Exports::instance().reset();
}

TEST(ExportsRing, KeepsTheLastOpsAndCountsTheDropped) {
  Exports::instance().configure(enabled(2));
  Exports::instance().reset();
  auto world = make_inproc_world(1);
  std::vector<float> x(4);
  for (int i = 0; i < 5; ++i) world[0]->all_reduce(view(x))->wait();
  const auto lines = parse_lines(Exports::instance().render(ExportFormat::kJsonl));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["op_seq"], 4);
  EXPECT_EQ(lines[1]["op_seq"], 5);
  const json trace = json::parse(Exports::instance().render(ExportFormat::kChromeTrace));
  EXPECT_EQ(trace["otherData"]["dropped_ops"]["0"], 3);
  // Prometheus counts every op, kept or not.
  std::map<std::string, std::string> types;
  const auto samples =
      parse_prometheus(Exports::instance().render(ExportFormat::kPrometheus), &types);
  EXPECT_EQ(find_sample(samples, "nccl_collectives_total", {{"collective", "AllReduce"}})->value,
            5);
  // Disabled: nothing more is recorded.
  trace::ExportOptions off = enabled(2);
  off.enabled = false;
  Exports::instance().configure(off);
  world[0]->all_reduce(view(x))->wait();
  EXPECT_EQ(parse_lines(Exports::instance().render(ExportFormat::kJsonl))[1]["op_seq"], 5);
  Exports::instance().configure({});
  Exports::instance().reset();
}

TEST(ExportsFailures, FailedOpsAreTracedButNotInPrometheus) {
  Exports::instance().configure(enabled());
  Exports::instance().reset();
  run_inproc(2, [](Communicator& world) {
    std::vector<float> x(4);
    // Rank 1 never joins: rank 0's op times out.
    if (world.rank() == 0) {
      EXPECT_THROW(
          world.all_reduce(view(x), ReduceOp::kSum, {.timeout = std::chrono::milliseconds(50)})
              ->wait(),
          Error);
    }
  });
  const auto lines = parse_lines(Exports::instance().render(ExportFormat::kJsonl));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["state"], "failed");
  const json trace = json::parse(Exports::instance().render(ExportFormat::kChromeTrace));
  int failed = 0;
  for (const auto& e : trace["traceEvents"])
    failed += e["ph"] == "X" && e["args"]["state"] == "failed";
  EXPECT_EQ(failed, 1);
  std::map<std::string, std::string> types;
  EXPECT_TRUE(
      parse_prometheus(Exports::instance().render(ExportFormat::kPrometheus), &types).empty());
  Exports::instance().configure({});
  Exports::instance().reset();
}

// The files MESHRT_TRACE_* name, written at exit by mesh_demo (one all_reduce per dim, a barrier).
void check_env_files(const TempDir& dir, bool combined_prometheus) {
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const json trace = json::parse(read_file(dir.file("trace_" + std::to_string(r) + ".json")));
    check_trace_event_format(trace);
    std::set<std::string> tracks;
    for (const auto& e : trace["traceEvents"]) {
      EXPECT_EQ(e["pid"], r);
      if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"]);
    }
    EXPECT_EQ(tracks, (std::set<std::string>{"dp", "tp", "world"}));
    const auto lines = parse_lines(read_file(dir.file("ops_" + std::to_string(r) + ".jsonl")));
    int tp = 0;
    for (const auto& line : lines) {
      EXPECT_EQ(line["rank"], r);
      tp += line["mesh_dim"] == "tp";
    }
    EXPECT_EQ(tp, 1);
    if (!combined_prometheus) {
      const std::string path = dir.file("metrics_" + std::to_string(r) + ".prom");
      expect_promtool_accepts(path);
      std::map<std::string, std::string> types;
      const auto samples = parse_prometheus(read_file(path), &types);
      const Sample* s = find_sample(samples, "nccl_collectives_total",
                                    {{"mesh_dim", "tp"}, {"rank", std::to_string(r)}});
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->value, 1);
    }
  }
  if (combined_prometheus) {
    expect_promtool_accepts(dir.file("metrics.prom"));
    std::map<std::string, std::string> types;
    const auto samples = parse_prometheus(read_file(dir.file("metrics.prom")), &types);
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_NE(find_sample(samples, "nccl_collectives_total",
                            {{"mesh_dim", "dp"}, {"rank", std::to_string(r)}}),
                nullptr);
    }
  }
}

TEST(ExportsEnv, InProcessRanksWriteEveryFormatAtExit) {
  TempDir dir("meshrt-exports-env");
  const std::string cmd =
      "MESHRT_TRACE_CHROME='" + dir.file("trace_{rank}.json") + "' MESHRT_TRACE_JSONL='" +
      dir.file("ops_{rank}.jsonl") + "' MESHRT_TRACE_PROMETHEUS='" + dir.file("metrics.prom") +
      "' timeout 60 " + MESHRT_MESH_DEMO + " --mesh 2x2 --names dp,tp --backend inproc --world 4";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  check_env_files(dir, /*combined_prometheus=*/true);
}

TEST(ExportsEnv, GlooProcessesWriteFilesThatMergeOnOneClock) {
  TempDir dir("meshrt-exports-gloo");
  const auto results = testing::run_ranks(
      {MESHRT_MESH_DEMO, "--mesh", "2x2", "--names", "dp,tp"}, kWorld, std::chrono::seconds(60),
      {{"MESHRT_TRACE_CHROME", dir.file("trace_{rank}.json")},
       {"MESHRT_TRACE_JSONL", dir.file("ops_{rank}.jsonl")},
       {"MESHRT_TRACE_PROMETHEUS", dir.file("metrics_{rank}.prom")}});
  for (int r = 0; r < kWorld; ++r) ASSERT_EQ(results[r].exit_code, 0) << results[r].output;
  check_env_files(dir, /*combined_prometheus=*/false);

  std::vector<std::string> paths;
  for (int r = 0; r < kWorld; ++r)
    paths.push_back(dir.file("trace_" + std::to_string(r) + ".json"));
  const json merged = json::parse(trace::merge_chrome_traces(paths));
  // The command-line merge writes the same trace.
  std::string cmd = std::string(MESHRT_MESHTRACE) + " merge-chrome";
  for (const auto& p : paths) cmd += " '" + p + "'";
  cmd += " -o '" + dir.file("merged.json") + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream merged_file(dir.file("merged.json"));
  EXPECT_EQ(json::parse(merged_file), merged);
  // Four processes whose clocks were mapped separately: the same collective still overlaps.
  std::map<std::pair<int, int>, std::string> tracks;
  for (const auto& e : merged["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name")
      tracks[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  std::map<int, std::map<std::string, std::vector<json>>> events;
  for (const auto& e : merged["traceEvents"]) {
    if (e["ph"] == "X") events[e["pid"]][tracks.at({e["pid"], e["tid"]})].push_back(e);
  }
  ASSERT_EQ(events.size(), 4u);
  check_groups_overlap(events, "tp", {0, 1});
  check_groups_overlap(events, "tp", {2, 3});
  check_groups_overlap(events, "dp", {0, 2});
  check_groups_overlap(events, "world", {0, 3});
}

// Ops of one rank on one mesh dim, of one kind (NCCL's spelling), in one size bucket.
using OpGroup = std::tuple<int, std::string, std::string, std::string>;

TEST(ExportsEnv, EveryExportNamesBucketsAndDimsAlike) {
  TempDir dir("meshrt-exports-labels");
  const std::string cmd =
      "MESHRT_TRACE_CHROME='" + dir.file("trace.json") + "' MESHRT_TRACE_JSONL='" +
      dir.file("ops.jsonl") + "' MESHRT_TRACE_PROMETHEUS='" + dir.file("metrics.prom") +
      "' MESHRT_COMMS_SUMMARY='" + dir.file("comms_{rank}.json") + "' timeout 60 " +
      MESHRT_MESH_DEMO + " --mesh 2x2 --names dp,tp --backend inproc --world 4";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // Op counts per group, as each export tells them.
  std::map<OpGroup, double> chrome, jsonl, prometheus, comms;
  const json trace = json::parse(read_file(dir.file("trace.json")));
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] == "scope") continue;
    EXPECT_EQ(e["cat"], e["args"]["mesh_dim"]);
    ++chrome[{e["pid"], e["args"]["mesh_dim"], trace::nccl_op_name(e["name"].get<std::string>()),
              e["args"]["size_bucket"]}];
  }
  for (const json& line : parse_lines(read_file(dir.file("ops.jsonl")))) {
    ++jsonl[{line["rank"], line["mesh_dim"], trace::nccl_op_name(line["op"].get<std::string>()),
             line["size_bucket"]}];
  }
  std::map<std::string, std::string> types;
  for (const Sample& s : parse_prometheus(read_file(dir.file("metrics.prom")), &types)) {
    if (s.name != "nccl_collectives_total" && s.name != "nccl_p2p_total") continue;
    const std::string op =
        s.labels.count("collective") ? s.labels.at("collective") : s.labels.at("p2p_operation");
    prometheus[{std::stoi(s.labels.at("rank")), s.labels.at("mesh_dim"), op,
                s.labels.at("message_size")}] += s.value;
  }
  for (int r = 0; r < kWorld; ++r) {
    const json summary = json::parse(read_file(dir.file("comms_" + std::to_string(r) + ".json")));
    for (const json& row : summary["rows"]) {
      comms[{r, row["mesh_dim"], trace::nccl_op_name(row["op"].get<std::string>()),
             row["size_bucket"]}] += row["count"].get<double>();
    }
  }
  // Every rank: setup all_gathers and a barrier on the world, a 136 B all_reduce per dim.
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(jsonl.count({r, "world", "Barrier", "0B"}), 1u);
    EXPECT_EQ(jsonl.count({r, "tp", "AllReduce", "128-256B"}), 1u);
    EXPECT_EQ(jsonl.count({r, "dp", "AllReduce", "128-256B"}), 1u);
  }
  EXPECT_EQ(chrome, jsonl);
  EXPECT_EQ(prometheus, jsonl);
  EXPECT_EQ(comms, jsonl);
}

TEST(ExportsEnv, TrainingTraceMergesIntoAValidTraceWithScopesAboveOps) {
  TempDir dir("meshrt-exports-train");
  const auto results =
      testing::run_ranks({MESHRT_TP_MLP_TRAIN, "--mesh", "2x2"}, kWorld, std::chrono::seconds(120),
                         {{"MESHRT_TRACE_CHROME", dir.file("trace_{rank}.json")}});
  for (int r = 0; r < kWorld; ++r) ASSERT_EQ(results[r].exit_code, 0) << results[r].output;
  // As README.md tells users: merge with meshtrace, then open in Perfetto.
  std::string cmd = std::string(MESHRT_MESHTRACE) + " merge-chrome";
  for (int r = 0; r < kWorld; ++r)
    cmd += " '" + dir.file("trace_" + std::to_string(r) + ".json") + "'";
  cmd += " -o '" + dir.file("merged.json") + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const json merged = json::parse(read_file(dir.file("merged.json")));
  check_trace_event_format(merged);

  std::map<int, std::map<std::string, int>> sort_index;  // pid -> track name -> index
  std::map<std::pair<int, int>, std::string> tracks;
  for (const auto& e : merged["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      tracks[{e["pid"], e["tid"]}] = e["args"]["name"];
    }
  }
  for (const auto& e : merged["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_sort_index") {
      sort_index[e["pid"]][tracks.at({e["pid"], e["tid"]})] = e["args"]["sort_index"];
    }
  }
  const auto spans = scope_spans(merged);
  ASSERT_EQ(spans.size(), 4u);
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    // Scopes above the ops: the lowest sort index of the rank's tracks.
    const auto& mine = sort_index.at(r);
    for (const auto& [name, index] : mine) {
      if (name != "user scopes") {
        EXPECT_LT(mine.at("user scopes"), index) << name;
      }
    }
    std::map<std::string, int> names;
    uint64_t span_ops = 0;
    for (const json& s : spans.at(r)) {
      ++names[s["name"]];
      span_ops += s["args"]["ops"].get<uint64_t>();
    }
    // One span per scope per step (60 steps): the leaves of the demo's scopes.
    EXPECT_EQ(names,
              (std::map<std::string, int>{
                  {"MLP.fc1 / backward", 60}, {"MLP.fc2 / forward", 60}, {"optimizer", 60}}));
    uint64_t scoped_ops = 0;
    int setup_ops = 0;
    for (const auto& e : merged["traceEvents"]) {
      if (e["pid"] != r || e["ph"] != "X" || e["cat"] == "scope") continue;
      const bool inside = std::any_of(spans.at(r).begin(), spans.at(r).end(), [&](const json& s) {
        return s["args"]["scope"] == e["args"]["scope"] && encloses(s, e);
      });
      if (e["args"]["scope"] == "") {
        // Outside any scope: mesh creation's all_gathers, meshrt's own.
        EXPECT_EQ(e["name"], "all_gather") << e;
        EXPECT_EQ(e["args"]["setup"], true) << e;
        ++setup_ops;
      } else {
        EXPECT_TRUE(inside) << "no span of its scope encloses " << e;
        ++scoped_ops;
      }
    }
    EXPECT_EQ(setup_ops, 3);  // The mesh's agreement check and one split per dim.
    EXPECT_EQ(scoped_ops, 4u * 60);
    EXPECT_EQ(span_ops, scoped_ops);
  }
}

}  // namespace
}  // namespace meshrt
