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
#include <unordered_map>

#include "trace/bandwidth.h"
#include "trace/labels.h"

namespace meshrt::trace {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kNsPerSecond = 1'000'000'000;

constexpr std::string_view kScopeTrack = "user scopes";

// The scope track of the `index`-th thread (by first op) of a rank that issued ops in scopes.
std::string scope_track_name(size_t index) {
  return index == 0 ? std::string(kScopeTrack) : fmt::format("{} {}", kScopeTrack, index + 1);
}

bool is_scope_track(std::string_view name) { return name.starts_with(kScopeTrack); }

// Thread ids for track names, the same in every process: scope tracks first (so that Perfetto
// draws scopes above the ops they enclose), then the others by name.
template <typename Id>
std::map<std::string, Id> number_tracks(const std::set<std::string>& names) {
  std::vector<std::string> order(names.begin(), names.end());
  std::stable_partition(order.begin(), order.end(),
                        [](const std::string& n) { return is_scope_track(n); });
  std::map<std::string, Id> tids;
  for (const std::string& name : order) tids.emplace(name, static_cast<Id>(tids.size()) + 1);
  return tids;
}

// An op that failed before it started spans from its enqueue.
int64_t start_of(const OpRecord& r) { return r.start_ns > 0 ? r.start_ns : r.enqueue_ns; }

// Metadata carries ts 0: some trace-event readers expect ts on every event.
Json metadata(std::string_view name, int pid, int tid, Json args) {
  return {{"name", name}, {"ph", "M"},  {"ts", 0},
          {"pid", pid},   {"tid", tid}, {"args", std::move(args)}};
}

// A scope's span on a rank's scope track: from the first of its ops' enqueues to the last end.
struct ScopeSpan {
  const ScopeNode* node;
  int64_t begin_ns;
  int64_t end_ns;
  uint64_t ops = 0;  // Issued in the scope or in scopes nested in it.
};

// The name a span shows: the scope's name, with its phase when the scope set one ("MLP.fc2 /
// forward"), not when it inherited it.
std::string span_name(const ScopeNode& node) {
  const std::string_view phase = phase_name(node.phase);
  if (node.parent == nullptr || node.phase == node.parent->phase || phase == node.name) {
    return node.name;
  }
  return fmt::format("{} / {}", node.name, phase);
}

// The spans of the scopes one thread's ops were issued in (`ops` in enqueue order): consecutive
// ops in the same scope make one span, nested in their enclosing scopes' spans. A span ends at its
// last op's end, or where the thread entered another scope if that came first (an op left
// running in the background), so spans on one track always nest.
std::vector<ScopeSpan> scope_spans(std::span<const OpRecord* const> ops) {
  std::vector<ScopeSpan> done, open;
  const auto close_to = [&](size_t depth, int64_t limit_ns) {
    for (; open.size() > depth; open.pop_back()) {
      done.push_back(open.back());
      done.back().end_ns = std::min(done.back().end_ns, limit_ns);
    }
  };
  std::vector<const ScopeNode*> chain;  // The op's scopes, outermost first.
  for (const OpRecord* r : ops) {
    chain.clear();
    for (const ScopeNode* n = r->scope; n != nullptr && n->depth > 0; n = n->parent) {
      chain.push_back(n);
    }
    std::reverse(chain.begin(), chain.end());
    size_t same = 0;
    while (same < open.size() && same < chain.size() && open[same].node == chain[same]) ++same;
    close_to(same, r->enqueue_ns);
    for (size_t i = same; i < chain.size(); ++i) {
      open.push_back({chain[i], r->enqueue_ns, r->end_ns});
    }
    for (ScopeSpan& s : open) {
      s.end_ns = std::max(s.end_ns, r->end_ns);
      ++s.ops;
    }
  }
  close_to(0, std::numeric_limits<int64_t>::max());
  // Enclosing spans first where spans start together, for readers that nest in file order.
  std::sort(done.begin(), done.end(), [](const ScopeSpan& a, const ScopeSpan& b) {
    return std::tie(a.begin_ns, a.node->depth) < std::tie(b.begin_ns, b.node->depth);
  });
  return done;
}

// The scope spans of one rank, per track name: one scope track per thread that issued ops.
std::map<std::string, std::vector<ScopeSpan>> rank_scope_spans(const RankOps& rank) {
  std::vector<uint64_t> threads;  // By first op.
  std::unordered_map<uint64_t, std::vector<const OpRecord*>> ops;
  for (const OpRecord& r : rank.ops) {
    auto& mine = ops[r.thread_id];
    if (mine.empty()) threads.push_back(r.thread_id);
    mine.push_back(&r);
  }
  std::map<std::string, std::vector<ScopeSpan>> out;
  for (uint64_t thread : threads) {
    auto& mine = ops[thread];
    // Kept records are in completion order; scopes follow the order the thread issued ops in.
    std::sort(mine.begin(), mine.end(), [](const OpRecord* a, const OpRecord* b) {
      return std::tie(a->enqueue_ns, a->record_id) < std::tie(b->enqueue_ns, b->record_id);
    });
    std::vector<ScopeSpan> spans = scope_spans(mine);
    if (!spans.empty()) out.emplace(scope_track_name(out.size()), std::move(spans));
  }
  return out;
}

Json span_event(const ScopeSpan& s, int pid, int tid, int64_t wall_minus_steady_ns,
                int64_t origin_ns) {
  Json event = {{"name", span_name(*s.node)}, {"cat", "scope"}, {"ph", "X"}};
  event["pid"] = pid;
  event["tid"] = tid;
  event["ts"] = (s.begin_ns + wall_minus_steady_ns - origin_ns) / 1e3;
  event["dur"] = (s.end_ns - s.begin_ns) / 1e3;
  event["args"] = {{"scope", s.node->path}, {"phase", phase_name(s.node->phase)}, {"ops", s.ops}};
  return event;
}

Json complete_event(const OpRecord& r, int tid, int64_t start_wall_ns, int64_t origin_ns) {
  const CommInfo& c = *r.comm;
  const int n = static_cast<int>(c.global_ranks.size());
  const int64_t dur_ns = std::max<int64_t>(0, r.end_ns - start_of(r));
  const double us = r.state == OpState::kCompleted ? dur_ns / 1e3 : 0.0;
  const ScopeNode* scope = r.scope ? r.scope : root_scope();
  Json args = {{"comm", c.name},
               {"mesh_dim", mesh_dim_label(c)},
               {"seq", r.is_p2p ? r.p2p_seq : r.collective_seq},
               {"op_seq", r.op_seq},
               {"bytes", r.bytes},
               {"size_bucket", size_bucket_label(r.bytes)},
               {"dtype", r.dtype},
               {"reduce_op", r.reduce_op},
               {"algorithm", r.algorithm},
               {"root_or_peer", r.root_or_peer},
               {"group_size", n},
               {"scope", scope->path},
               {"phase", phase_name(scope->phase)},
               {"setup", r.setup},
               {"state", op_state_name(r.state)},
               {"queued_us", r.start_ns > 0 ? (r.start_ns - r.enqueue_ns) / 1e3 : 0.0},
               {"algbw_gbps", algbw_gbps(r.bytes, us)},
               {"busbw_gbps", busbw_gbps(r.kind, n, r.bytes, us)},
               {"caller", fmt::format("{}:{}", r.caller_file, r.caller_line)}};
  Json event = {{"name", r.op}, {"cat", mesh_dim_label(c)}, {"ph", "X"}};
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
  std::vector<std::map<std::string, std::vector<ScopeSpan>>> spans;
  int64_t first_ns = std::numeric_limits<int64_t>::max();
  for (const RankOps& rank : ranks) {
    for (const OpRecord& r : rank.ops) {
      names.insert(mesh_dim_label(*r.comm));
      // Scope spans start at an enqueue, ops at their start: the enqueue is the earlier.
      first_ns = std::min(first_ns, r.enqueue_ns + wall_minus_steady_ns);
    }
    spans.push_back(rank_scope_spans(rank));
    for (const auto& [name, list] : spans.back()) names.insert(name);
  }
  const std::map<std::string, int> tids = number_tracks<int>(names);
  const int64_t origin_ns =
      first_ns == std::numeric_limits<int64_t>::max() ? 0 : first_ns - first_ns % kNsPerSecond;

  Json events = Json::array();
  Json dropped = Json::object();
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankOps& rank = ranks[i];
    const int pid = rank.global_rank;
    events.push_back(metadata("process_name", pid, 0, {{"name", fmt::format("rank {}", pid)}}));
    events.push_back(metadata("process_sort_index", pid, 0, {{"sort_index", pid}}));
    std::set<std::string> used;
    for (const OpRecord& r : rank.ops) used.insert(mesh_dim_label(*r.comm));
    for (const auto& [name, list] : spans[i]) used.insert(name);
    for (const std::string& name : used) {
      const int tid = tids.at(name);
      events.push_back(metadata("thread_name", pid, tid, {{"name", name}}));
      events.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", tid}}));
    }
    for (const auto& [name, list] : spans[i]) {
      for (const ScopeSpan& s : list) {
        events.push_back(span_event(s, pid, tids.at(name), wall_minus_steady_ns, origin_ns));
      }
    }
    for (const OpRecord& r : rank.ops) {
      events.push_back(complete_event(r, tids.at(mesh_dim_label(*r.comm)),
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
  const std::map<std::string, int64_t> tids = number_tracks<int64_t>(names);

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
      // Older files' metadata has no ts; readers may want it on every event.
      if (e.value("ph", "") == "M" && !e.contains("ts")) e["ts"] = 0;
      events.push_back(std::move(e));
    }
  }
  return trace_document(std::move(events), origin_ns, std::move(dropped));
}

}  // namespace meshrt::trace
