#include "trace/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "trace/bandwidth.h"

namespace meshrt::trace {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kNsPerSecond = 1'000'000'000;

const std::string& track_of(const CommInfo& c) { return c.mesh_dim.empty() ? c.name : c.mesh_dim; }

// An op that failed before it started spans from its enqueue.
int64_t start_of(const OpRecord& r) { return r.start_ns > 0 ? r.start_ns : r.enqueue_ns; }

Json metadata(std::string_view name, int pid, int tid, Json args) {
  return {{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

Json complete_event(const OpRecord& r, int tid, int64_t start_wall_ns, int64_t origin_ns) {
  const CommInfo& c = *r.comm;
  const int n = static_cast<int>(c.global_ranks.size());
  const int64_t dur_ns = std::max<int64_t>(0, r.end_ns - start_of(r));
  const double us = r.state == OpState::kCompleted ? dur_ns / 1e3 : 0.0;
  const ScopeNode* scope = r.scope ? r.scope : root_scope();
  Json args = {{"comm", c.name},
               {"mesh_dim", c.mesh_dim},
               {"seq", r.is_p2p ? r.p2p_seq : r.collective_seq},
               {"op_seq", r.op_seq},
               {"bytes", r.bytes},
               {"dtype", r.dtype},
               {"reduce_op", r.reduce_op},
               {"root_or_peer", r.root_or_peer},
               {"group_size", n},
               {"scope", scope->path},
               {"phase", phase_name(scope->phase)},
               {"state", op_state_name(r.state)},
               {"queued_us", r.start_ns > 0 ? (r.start_ns - r.enqueue_ns) / 1e3 : 0.0},
               {"algbw_gbps", algbw_gbps(r.bytes, us)},
               {"busbw_gbps", busbw_gbps(r.kind, n, r.bytes, us)},
               {"caller", fmt::format("{}:{}", r.caller_file, r.caller_line)}};
  Json event = {{"name", r.op}, {"cat", track_of(c)}, {"ph", "X"}};
  event["pid"] = c.global_rank;
  event["tid"] = tid;
  event["ts"] = (start_wall_ns - origin_ns) / 1e3;
  event["dur"] = dur_ns / 1e3;
  event["args"] = std::move(args);
  return event;
}

std::string dump(const Json& doc) {
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("merge_chrome_traces: cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  Json doc = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_array()) doc = Json{{"traceEvents", std::move(doc)}};  // The bare-array form.
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    throw std::runtime_error("merge_chrome_traces: " + path + " is not a Chrome trace JSON file");
  }
  return doc;
}

bool has_int(const Json& e, const char* key) {
  return e.contains(key) && e[key].is_number_integer();
}

// An event on a thread (track), as opposed to process metadata such as process_name.
bool on_track(const Json& e) {
  return has_int(e, "pid") && has_int(e, "tid") &&
         !(e.value("ph", "") == "M" && e.value("name", "").starts_with("process_"));
}

// The file's top level: its events, and the clock origin and drop counts a merge needs.
std::string trace_document(Json events, int64_t origin_ns, Json dropped) {
  const Json doc = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"producer", "meshrt"}, {"origin_wall_ns", origin_ns}, {"dropped_ops", dropped}}}};
  return dump(doc);
}

}  // namespace

