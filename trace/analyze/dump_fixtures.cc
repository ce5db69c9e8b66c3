#include "trace/analyze/dump_fixtures.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace meshrt::testing {
namespace {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void append_shapes(fmt::memory_buffer& out, const std::vector<std::vector<int64_t>>& shapes) {
  out.push_back('[');
  for (size_t i = 0; i < shapes.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}[{}]", i > 0 ? "," : "", fmt::join(shapes[i], ","));
  }
  out.push_back(']');
}

void append_strings(fmt::memory_buffer& out, const std::vector<std::string>& strings) {
  out.push_back('[');
  for (size_t i = 0; i < strings.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}{}", i > 0 ? "," : "", json_string(strings[i]));
  }
  out.push_back(']');
}

}  // namespace

std::string to_json(const FrDump& dump) {
  fmt::memory_buffer out;
  auto put = [&]<typename... Args>(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
  };
  put("{{\"version\":{},\"meshrt_dump_version\":{},\"producer\":\"meshrt 0.1.0\","
      "\"comm_lib_version\":\"inproc 0.1.0\",\"rank\":{},\"world_size\":{},\"host\":\"node0\","
      "\"pid\":{},\"run_id\":\"test\",\"dump_reason\":\"timeout\",\"trigger\":null,"
      "\"clock\":{{\"wall_ns\":1700000000000000000,\"steady_ns\":1000}},\"buffer_size\":2000,"
      "\"records_dropped\":{},\"pg_config\":{{",
      json_string(dump.version), dump.meshrt_dump_version, dump.rank, dump.world_size,
      1000 + dump.rank, dump.records_dropped);
  for (size_t g = 0; g < dump.groups.size(); ++g) {
    const FrGroup& group = dump.groups[g];
    put("{}{}:{{\"name\":{},\"desc\":{},\"ranks\":\"[{}]\",\"store_key\":{},\"mesh_dim\":{}}}",
        g > 0 ? "," : "", json_string(group.name), json_string(group.name), json_string(group.desc),
        fmt::join(group.ranks, ", "), json_string(group.name),
        group.mesh_dim ? json_string(*group.mesh_dim) : "null");
  }
  put("}},\"pg_status\":{{");
  for (size_t g = 0; g < dump.groups.size(); ++g) {
    int64_t enqueued = -1, completed = -1;
    for (const FrEntry& e : dump.entries) {
      if (e.group != dump.groups[g].name || e.is_p2p) continue;
      enqueued = e.collective_seq;
      if (e.state == "completed") completed = e.collective_seq;
    }
    put("{}\"{}\":{{\"last_enqueued_collective\":\"{}\",\"last_started_collective\":\"{}\","
        "\"last_completed_collective\":\"{}\"}}",
        g > 0 ? "," : "", g, enqueued, enqueued, completed);
  }
  put("}}");
  if (!dump.entries.empty()) put(",\"entries\":[\n");
  for (size_t i = 0; i < dump.entries.size(); ++i) {
    const FrEntry& e = dump.entries[i];
    const auto group = std::find_if(dump.groups.begin(), dump.groups.end(),
                                    [&](const FrGroup& g) { return g.name == e.group; });
    if (group == dump.groups.end()) throw std::logic_error("entry of an unknown group");
    const bool done = e.state == "completed";
    const int group_rank = static_cast<int>(
        std::find(group->ranks.begin(), group->ranks.end(), dump.rank) - group->ranks.begin());
    put("{}{{\"record_id\":{},\"pg_id\":{},\"process_group\":[{},{}],\"thread_id\":\"{}\","
        "\"thread_name\":\"main\",\"collective_seq_id\":{},\"p2p_seq_id\":{},\"op_id\":{},"
        "\"profiling_name\":\"inproc:{}{}{}\",\"time_created_ns\":{},",
        i > 0 ? ",\n" : "", dump.first_record_id + static_cast<int64_t>(i),
        group - dump.groups.begin(), json_string(group->name), json_string(group->desc),
        140000000 + dump.rank, e.collective_seq, e.p2p_seq, e.op_id, e.type,
        e.meta.empty() ? "" : " ", e.meta, e.time_created_ns);
    if (done) put("\"duration_ms\":0.25,");
    put("\"input_sizes\":");
    append_shapes(out, e.input_sizes);
    put(",\"output_sizes\":");
    append_shapes(out, e.output_sizes);
    put(",\"input_dtypes\":");
    append_strings(out, e.input_dtypes);
    put(",\"output_dtypes\":");
    append_strings(out, e.output_dtypes);
    put(",\"state\":{},\"time_discovered_started_ns\":{},\"time_discovered_completed_ns\":{},"
        "\"retired\":{},\"timeout_ms\":600000,\"is_p2p\":{},\"mesh_dim\":{},\"group_ranks\":[{}],"
        "\"group_rank\":{},\"scope\":\"step / forward\",\"peer\":{},\"root\":{},"
        "\"p2p_channel_seq\":{},\"reduce_op\":\"{}\",\"error\":\"\",\"caller\":{}}}",
        json_string(dump.records_starts || e.state != "started" ? e.state : "scheduled"),
        e.state == "scheduled" || !dump.records_starts ? 0 : e.time_created_ns + 500,
        done ? e.time_created_ns + 900 : 0, done, e.is_p2p,
        group->mesh_dim ? json_string(*group->mesh_dim) : "null", fmt::join(group->ranks, ","),
        group_rank, e.peer, e.root, e.channel_seq,
        e.type == "all_reduce" || e.type == "reduce_scatter" ? "sum" : "",
        json_string(e.caller.value_or(fmt::format("train.cc:{}", 100 + i % 7))));
  }
  put("{}}}\n", dump.entries.empty() ? "" : "]");
  return fmt::to_string(out);
}

