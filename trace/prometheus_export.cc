#include "trace/prometheus_export.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "meshrt_config.h"
#include "trace/bandwidth.h"
#include "trace/labels.h"

namespace meshrt::trace {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

enum class Value { kBusbw, kExecTime, kCount };

struct Family {
  const char* name;
  const char* type;
  const char* help;
  bool p2p;
  Value value;
};

// Inspector's names with its units (GB/s, microseconds) replaced by base units: promtool rejects
// "microseconds", and Prometheus wants bytes, not gigabytes (see the class comment).
constexpr Family kFamilies[] = {
    {"nccl_bus_bandwidth_bytes_per_second", "gauge",
     "Collective bus bandwidth in bytes per second (nccl-tests busbw on the op's group, geometric "
     "mean)",
     false, Value::kBusbw},
    {"nccl_collective_exec_time_seconds", "histogram",
     "Collective execution time in seconds, from start to completion", false, Value::kExecTime},
    {"nccl_collectives_total", "counter", "Collectives completed", false, Value::kCount},
    {"nccl_p2p_bus_bandwidth_bytes_per_second", "gauge",
     "Point-to-point bus bandwidth in bytes per second (geometric mean)", true, Value::kBusbw},
    {"nccl_p2p_exec_time_seconds", "histogram",
     "Point-to-point execution time in seconds, from start to completion", true, Value::kExecTime},
    {"nccl_p2p_total", "counter", "Point-to-point operations completed", true, Value::kCount},
};

}  // namespace

std::string nccl_op_name(std::string_view op) {
  std::string out;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusMetrics::add(const OpRecord& r) {
  if (r.state != OpState::kCompleted || !r.comm) return;
  Series& s = series_[Key{r.comm->global_rank, r.comm->uid, r.op, size_bucket(r.bytes)}];
  if (!s.comm) {
    s.comm = r.comm;
    s.is_p2p = r.is_p2p;
  }
  const double seconds = run_ns(r) / 1e9;
  ++s.count;
  s.exec_time_sum_seconds += seconds;
  const auto bucket =
      std::lower_bound(kExecTimeBucketsSeconds.begin(), kExecTimeBucketsSeconds.end(), seconds);
  ++s.exec_time_buckets[bucket - kExecTimeBucketsSeconds.begin()];
  const double busbw =
      busbw_gbps(r.kind, static_cast<int>(r.comm->global_ranks.size()), r.bytes, seconds * 1e6);
  if (busbw > 0) {
    s.busbw_log_sum += std::log(busbw * 1e9);
    ++s.busbw_count;
  }
}

void PrometheusMetrics::reset() { series_.clear(); }

std::string PrometheusMetrics::text(std::span<const int> ranks) const {
  const char* job = std::getenv("SLURM_JOB_ID");
  // Labels every series shares, in Inspector's order.
  const std::string common = fmt::format(
      R"(version="meshrt-{}",slurm_job_id="{}",node="{}",gpu="unknown")", MESHRT_VERSION,
      escape_label_value(job ? job : "unknown"), escape_label_value(host_name()));
  std::vector<std::pair<std::string, const Series*>> collectives, p2p;
  for (const auto& [key, s] : series_) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), key.global_rank) == ranks.end()) {
      continue;
    }
    const CommInfo& c = *s.comm;
    const bool is_p2p = s.is_p2p;
    // Ranks of the in-process backend are threads of one process, so one node.
    std::string labels =
        fmt::format(R"({},comm_name="{}",n_nodes="{}",nranks="{}",{}="{}",message_size="{}",)",
                    common, escape_label_value(c.name), c.backend == "inproc" ? "1" : "unknown",
                    c.global_ranks.size(), is_p2p ? "p2p_operation" : "collective",
                    nccl_op_name(key.op), size_bucket_label(key.bucket_bytes));
    if (!is_p2p) labels += fmt::format(R"(algo_proto="{}",)", escape_label_value(c.backend));
    labels += fmt::format(R"(rank="{}",mesh_dim="{}")", key.global_rank,
                          escape_label_value(mesh_dim_label(c)));
    (is_p2p ? p2p : collectives).emplace_back(std::move(labels), &s);
  }
  std::string out;
  for (const Family& f : kFamilies) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
    for (const auto& [labels, s] : f.p2p ? p2p : collectives) {
      switch (f.value) {
        case Value::kBusbw:
          out += fmt::format("{}{{{}}} {}\n", f.name, labels,
                             s->busbw_count ? std::exp(s->busbw_log_sum / s->busbw_count) : 0.0);
          break;
        case Value::kExecTime: {
          // Buckets are cumulative in the text format.
          uint64_t below = 0;
          for (size_t i = 0; i < s->exec_time_buckets.size(); ++i) {
            below += s->exec_time_buckets[i];
            const std::string le = i < kExecTimeBucketsSeconds.size()
                                       ? fmt::format("{}", kExecTimeBucketsSeconds[i])
                                       : "+Inf";
            out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", f.name, labels, le, below);
          }
          out += fmt::format("{}_sum{{{}}} {}\n", f.name, labels, s->exec_time_sum_seconds);
          out += fmt::format("{}_count{{{}}} {}\n", f.name, labels, s->count);
          break;
        }
        case Value::kCount:
          out += fmt::format("{}{{{}}} {}\n", f.name, labels, s->count);
          break;
      }
    }
  }
  return out;
}

}  // namespace meshrt::trace
