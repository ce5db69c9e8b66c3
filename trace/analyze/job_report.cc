#include "trace/analyze/job_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_reader.h"
#include "trace/analyze/format.h"
#include "trace/analyze/job_report_html.h"
#include "trace/atomic_file.h"
#include "trace/op_kind.h"

namespace meshrt::trace {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// Flight-recorder entries shown: around the culprit's op, and the last ones of waiting ranks.
constexpr ptrdiff_t kEntriesBefore = 5;
constexpr ptrdiff_t kEntriesAfter = 3;
constexpr size_t kWaitingEntries = 5;
constexpr size_t kMaxCulprits = 2;
constexpr size_t kMaxWaiting = 3;

// Content that is valid JSON but not the document its writer writes.
class BadContent : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is for people.
std::string plain(std::string_view what) {
  if (what.starts_with("[json.exception.")) {
    const size_t end = what.find("] ");
    if (end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  return std::string(what);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read it", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses `path` and hands the document to `use`; a syntax error, or content other than `what`
// (a missing key, a wrong type), becomes an InputError naming the file.
template <typename Use>
void with_json(const fs::path& path, std::string_view what, Use&& use) {
  Json doc;
  try {
    doc = Json::parse(read_text(path));
  } catch (const Json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), plain(e.what())));
  }
  try {
    use(doc);
  } catch (const Json::exception& e) {
    throw InputError(fmt::format("{}: not {}: {}", path.string(), what, plain(e.what())));
  } catch (const BadContent& e) {
    throw InputError(fmt::format("{}: not {}: {}", path.string(), what, e.what()));
  }
}

// j[key], which must be an array.
const Json& array_at(const Json& j, const char* key) {
  const Json& a = j.at(key);
  if (!a.is_array()) throw BadContent(fmt::format("\"{}\" is not an array", key));
  return a;
}

// j[key], which must be an object.
const Json& object_at(const Json& j, const char* key) {
  const Json& o = j.at(key);
  if (!o.is_object()) throw BadContent(fmt::format("\"{}\" is not an object", key));
  return o;
}

// The files of `dir` named <stem><rank>.json, by the rank in the name.
std::map<int, fs::path> per_rank_files(const fs::path& dir, std::string_view stem) {
  std::map<int, fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(stem) || !name.ends_with(".json")) continue;
    const std::string digits = name.substr(stem.size(), name.size() - stem.size() - 5);
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    if (it->is_regular_file(ec)) out[std::stoi(digits)] = it->path();
  }
  return out;
}

