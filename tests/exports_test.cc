// The trace exports from real ops: the Chrome trace (one process per rank, one track per mesh
// dim, slices with their args, ranks on one clock), its per-rank files merged, JSON lines parsed
// back field by field, the Prometheus text parsed back and checked against values recomputed from
// the JSON lines, the ring of kept records, and the MESHRT_TRACE_* files written at exit by
// in-process ranks and by Gloo processes.
#include "trace/exports.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "tests/process_harness.h"
#include "trace/bandwidth.h"
#include "trace/chrome_trace.h"
#include "trace/prometheus_export.h"
#include "trace/scope.h"

#ifndef MESHRT_MESH_DEMO
#error "MESHRT_MESH_DEMO must name the mesh_demo binary"
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

  // The X events of the step, by pid and track name.
  static std::map<int, std::map<std::string, std::vector<json>>> step_events(const json& trace) {
    std::map<std::pair<int, int>, std::string> tracks;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name")
        tracks[{e["pid"], e["tid"]}] = e["args"]["name"];
    }
    std::map<int, std::map<std::string, std::vector<json>>> out;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X" || e["args"]["scope"] != "step") continue;
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
    EXPECT_EQ(names_by_pid[r], r < 2 ? (std::set<std::string>{"dp", "tp", "world"})
                                     : (std::set<std::string>{"aa", "dp", "tp", "world"}));
  }
  for (const auto& [name, tids] : tids_by_name) EXPECT_EQ(tids.size(), 1u) << name;
  EXPECT_EQ(tids_by_name.size(), 4u);
  const auto events = step_events(trace);
  ASSERT_EQ(events.size(), 4u);
  for (int r = 0; r < kWorld; ++r) check_rank_events(r, events.at(r));
  check_groups_overlap(events, "tp", {0, 1});
  check_groups_overlap(events, "tp", {2, 3});
  check_groups_overlap(events, "dp", {0, 2});
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
  ASSERT_EQ(tids_by_name.size(), 4u);
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

const std::vector<std::string> kJsonlKeys = {"rank",           "comm",
                                             "comm_uid",       "store_key",
                                             "description",    "mesh_dim",
                                             "backend",        "group_size",
                                             "group_rank",     "op",
                                             "dtype",          "reduce_op",
                                             "collective_seq", "p2p_seq",
                                             "op_seq",         "is_p2p",
                                             "input_count",    "output_count",
                                             "bytes",          "root_or_peer",
                                             "timeout_ms",     "created_wall_ns",
                                             "enqueue_ns",     "start_ns",
                                             "end_ns",         "state",
                                             "duration_us",    "algbw_gbps",
                                             "busbw_gbps",     "scope",
                                             "phase",          "thread_id",
                                             "caller_file",    "caller_line"};

TEST_F(ExportsTest, JsonlHasOneLinePerOpWithEveryField) {
  TempDir dir("meshrt-exports-jsonl");
  ASSERT_EQ(Exports::instance().write(ExportFormat::kJsonl, dir.file("ops.jsonl")).size(), 1u);
  std::map<int, std::vector<json>> step;
  std::stringstream in(read_file(dir.file("ops.jsonl")));
  for (std::string text; std::getline(in, text);) {
    const nlohmann::ordered_json line = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (auto it = line.begin(); it != line.end(); ++it) keys.push_back(it.key());
    ASSERT_EQ(keys, kJsonlKeys) << text;
    if (line["scope"] == "step") step[line["rank"]].push_back(json::parse(text));
  }
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
    EXPECT_EQ(ar["state"], "completed");
    EXPECT_EQ(ar["phase"], "forward");
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
    EXPECT_EQ(ops[5]["op"], "barrier");
    EXPECT_TRUE(ops[5]["mesh_dim"].is_null());
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

// Parses the exposition format strictly: each family's HELP, then TYPE, then its samples, and
// families never interleave.
std::vector<Sample> parse_prometheus(const std::string& text,
                                     std::map<std::string, std::string>* types) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (gauge|counter))");
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
      EXPECT_EQ(m[1], family) << "sample outside its family: " << line;
      EXPECT_TRUE(types->count(m[1])) << "sample before its TYPE: " << line;
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

