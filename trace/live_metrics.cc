#include "trace/live_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <tuple>

#include "trace/bandwidth.h"
#include "trace/labels.h"

namespace meshrt::trace {

LiveMetrics& LiveMetrics::instance() {
  static LiveMetrics* m = new LiveMetrics;
  return *m;
}

void LiveMetrics::enable() {
  if (enabled_.exchange(true)) return;
  add_sink(std::shared_ptr<Sink>(this, [](Sink*) {}));
}

void LiveMetrics::on_end(const OpRecord& r) {
  if (r.state != OpState::kCompleted || !r.comm) return;
  const int64_t ns = run_ns(r);
  const double seconds = static_cast<double>(ns) / 1e9;
  const size_t bucket =
      std::lower_bound(kExecTimeBucketsSeconds.begin(), kExecTimeBucketsSeconds.end(), seconds) -
      kExecTimeBucketsSeconds.begin();
  Shard& shard = shards_[r.comm->uid % kShards];
  std::lock_guard lock(shard.lock);
  const Key key{r.comm->global_rank, r.comm->uid, r.kind, size_bucket(r.bytes)};
  if (shard.last == nullptr || shard.last_key != key) {
    shard.last = &shard.totals[key];
    shard.last_key = key;
  }
  Totals& t = *shard.last;
  if (!t.comm) {
    t.comm = r.comm;
    t.op = r.op;
    t.is_p2p = r.is_p2p;
  }
  ++t.ops;
  t.bytes += r.bytes;
  if (ns > 0) {
    ++t.timed_ops;
    t.timed_bytes += r.bytes;
    t.exec_seconds += seconds;
    ++t.exec_buckets[bucket];
  }
}

nlohmann::json LiveMetrics::rank_json(int rank) const {
  // Merged by what the labels will say, so that two communicators of one name give one series.
  using Name = std::tuple<std::string, std::string_view, uint64_t>;
  std::map<Name, Totals> merged;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.lock);
    for (const auto& [key, t] : shard.totals) {
      if (key.global_rank != rank) continue;
      Totals& m = merged[Name{t.comm->name, t.op, key.bucket_bytes}];
      if (!m.comm) {
        m.comm = t.comm;
        m.op = t.op;
        m.is_p2p = t.is_p2p;
      }
      m.ops += t.ops;
      m.bytes += t.bytes;
      m.timed_ops += t.timed_ops;
      m.exec_seconds += t.exec_seconds;
      for (size_t i = 0; i < t.exec_buckets.size(); ++i) m.exec_buckets[i] += t.exec_buckets[i];
      m.timed_bytes += t.timed_bytes;
      m.kind = key.kind;
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, t] : merged) {
    // algbw = bytes / time over all the timed ops, times nccl-tests' factor on the group.
    const double busbw = t.exec_seconds > 0
                             ? bus_factor(t.kind, static_cast<int>(t.comm->global_ranks.size())) *
                                   static_cast<double>(t.timed_bytes) / t.exec_seconds
                             : 0.0;
    out.push_back({{"comm", t.comm->name},
                   {"mesh_dim", mesh_dim_label(*t.comm)},
                   {"nranks", t.comm->global_ranks.size()},
                   {"backend", t.comm->backend},
                   {"op", t.op},
                   {"p2p", t.is_p2p},
                   {"size_bytes", std::get<2>(name)},
                   {"ops", t.ops},
                   {"bytes", t.bytes},
                   {"timed_ops", t.timed_ops},
                   {"exec_seconds", t.exec_seconds},
                   {"exec_buckets", t.exec_buckets},
                   {"busbw_bytes_per_second", busbw}});
  }
  return out;
}

void LiveMetrics::reset() {
  for (Shard& shard : shards_) {
    std::lock_guard lock(shard.lock);
    shard.totals.clear();
    shard.last = nullptr;
  }
}

void Exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  for (const Family& f : families_) {
    if (f.name == name) return;
  }
  families_.push_back({std::string(name), std::string(type), std::string(help), {}});
}