FrJob::FrJob(int world_size) : dumps_(world_size) {
  for (int r = 0; r < world_size; ++r) {
    dumps_[r].rank = r;
    dumps_[r].world_size = world_size;
  }
}

FrJob dp_tp_job(int dp, int tp) {
  FrJob job(dp * tp);
  std::vector<int> world(dp * tp);
  for (int r = 0; r < dp * tp; ++r) world[r] = r;
  job.add_group({"world", "default_pg", world, std::nullopt});
  for (int d = 0; d < dp; ++d) {
    std::vector<int> ranks;
    for (int t = 0; t < tp; ++t) ranks.push_back(d * tp + t);
    job.add_group({"mesh0/tp", "mesh_tp", ranks, "tp"});
  }
  for (int t = 0; t < tp; ++t) {
    std::vector<int> ranks;
    for (int d = 0; d < dp; ++d) ranks.push_back(d * tp + t);
    job.add_group({"mesh0/dp", "mesh_dp", ranks, "dp"});
  }
  return job;
}

void FrJob::add_group(const FrGroup& group) {
  for (const int r : group.ranks) dumps_[r].groups.push_back(group);
}

const FrGroup& FrJob::group_of(int rank, const std::string& name) const {
  for (const FrGroup& g : dumps_[rank].groups) {
    if (g.name == name) return g;
  }
  throw std::logic_error(fmt::format("rank {} is not in group {}", rank, name));
}

int FrJob::local_rank(const FrGroup& group, int global) const {
  std::vector<int> sorted = group.ranks;
  std::sort(sorted.begin(), sorted.end());
  return static_cast<int>(std::find(sorted.begin(), sorted.end(), global) - sorted.begin());
}

FrEntry& FrJob::append(int rank, const std::string& group, FrEntry entry) {
  entry.group = group;
  entry.op_id = ++op_id_[{rank, group}];
  entry.time_created_ns = clock_ns_ += 1000;
  dumps_[rank].entries.push_back(std::move(entry));
  return dumps_[rank].entries.back();
}

FrEntry& FrJob::call(int rank, const std::string& group, const std::string& type, int64_t numel,
                     const std::string& state, const std::string& dtype) {
  const auto k = static_cast<int64_t>(group_of(rank, group).ranks.size());
  FrEntry e;
  e.type = type;
  e.state = state;
  e.collective_seq = ++collective_seq_[{rank, group}];
  e.p2p_seq = p2p_seq_[{rank, group}];
  int64_t in = numel, out = numel;
  if (type == "all_gather" || type == "gather") out = numel * k;
  if (type == "reduce_scatter" || type == "scatter") in = numel * k;
  if (type != "coalesced") {
    e.input_sizes = {{in}};
    e.output_sizes = {{out}};
    e.input_dtypes = {dtype};
    e.output_dtypes = {dtype};
  }
  return append(rank, group, std::move(e));
}

void FrJob::collective(const std::string& group, const std::string& type, int64_t numel,
                       const std::string& state) {
  // Group names repeat across member sets (every tp group is "mesh0/tp"): call on all of them.
  for (const FrDump& d : dumps_) {
    for (const FrGroup& g : d.groups) {
      if (g.name == group) call(d.rank, group, type, numel, state);
    }
  }
}

FrEntry& FrJob::send(int rank, const std::string& group, int dst, int64_t numel,
                     const std::string& state) {
  return p2p(rank, group, /*is_send=*/true, dst, numel, state);
}

FrEntry& FrJob::recv(int rank, const std::string& group, int src, int64_t numel,
                     const std::string& state) {
  return p2p(rank, group, /*is_send=*/false, src, numel, state);
}

FrEntry& FrJob::p2p(int rank, const std::string& group, bool is_send, int peer, int64_t numel,
                    const std::string& state) {
  const FrGroup& g = group_of(rank, group);
  FrEntry e;
  e.type = is_send ? "send" : "recv";
  e.meta = fmt::format("{}{}{}", local_rank(g, rank), is_send ? "->" : "<-", local_rank(g, peer));
  e.state = state;
  e.is_p2p = true;
  e.peer = peer;
  e.collective_seq = collective_seq_[{rank, group}];
  e.p2p_seq = ++p2p_seq_[{rank, group}];
  e.channel_seq = ++channel_seq_[{rank, group, is_send, peer}];
  // A send records its buffer as input, a recv as output: what the analyzer compares.
  (is_send ? e.input_sizes : e.output_sizes) = {{numel}};
  (is_send ? e.input_dtypes : e.output_dtypes) = {"Float"};
  return append(rank, group, std::move(e));
}

void FrJob::coalesced(int rank, const std::string& group,
                      const std::vector<std::pair<std::string, int64_t>>& ops,
                      const std::string& state) {
  for (const auto& [type, numel] : ops) {
    // Members share the group's one sequence number and stay "scheduled", as in PyTorch.
    call(rank, group, type, numel, "scheduled");
    --collective_seq_[{rank, group}];
  }
  call(rank, group, "coalesced", 0, state);
}

void FrJob::keep_last(int rank, size_t n) {
  FrDump& d = dumps_[rank];
  if (d.entries.size() <= n) return;
  const auto dropped = static_cast<int64_t>(d.entries.size() - n);
  d.entries.erase(d.entries.begin(), d.entries.begin() + dropped);
  d.records_dropped += dropped;
  d.first_record_id += dropped;
}

void FrJob::write(const std::filesystem::path& dir, const std::string& prefix,
                  const std::vector<int>& ranks) const {
  for (const FrDump& d : dumps_) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), d.rank) == ranks.end()) continue;
    std::ofstream(dir / fmt::format("{}{}", prefix, d.rank)) << to_json(d);
  }
}

}  // namespace meshrt::testing