TEST_F(ExportsTest, PrometheusTextUsesInspectorNamesAndParsesBack) {
  const std::vector<int> rank0 = {0};
  std::map<std::string, std::string> types;
  const auto samples =
      parse_prometheus(Exports::instance().render(ExportFormat::kPrometheus, rank0), &types);
  EXPECT_EQ(types,
            (std::map<std::string, std::string>{{"nccl_bus_bandwidth_gbs", "gauge"},
                                                {"nccl_collective_exec_time_microseconds", "gauge"},
                                                {"nccl_collectives_total", "counter"},
                                                {"nccl_p2p_bus_bandwidth_gbs", "gauge"},
                                                {"nccl_p2p_exec_time_microseconds", "gauge"},
                                                {"nccl_p2p_total", "counter"}}));
  for (const Sample& s : samples) {
    const bool p2p = s.name.starts_with("nccl_p2p");
    std::set<std::string> keys;
    for (const auto& [k, v] : s.labels) keys.insert(k);
    std::set<std::string> want = {"version", "slurm_job_id", "node",         "gpu",  "comm_name",
                                  "n_nodes", "nranks",       "message_size", "rank", "mesh_dim"};
    want.insert(p2p ? "p2p_operation" : "collective");
    if (!p2p) want.insert("algo_proto");
    EXPECT_EQ(keys, want) << s.name;
    EXPECT_EQ(s.labels.at("rank"), "0");
  }
  const std::map<std::string, std::string> tp_small = {
      {"comm_name", "mesh0/tp"},  {"mesh_dim", "tp"}, {"collective", "AllReduce"},
      {"message_size", "64-65B"}, {"nranks", "2"},    {"n_nodes", "1"},
      {"algo_proto", "inproc"}};
  const Sample* count = find_sample(samples, "nccl_collectives_total", tp_small);
  ASSERT_NE(count, nullptr);
  EXPECT_EQ(count->value, 3);
  // Inspector's values from the same ops' JSON lines: mean time, geometric mean of busbw.
  double sum_us = 0, log_busbw = 0;
  int n = 0;
  for (const auto& line : parse_lines(Exports::instance().render(ExportFormat::kJsonl, rank0))) {
    if (line["mesh_dim"] != "tp" || line["op"] != "all_reduce") continue;
    sum_us += line["duration_us"].get<double>();
    log_busbw += std::log(line["busbw_gbps"].get<double>());
    ++n;
  }
  ASSERT_EQ(n, 3);
  const Sample* time = find_sample(samples, "nccl_collective_exec_time_microseconds", tp_small);
  ASSERT_NE(time, nullptr);
  EXPECT_NEAR(time->value, sum_us / n, 1e-9 * sum_us);
  const Sample* busbw = find_sample(samples, "nccl_bus_bandwidth_gbs", tp_small);
  ASSERT_NE(busbw, nullptr);
  EXPECT_NEAR(busbw->value, std::exp(log_busbw / n), 1e-9 * busbw->value);
  EXPECT_GT(busbw->value, 0.0);

  const Sample* gather = find_sample(samples, "nccl_collectives_total",
                                     {{"collective", "AllGather"}, {"message_size", "7-8KB"}});
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->value, 1);
  const Sample* dp = find_sample(samples, "nccl_collectives_total",
                                 {{"mesh_dim", "dp"}, {"message_size", "3-4KB"}});
  ASSERT_NE(dp, nullptr);
  EXPECT_EQ(dp->value, 1);
  // Barrier: zero bytes, no busbw (left out of the mean, so the gauge reads 0).
  const std::map<std::string, std::string> barrier = {
      {"collective", "Barrier"}, {"comm_name", "world"}, {"mesh_dim", ""}};
  ASSERT_NE(find_sample(samples, "nccl_collectives_total", barrier), nullptr);
  EXPECT_EQ(find_sample(samples, "nccl_bus_bandwidth_gbs", barrier)->value, 0);
  const Sample* send = find_sample(samples, "nccl_p2p_total",
                                   {{"p2p_operation", "Send"}, {"message_size", "32-33B"}});
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->value, 1);
  EXPECT_NE(find_sample(samples, "nccl_p2p_exec_time_microseconds", {{"p2p_operation", "Send"}}),
            nullptr);
  const std::vector<int> rank1 = {1};
  std::map<std::string, std::string> types1;
  EXPECT_NE(find_sample(parse_prometheus(
                            Exports::instance().render(ExportFormat::kPrometheus, rank1), &types1),
                        "nccl_p2p_total", {{"p2p_operation", "Recv"}, {"rank", "1"}}),
            nullptr);
}

TEST(PrometheusLabels, InspectorSizeRangesNamesAndEscapes) {
  const std::pair<uint64_t, const char*> sizes[] = {
      {0, "0B"},       {1, "1-2B"},         {1023, "1023-1024B"},       {1024, "1-2KB"},
      {4000, "3-4KB"}, {8u << 20, "8-9MB"}, {(5ull << 30) + 1, "5-6GB"}};
  for (const auto& [bytes, label] : sizes) EXPECT_EQ(trace::message_size_range(bytes), label);
  EXPECT_EQ(trace::message_size_range_bytes(4000), 3072u);
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
  std::map<std::string, std::string> types;
  const auto samples =
      parse_prometheus(Exports::instance().render(ExportFormat::kPrometheus), &types);
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
      std::map<std::string, std::string> types;
      const auto samples =
          parse_prometheus(read_file(dir.file("metrics_" + std::to_string(r) + ".prom")), &types);
      const Sample* s = find_sample(samples, "nccl_collectives_total",
                                    {{"mesh_dim", "tp"}, {"rank", std::to_string(r)}});
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->value, 1);
    }
  }
  if (combined_prometheus) {
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

}  // namespace
}  // namespace meshrt