void Exposition::sample(std::string_view name, std::string_view suffix, const Labels& labels,
                        double value) {
  for (Family& f : families_) {
    if (f.name != name) continue;
    f.samples += f.name;
    f.samples += suffix;
    if (!labels.empty()) {
      f.samples += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) f.samples += ',';
        f.samples +=
            fmt::format("{}=\"{}\"", labels[i].first, escape_label_value(labels[i].second));
      }
      f.samples += '}';
    }
    // The text format spells infinities and NaN its own way.
    if (std::isnan(value)) {
      f.samples += " NaN\n";
    } else if (std::isinf(value)) {
      f.samples += value > 0 ? " +Inf\n" : " -Inf\n";
    } else {
      f.samples += fmt::format(" {}\n", value);
    }
    return;
  }
}

std::string Exposition::text() const {
  std::string out;
  for (const Family& f : families_) {
    // HELP text escapes backslash and newline only.
    std::string help;
    for (char c : f.help) {
      if (c == '\\') {
        help += "\\\\";
      } else if (c == '\n') {
        help += "\\n";
      } else {
        help += c;
      }
    }
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, help, f.name, f.type);
    out += f.samples;
  }
  return out;
}

void add_live_totals(Exposition& out, int rank, const nlohmann::json& totals) {
  out.family("meshrt_ops_total", "counter", "Ops completed, per rank, communicator, op and size");
  out.family("meshrt_bytes_total", "counter",
             "Message bytes of the ops completed (nccl-tests' S per op)");
  out.family("meshrt_op_exec_time_seconds", "histogram",
             "Op execution time in seconds, from start to completion (ops whose backend measured "
             "a start)");
  out.family("meshrt_bus_bandwidth_bytes_per_second", "gauge",
             "Bus bandwidth in bytes per second: the timed ops' bytes over their execution time "
             "since the rank started, times nccl-tests' bus factor on the op's group");
  if (!totals.is_array()) return;
  for (const auto& t : totals) {
    try {
      const Exposition::Labels labels = {
          {"rank", std::to_string(rank)},
          {"comm", t.at("comm").get<std::string>()},
          {"mesh_dim", t.at("mesh_dim").get<std::string>()},
          {"op", t.at("op").get<std::string>()},
          {"message_size", size_bucket_label(t.at("size_bytes").get<uint64_t>())}};
      const auto& buckets = t.at("exec_buckets");
      if (buckets.size() != kExecTimeBucketsSeconds.size() + 1) continue;
      out.sample("meshrt_ops_total", "", labels, t.at("ops").get<double>());
      out.sample("meshrt_bytes_total", "", labels, t.at("bytes").get<double>());
      // Buckets are cumulative in the text format.
      Exposition::Labels with_le = labels;
      with_le.emplace_back("le", "");
      uint64_t below = 0;
      for (size_t i = 0; i < buckets.size(); ++i) {
        below += buckets[i].get<uint64_t>();
        with_le.back().second = i < kExecTimeBucketsSeconds.size()
                                    ? fmt::format("{}", kExecTimeBucketsSeconds[i])
                                    : "+Inf";
        out.sample("meshrt_op_exec_time_seconds", "_bucket", with_le, static_cast<double>(below));
      }
      out.sample("meshrt_op_exec_time_seconds", "_sum", labels, t.at("exec_seconds").get<double>());
      out.sample("meshrt_op_exec_time_seconds", "_count", labels, static_cast<double>(below));
      // Ops that move no bus bytes (barriers) have no bandwidth: no sample rather than a 0.
      const double busbw = t.at("busbw_bytes_per_second").get<double>();
      if (busbw > 0) out.sample("meshrt_bus_bandwidth_bytes_per_second", "", labels, busbw);
    } catch (const nlohmann::json::exception&) {
      // A rank's malformed entry costs only that entry.
    }
  }
}

}  // namespace meshrt::trace