// "rank 3" or "ranks 0-2, 5", for the notes on missing files.
std::string ranks_phrase(const std::set<int>& ranks) {
  std::string list;
  for (auto it = ranks.begin(); it != ranks.end();) {
    auto last = it;
    while (std::next(last) != ranks.end() && *std::next(last) == *last + 1) ++last;
    if (!list.empty()) list += ", ";
    list += *last - *it >= 2
                ? fmt::format("{}-{}", *it, *last)
                : (*last == *it ? std::to_string(*it) : fmt::format("{}, {}", *it, *last));
    it = std::next(last);
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + list;
}

// The mesh dims (and communicators outside a mesh) that the inputs mention: every chart uses
// their order, and a dim keeps its colour from section to section.
class Dims {
 public:
  void add(const std::string& name) { dims_.try_emplace(name); }
  // From a comm logger row: whether it is a mesh dim is known there, and its group size.
  void add(const std::string& name, bool in_mesh, int group_size) {
    Dim& d = dims_[name];
    d.outside_mesh = d.outside_mesh || !in_mesh;
    if (group_size > 0) d.group_sizes.insert(group_size);
  }
  // Mesh dims by name, then communicators outside any mesh ("world") by name.
  std::vector<std::string> order() const {
    std::vector<std::string> out;
    for (bool outside : {false, true}) {
      for (const auto& [name, d] : dims_) {
        if (d.outside_mesh == outside) out.push_back(name);
      }
    }
    return out;
  }
  size_t index(const std::string& name) const {
    const auto o = order();
    return static_cast<size_t>(std::find(o.begin(), o.end(), name) - o.begin());
  }
  Json json() const {
    Json out = Json::array();
    for (const std::string& name : order()) {
      const Dim& d = dims_.at(name);
      out.push_back({{"name", name}, {"in_mesh", !d.outside_mesh}, {"group_sizes", d.group_sizes}});
    }
    return out;
  }

 private:
  struct Dim {
    bool outside_mesh = false;
    std::set<int> group_sizes;
  };
  std::map<std::string, Dim> dims_;
};

// One row of a rank's comm logger summary.
struct CommRow {
  int rank = -1;
  std::string dim;  // The mesh dim, or the communicator outside a mesh.
  std::string op;
  int group_size = 0;
  uint64_t bucket_bytes = 0;  // Groups rows into points.
  double mean_bytes = 0;      // What the ops moved: the sizes the report shows.
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;
  uint64_t count = 0;
  double total_ms = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};

// The rows of every summary; `ranks` gets the rank each file names.
std::vector<CommRow> read_comms(const std::map<int, fs::path>& files, Dims& dims,
                                std::set<int>& ranks) {
  std::vector<CommRow> rows;
  for (const auto& [file_rank, path] : files) {
    with_json(path, "a comm logger summary (MESHRT_COMMS_SUMMARY)", [&](const Json& doc) {
      const int rank = doc.at("rank").get<int>();
      ranks.insert(rank);
      for (const Json& r : array_at(doc, "rows")) {
        CommRow row;
        row.rank = rank;
        // Outside a mesh the dim label is the communicator's own name ("world").
        row.dim = r.at("mesh_dim").get<std::string>();
        const bool in_mesh = row.dim != r.at("comm").get<std::string>();
        row.op = r.at("op").get<std::string>();
        row.group_size = r.at("group_size").get<int>();
        row.bucket_bytes = r.at("bucket_bytes").get<uint64_t>();
        // Summaries written before the real sizes were kept show the bucket's floor.
        row.mean_bytes = r.value("mean_bytes", static_cast<double>(row.bucket_bytes));
        row.min_bytes = r.value("min_bytes", row.bucket_bytes);
        row.max_bytes = r.value("max_bytes", row.bucket_bytes);
        row.count = r.at("count").get<uint64_t>();
        row.total_ms = r.at("total_ms").get<double>();
        row.algbw_gbps = r.at("algbw_gbps").get<double>();
        row.busbw_gbps = r.at("busbw_gbps").get<double>();
        dims.add(row.dim, in_mesh, row.group_size);
        rows.push_back(std::move(row));
      }
    });
  }
  return rows;
}

// The comms section: busbw series per (dim, op) and time per rank and dim.
Json comms_json(const std::vector<CommRow>& rows, const std::set<int>& ranks, const Dims& dims) {
  struct Point {
    uint64_t count = 0;
    double total_ms = 0;
    double algbw_ms = 0;  // Bandwidths weighted by time, divided by total_ms at the end.
    double busbw_ms = 0;
    double busbw_sum = 0;  // For points whose time is 0.
    double bytes_sum = 0;  // Of every op, for the mean size.
    uint64_t min_bytes = UINT64_MAX;
    uint64_t max_bytes = 0;
    Json ranks = Json::array();
  };
  struct Series {
    std::set<int> group_sizes;
    std::map<uint64_t, Point> points;
  };
  std::map<std::pair<size_t, std::string>, std::pair<std::string, Series>> series;
  std::map<int, std::map<std::string, double>> time;
  for (const CommRow& r : rows) {
    auto& [dim, s] = series[{dims.index(r.dim), r.op}];
    dim = r.dim;
    s.group_sizes.insert(r.group_size);
    Point& p = s.points[r.bucket_bytes];
    p.count += r.count;
    p.bytes_sum += r.mean_bytes * static_cast<double>(r.count);
    p.min_bytes = std::min(p.min_bytes, r.min_bytes);
    p.max_bytes = std::max(p.max_bytes, r.max_bytes);
    p.total_ms += r.total_ms;
    p.algbw_ms += r.algbw_gbps * r.total_ms;
    p.busbw_ms += r.busbw_gbps * r.total_ms;
    p.busbw_sum += r.busbw_gbps;
    p.ranks.push_back({{"rank", r.rank},
                       {"count", r.count},
                       {"avg_ms", r.count ? r.total_ms / r.count : 0},
                       {"busbw_gbps", r.busbw_gbps}});
    time[r.rank][r.dim] += r.total_ms;
  }
  Json series_json = Json::array();
  for (const auto& [key, value] : series) {
    const auto& [dim, s] = value;
    Json points = Json::array();
    for (const auto& [bucket, p] : s.points) {
      const double n = static_cast<double>(p.ranks.size());
      points.push_back({{"bytes", p.count ? p.bytes_sum / static_cast<double>(p.count) : 0.0},
                        {"min_bytes", p.min_bytes},
                        {"max_bytes", p.max_bytes},
                        {"bucket_bytes", bucket},
                        {"count", p.count},
                        {"total_ms", p.total_ms},
                        {"avg_ms", p.count ? p.total_ms / p.count : 0},
                        {"algbw_gbps", p.total_ms > 0 ? p.algbw_ms / p.total_ms : 0},
                        {"busbw_gbps", p.total_ms > 0 ? p.busbw_ms / p.total_ms : p.busbw_sum / n},
                        {"ranks", p.ranks}});
    }
    series_json.push_back(
        {{"dim", dim}, {"op", key.second}, {"group_sizes", s.group_sizes}, {"points", points}});
  }
  Json time_json = Json::array();
  for (const auto& [rank, by_dim] : time) {
    Json d = Json::object();
    double total = 0;
    for (const std::string& dim : dims.order()) {
      if (const auto it = by_dim.find(dim); it != by_dim.end()) {
        d[dim] = it->second;
        total += it->second;
      }
    }
    time_json.push_back({{"rank", rank}, {"total_ms", total}, {"dims", d}});
  }
  return {{"ranks", ranks}, {"series", series_json}, {"time", time_json}};
}

Json read_stragglers(const fs::path& path, Dims& dims, std::set<int>& ranks) {
  Json out;
  with_json(path, "a straggler report (MESHRT_STRAGGLER_REPORT)", [&](const Json& doc) {
    Json dim_stats = Json::array();
    std::vector<std::string> dim_names;
    std::map<int, std::map<std::string, std::pair<double, uint64_t>>> late;  // rank, dim
    for (const Json& d : array_at(doc, "dims")) {
      const std::string dim = d.at("dim").get<std::string>();
      dims.add(dim);
      dim_names.push_back(dim);
      const Json& skew = object_at(d, "skew_ms");
      dim_stats.push_back({{"dim", dim},
                           {"ops", d.at("ops").get<uint64_t>()},
                           {"skew_ms",
                            {{"min", skew.at("min").get<double>()},
                             {"mean", skew.at("mean").get<double>()},
                             {"p50", skew.at("p50").get<double>()},
                             {"max", skew.at("max").get<double>()}}},
                           {"max_skew", d.at("max_skew")},
                           {"most_often_last", d.at("most_often_last")}});
      for (const Json& t : array_at(d, "top_late")) {
        late[t.at("rank").get<int>()][dim] = {t.at("lateness_ms").get<double>(),
                                              t.at("times_last").get<uint64_t>()};
      }
    }
    std::map<int, Json> rank_rows;
    for (const Json& r : array_at(doc, "ranks")) {
      rank_rows[r.at("rank").get<int>()] = {
          {"total_lateness_ms", r.at("lateness_ms").get<double>()},
          {"wait_ms", r.at("wait_ms").get<double>()},
          {"times_last_total", r.at("times_last").get<uint64_t>()},
          {"ops", r.value("ops", uint64_t{0})}};
    }
    for (const auto& [rank, by_dim] : late) rank_rows.try_emplace(rank, Json::object());
    Json heat = Json::array();
    for (auto& [rank, totals] : rank_rows) {
      ranks.insert(rank);
      Json lateness = Json::object(), times = Json::object();
      const auto& listed = late[rank];
      for (const std::string& dim : dim_names) {
        const auto cell = listed.find(dim);
        lateness[dim] = cell == listed.end() ? Json(nullptr) : Json(cell->second.first);
        times[dim] = cell == listed.end() ? Json(nullptr) : Json(cell->second.second);
      }
      Json row = {{"rank", rank}, {"lateness_ms", lateness}, {"times_last", times}};
      for (const char* key : {"total_lateness_ms", "wait_ms", "times_last_total", "ops"}) {
        row[key] = totals.value(key, Json(nullptr));
      }
      heat.push_back(std::move(row));
    }
    for (const Json& r : array_at(doc, "missing_ranks")) ranks.insert(r.get<int>());
    out = {{"matched_ops", doc.at("matched_ops").get<uint64_t>()},
           {"incomplete_ops", doc.at("incomplete_ops").get<uint64_t>()},
           {"mismatched_ops", doc.at("mismatched_ops").get<uint64_t>()},
           {"missing_ranks", doc.at("missing_ranks")},
           {"clock", doc.at("clock").get<std::string>()},
           {"dims", dim_stats},
           {"ranks", heat}};
  });
  return out;
}

// Appends `node` and its descendants to `rows` in tree order; returns the node's per-dim sums,
// descendants included (the file's "dims" are the scope's own).
std::map<std::string, std::array<double, 3>> flatten_scope(const Json& node, int depth, Json& rows,
                                                           Dims& dims) {
  const size_t at = rows.size();
  rows.push_back({{"depth", depth},
                  {"scope", node.at("scope").get<std::string>()},
                  {"name", node.at("name").get<std::string>()},
                  {"phase", node.at("phase").get<std::string>()},
                  {"collectives", object_at(node, "collectives")}});
  std::map<std::string, std::array<double, 3>> sums;  // count, bytes, time_ms
  for (const auto& [dim, d] : object_at(node, "dims").items()) {
    dims.add(dim);
    sums[dim] = {d.at("count").get<double>(), d.at("bytes").get<double>(),
                 d.at("time_ms").get<double>()};
  }
  for (const Json& child : array_at(node, "children")) {
    for (const auto& [dim, s] : flatten_scope(child, depth + 1, rows, dims)) {
      for (size_t i = 0; i < 3; ++i) sums[dim][i] += s[i];
    }
  }
  Json d = Json::object();
  for (const auto& [dim, s] : sums) {
    d[dim] = {{"count", static_cast<uint64_t>(s[0])},
              {"bytes", static_cast<uint64_t>(s[1])},
              {"time_ms", s[2]}};
  }
  rows[at]["dims"] = std::move(d);
  return sums;
}

std::vector<Json> read_scope_trees(const std::map<int, fs::path>& files, Dims& dims) {
  std::vector<Json> trees;
  for (const auto& [file_rank, path] : files) {
    with_json(path, "a scope tree (MESHRT_SCOPE_TREE)", [&](const Json& doc) {
      Json rows = Json::array();
      flatten_scope(object_at(doc, "root"), 0, rows, dims);
      trees.push_back({{"rank", doc.at("rank").get<int>()}, {"rows", std::move(rows)}});
    });
  }
  return trees;
}

// One flight-recorder entry as the report shows it; times relative to `t0_ns`.
Json entry_json(const RankDump& d, const DumpEntry& e, int64_t t0_ns, bool focus) {
  const DumpGroup& g = d.groups[e.group];
  const std::string_view type = d.symbols[e.type];
  // A recv's buffer is its output; everything else shows its input.
  const bool recv = op_kind_from_name(type) == OpKind::kRecv;
  const auto shapes = d.span(recv ? e.output_sizes : e.input_sizes);
  std::string sizes;
  for (size_t i = 0; i < shapes.size();) {
    const size_t ndim = static_cast<size_t>(std::max<int64_t>(0, shapes[i]));
    const size_t end = std::min(shapes.size(), i + 1 + ndim);
    if (!sizes.empty()) sizes += ", ";
    sizes += fmt::format("[{}]", fmt::join(shapes.subspan(i + 1, end - i - 1), ", "));
    i = end;
  }
  std::vector<std::string_view> dtypes;
  for (int64_t id : d.span(recv ? e.output_dtypes : e.input_dtypes)) {
    dtypes.push_back(d.symbols[static_cast<size_t>(id)]);
  }
  std::string op(type);
  if (e.peer >= 0) op += fmt::format(" {} {}", recv ? "from" : "to", e.peer);
  return {{"record_id", e.record_id},
          {"time_ms", (e.time_created_ns - t0_ns) / 1e6},
          {"group", g.name},
          {"dim", g.mesh_dim ? Json(*g.mesh_dim) : Json(nullptr)},
          {"seq", e.is_p2p ? e.p2p_seq : e.collective_seq},
          {"p2p", e.is_p2p},
          {"op", op},
          {"sizes", sizes},
          {"dtypes", fmt::format("{}", fmt::join(dtypes, ", "))},
          {"state", entry_state_name(e.state)},
          {"scope", d.symbols[e.scope]},
          {"caller", d.symbols[e.caller]},
          {"focus", focus}};
}

// The entries around the op of the first root finding that names a culprit: the culprits'
// entries before and after it, and the last entries of the ranks it waited for.
Json entries_around(const Report& report, const std::vector<RankDump>& dumps) {
  const Finding* focus = nullptr;
  for (const Finding& f : report.findings) {
    if (f.root && f.seq && !f.culprit_ranks.empty()) {
      focus = &f;
      break;
    }
  }
  Json out = Json::array();
  if (focus == nullptr) return out;
  auto dump_of = [&](int rank) -> const RankDump* {
    for (const RankDump& d : dumps) {
      if (d.rank == rank) return &d;
    }
    return nullptr;
  };
  auto matches = [&](const RankDump& d, const DumpEntry& e) {
    return d.groups[e.group].name == focus->group &&
           (e.is_p2p ? e.channel_seq : e.collective_seq) == *focus->seq;
  };
  // The culprit's op is time 0; without it, the newest entry of the first culprit.
  int64_t t0 = 0;
  for (int rank : focus->culprit_ranks) {
    if (const RankDump* d = dump_of(rank); d != nullptr && !d->entries.empty()) {
      t0 = d->entries.back().time_created_ns;
      for (const DumpEntry& e : d->entries) {
        if (matches(*d, e)) t0 = e.time_created_ns;
      }
      break;
    }
  }
  const std::string what = fmt::format("{} #{}", focus->op, *focus->seq);
  for (size_t i = 0; i < focus->culprit_ranks.size() && i < kMaxCulprits; ++i) {
    const RankDump* d = dump_of(focus->culprit_ranks[i]);
    if (d == nullptr || d->entries.empty()) continue;
    const auto& entries = d->entries;
    ptrdiff_t at = static_cast<ptrdiff_t>(entries.size()) - 1;
    bool found = false;
    for (ptrdiff_t k = 0; k < static_cast<ptrdiff_t>(entries.size()); ++k) {
      if (matches(*d, entries[k])) {
        at = k;
        found = true;
      }
    }
    Json rows = Json::array();
    const ptrdiff_t first = std::max<ptrdiff_t>(0, at - kEntriesBefore);
    const ptrdiff_t last =
        std::min<ptrdiff_t>(static_cast<ptrdiff_t>(entries.size()) - 1, at + kEntriesAfter);
    for (ptrdiff_t k = first; k <= last; ++k) {
      rows.push_back(entry_json(*d, entries[k], t0, found && k == at));
    }
    out.push_back({{"rank", d->rank},
                   {"role", "culprit"},
                   {"caption", found ? fmt::format("rank {} (culprit): around its {} on {}",
                                                   d->rank, what, focus->group)
                                     : fmt::format("rank {} (culprit): its last entries ({} on {} "
                                                   "is not in its dump)",
                                                   d->rank, what, focus->group)},
                   {"rows", rows}});
  }
  for (size_t i = 0; i < focus->missing_ranks.size() && i < kMaxWaiting; ++i) {
    const RankDump* d = dump_of(focus->missing_ranks[i]);
    if (d == nullptr || d->entries.empty()) continue;
    Json rows = Json::array();
    const size_t first = d->entries.size() - std::min(d->entries.size(), kWaitingEntries);
    for (size_t k = first; k < d->entries.size(); ++k) {
      rows.push_back(entry_json(*d, d->entries[k], t0, false));
    }
    out.push_back(
        {{"rank", d->rank},
         {"role", "waiting"},
         {"caption", fmt::format("rank {} (did not join {}): its last entries", d->rank, what)},
         {"rows", rows}});
  }
  return out;
}

// The failure section from the flight-recorder dumps; null when there are none to read.
Json read_failure(const JobReportOptions& options, std::set<int>& ranks) {
  const bool given = !options.dumps_dir.empty();
  const fs::path where = given ? options.dumps_dir : options.dir;
  Json out = {{"dumps_dir", where.string()}, {"prefix", options.prefix}};
  std::vector<DumpFile> files;
  try {
    files = find_dump_files(where, options.prefix);
  } catch (const InputError& e) {
    if (!given) return nullptr;  // No dumps in the report's directory: nothing failed.
    out["error"] = e.what();
    return out;
  }
  // A dump that cannot be parsed is bad input, as a summary that is not JSON.
  const std::vector<RankDump> dumps = read_dumps(files);
  for (const RankDump& d : dumps) {
    ranks.insert(d.rank);
    for (int64_t r = 0; d.world_size && r < *d.world_size; ++r) ranks.insert(static_cast<int>(r));
  }
  try {
    check_versions(dumps);
    AnalyzeOptions analyze_options;
    analyze_options.prefix = options.prefix;
    analyze_options.allow_incomplete_ranks = true;  // A report shows what there is.
    const Report report = analyze(dumps, analyze_options);
    const Json verdict = Json::parse(format_json(report));
    out["ranks"] = verdict.at("ranks");
    out["collectives_checked"] = verdict.at("collectives_checked");
    out["verdict"] = format_text(report);
    out["findings"] = verdict.at("findings");
    out["entries"] = entries_around(report, dumps);
  } catch (const InputError& e) {
    out["error"] = e.what();
  }
  return out;
}

}  // namespace