std::string chrome_trace(std::span<const RankOps> ranks, int64_t wall_minus_steady_ns) {
  std::set<std::string> names;
  int64_t first_ns = std::numeric_limits<int64_t>::max();
  for (const RankOps& rank : ranks) {
    for (const OpRecord& r : rank.ops) {
      names.insert(track_of(*r.comm));
      first_ns = std::min(first_ns, start_of(r) + wall_minus_steady_ns);
    }
  }
  std::map<std::string, int> tids;
  for (const std::string& name : names) tids.emplace(name, static_cast<int>(tids.size()) + 1);
  const int64_t origin_ns =
      first_ns == std::numeric_limits<int64_t>::max() ? 0 : first_ns - first_ns % kNsPerSecond;

  Json events = Json::array();
  Json dropped = Json::object();
  for (const RankOps& rank : ranks) {
    const int pid = rank.global_rank;
    events.push_back(metadata("process_name", pid, 0, {{"name", fmt::format("rank {}", pid)}}));
    events.push_back(metadata("process_sort_index", pid, 0, {{"sort_index", pid}}));
    std::set<std::string> used;
    for (const OpRecord& r : rank.ops) used.insert(track_of(*r.comm));
    for (const std::string& name : used) {
      const int tid = tids.at(name);
      events.push_back(metadata("thread_name", pid, tid, {{"name", name}}));
      events.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", tid}}));
    }
    for (const OpRecord& r : rank.ops) {
      events.push_back(complete_event(r, tids.at(track_of(*r.comm)),
                                      start_of(r) + wall_minus_steady_ns, origin_ns));
    }
    if (rank.dropped > 0) dropped[std::to_string(pid)] = rank.dropped;
  }
  return trace_document(std::move(events), origin_ns, std::move(dropped));
}

std::string merge_chrome_traces(std::span<const std::string> paths) {
  std::vector<Json> docs;
  int64_t origin_ns = std::numeric_limits<int64_t>::max();
  for (const std::string& path : paths) {
    docs.push_back(read_trace(path));
    const Json& other = docs.back().value("otherData", Json::object());
    origin_ns = std::min(origin_ns, other.value("origin_wall_ns", int64_t{0}));
  }
  if (docs.empty()) origin_ns = 0;

  // Who owns each process, and the name of every (file, pid, tid) track.
  std::map<int64_t, size_t> owner;
  std::map<std::tuple<size_t, int64_t, int64_t>, std::string> track_names;
  std::set<std::string> names;
  for (size_t f = 0; f < docs.size(); ++f) {
    for (const Json& e : docs[f]["traceEvents"]) {
      if (!has_int(e, "pid")) continue;
      const int64_t pid = e["pid"].get<int64_t>();
      if (const auto [it, fresh] = owner.emplace(pid, f); !fresh && it->second != f) {
        throw std::runtime_error(fmt::format("merge_chrome_traces: rank {} is in both {} and {}",
                                             pid, paths[it->second], paths[f]));
      }
      if (!on_track(e)) continue;
      const auto key = std::make_tuple(f, pid, e["tid"].get<int64_t>());
      if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
        track_names[key] = e["args"].value("name", "");
      } else {
        track_names.try_emplace(key, fmt::format("tid {}", std::get<2>(key)));
      }
    }
  }
  for (const auto& [key, name] : track_names) names.insert(name);
  std::map<std::string, int64_t> tids;
  for (const std::string& name : names) tids.emplace(name, static_cast<int64_t>(tids.size()) + 1);

  Json events = Json::array();
  Json dropped = Json::object();
  for (size_t f = 0; f < docs.size(); ++f) {
    const Json& other = docs[f].value("otherData", Json::object());
    const double shift_us = (other.value("origin_wall_ns", int64_t{0}) - origin_ns) / 1e3;
    const Json file_dropped = other.value("dropped_ops", Json::object());
    for (const auto& [rank, count] : file_dropped.items()) dropped[rank] = count;
    for (Json e : docs[f]["traceEvents"]) {
      if (on_track(e)) {
        const int64_t tid =
            tids.at(track_names.at({f, e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}));
        e["tid"] = tid;
        if (e.value("name", "") == "thread_sort_index") e["args"]["sort_index"] = tid;
      }
      if (e.value("ph", "") != "M" && e.contains("ts") && e["ts"].is_number()) {
        e["ts"] = e["ts"].get<double>() + shift_us;
      }
      events.push_back(std::move(e));
    }
  }
  return trace_document(std::move(events), origin_ns, std::move(dropped));
}

}  // namespace meshrt::trace