JobReport make_job_report(const JobReportOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(options.dir, ec)) {
    throw InputError(fmt::format("'{}' is not a directory", options.dir.string()));
  }
  const std::string dir = options.dir.string();
  Dims dims;
  std::set<int> ranks;
  Json missing = Json::array();
  auto note_missing = [&](const char* section, std::string text) {
    missing.push_back({{"section", section}, {"text", std::move(text)}});
  };

  const auto comm_files = per_rank_files(options.dir, "comms_");
  std::set<int> comm_ranks;
  const std::vector<CommRow> comm_rows = read_comms(comm_files, dims, comm_ranks);

  const fs::path straggler_path = options.dir / "stragglers.json";
  Json stragglers = nullptr;
  if (fs::exists(straggler_path, ec)) stragglers = read_stragglers(straggler_path, dims, ranks);

  const auto tree_files = per_rank_files(options.dir, "scope_tree_");
  const std::vector<Json> trees = read_scope_trees(tree_files, dims);
  std::set<int> tree_ranks;
  for (const Json& t : trees) tree_ranks.insert(t.at("rank").get<int>());

  Json failure = read_failure(options, ranks);
  ranks.insert(comm_ranks.begin(), comm_ranks.end());
  ranks.insert(tree_ranks.begin(), tree_ranks.end());

  // What each section lacks, and what would have produced it.
  auto absent = [&](const std::set<int>& have) {
    std::set<int> out;
    std::set_difference(ranks.begin(), ranks.end(), have.begin(), have.end(),
                        std::inserter(out, out.end()));
    return out;
  };
  Json comms = nullptr;
  if (comm_files.empty()) {
    note_missing("comms", fmt::format("No comm logger summaries (comms_<rank>.json) in {}: set "
                                      "MESHRT_COMMS_SUMMARY={}/comms_{{rank}}.json (meshrun "
                                      "--report does); each rank writes its summary when it exits "
                                      "normally.",
                                      dir, dir));
  } else {
    comms = comms_json(comm_rows, comm_ranks, dims);
    const std::set<int> lacking = absent(comm_ranks);
    comms["missing_ranks"] = lacking;
    if (!lacking.empty()) {
      note_missing("comms", fmt::format("No comm logger summary from {}: a rank writes "
                                        "comms_<rank>.json when it exits normally.",
                                        ranks_phrase(lacking)));
    }
  }
  if (stragglers.is_null()) {
    note_missing("stragglers",
                 fmt::format("No straggler report (stragglers.json) in {}: set "
                             "MESHRT_STRAGGLER_REPORT={}/stragglers.json (meshrun --report "
                             "does); rank 0 writes it once every rank reached the end of the "
                             "job, so a job that failed has none.",
                             dir, dir));
  }
  Json scope_trees = nullptr;
  if (trees.empty()) {
    note_missing("scope_trees",
                 fmt::format("No scope trees (scope_tree_<rank>.json) in {}: set "
                             "MESHRT_SCOPE_TREE={}/scope_tree_{{rank}}.json (meshrun --report "
                             "does) and name model code with trace::Scope; each rank writes its "
                             "tree when it exits normally.",
                             dir, dir));
  } else {
    const std::set<int> lacking = absent(tree_ranks);
    scope_trees = {{"ranks", tree_ranks}, {"missing_ranks", lacking}, {"trees", trees}};
    if (!lacking.empty()) {
      note_missing("scope_trees", fmt::format("No scope tree from {}: a rank writes "
                                              "scope_tree_<rank>.json when it exits normally.",
                                              ranks_phrase(lacking)));
    }
  }

  Json doc = {{"dir", dir},
              {"ranks", ranks},
              {"dims", dims.json()},
              {"missing", missing},
              {"comms", comms},
              {"stragglers", stragglers},
              {"scope_trees", scope_trees},
              {"failure", failure}};
  JobReport report;
  report.data = doc.dump();
  report.html = job_report_html(doc);
  for (const Json& m : missing) report.missing.push_back(m.at("text").get<std::string>());
  return report;
}

JobReport write_job_report(const JobReportOptions& options, std::filesystem::path output) {
  JobReport report = make_job_report(options);
  report.path = output.empty() ? options.dir / "report.html" : std::move(output);
  if (!write_file_atomically(report.path.string(), report.html)) {
    throw InputError(fmt::format("cannot write {}", report.path.string()));
  }
  return report;
}

}  // namespace meshrt::trace
