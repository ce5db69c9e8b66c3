#include "trace/comm_logger.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <sstream>

#include "trace/atomic_file.h"
#include "trace/bandwidth.h"
#include "trace/logging.h"

namespace meshrt::trace {
namespace {

double percentile_ms(std::vector<int64_t> samples, double q) {
  if (samples.empty()) return 0;
  // Nearest rank, as nccl-tests' p99.
  const size_t k = static_cast<size_t>(std::max(1.0, std::ceil(q * samples.size()))) - 1;
  std::nth_element(samples.begin(), samples.begin() + k, samples.end());
  return samples[k] / 1e6;
}

// `value` in the largest of `units` (each `step` times the previous) that keeps it >= 1, to three
// significant digits without trailing zeros: "3", "3.91", "12.5", "640".
std::string with_unit(double value, double step, std::span<const char* const> units) {
  size_t u = 0;
  while (value >= step && u + 1 < units.size()) {
    value /= step;
    ++u;
  }
  std::string digits = fmt::format("{:.{}f}", value, value >= 100 ? 0 : value >= 10 ? 1 : 2);
  if (digits.find('.') != std::string::npos) {
    digits.erase(digits.find_last_not_of('0') + 1);
    if (digits.back() == '.') digits.pop_back();
  }
  return fmt::format("{} {}", digits, units[u]);
}

void write_at_exit() {
  CommLogger& logger = CommLogger::instance();
  const CommLoggerOptions options = logger.options();
  if (!options.summary_path.empty()) logger.write_summaries(options.summary_path);
  if (options.print_at_exit) logger.print_unasked_tables();
}

}  // namespace

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  return with_unit(bytes, 1024, kUnits);
}

std::string format_bandwidth(double gbps) {
  static constexpr const char* kUnits[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
  return gbps > 0 ? with_unit(gbps * 1e9, 1000, kUnits) : "-";
}

CommLogger& CommLogger::instance() {
  // Leaked, as every sink: worker threads may still deliver while static destructors run.
  static CommLogger* logger = new CommLogger;
  return *logger;
}

void CommLogger::configure(CommLoggerOptions options) {
  bool was_enabled;
  bool wants_exit_writer;
  {
    std::lock_guard lock(mu_);
    was_enabled = options_.enabled;
    options_ = std::move(options);
    wants_exit_writer = !options_.summary_path.empty() || options_.print_at_exit;
  }
  keep_registered_while_enabled(instance(), was_enabled, options_.enabled);
  if (wants_exit_writer) run_at_exit_once(write_at_exit);
}

CommLoggerOptions CommLogger::options() const {
  std::lock_guard lock(mu_);
  return options_;
}

void CommLogger::start() {
  std::lock_guard lock(mu_);
  active_ = true;
}

void CommLogger::stop() {
  std::lock_guard lock(mu_);
  active_ = false;
}

void CommLogger::reset() {
  std::lock_guard lock(mu_);
  rows_.clear();
}

bool CommLogger::selected(std::string_view op) const {
  return options_.ops.empty() ||
         std::find(options_.ops.begin(), options_.ops.end(), op) != options_.ops.end();
}

void CommLogger::on_end(const OpRecord& r) {
  if (r.state != OpState::kCompleted || !r.comm) return;
  const int64_t ns = run_ns(r);
  bool verbose;
  {
    std::lock_guard lock(mu_);
    if (!options_.enabled || !active_ || !selected(r.op)) return;
    Row& row = rows_[Key{r.comm->global_rank, r.comm->uid, r.setup, r.kind, size_bucket(r.bytes)}];
    if (!row.comm) {
      row.comm = r.comm;
      row.samples_ns.reserve(kSamples);
    }
    if (row.samples_ns.size() < kSamples) {
      row.samples_ns.push_back(ns);
    } else {
      row.samples_ns[row.count % kSamples] = ns;
    }
    ++row.count;
    row.total_bytes += r.bytes;
    row.min_bytes = std::min(row.min_bytes, r.bytes);
    row.max_bytes = std::max(row.max_bytes, r.bytes);
    row.total_ns += ns;
    verbose = options_.verbose;
  }
  if (verbose) {
    const int n = static_cast<int>(r.comm->global_ranks.size());
    const double us = ns / 1e3;
    // The logger's prefix names the rank: the op runs on its rank's thread.
    std::string line = fmt::format(
        "comm op: {} | dim: {} | group: {} | size: {} B | time (ms): {:.3f} | "
        "algbw (GB/s): {:.3f} | busbw (GB/s): {:.3f}",
        r.op, r.comm->mesh_dim.empty() ? r.comm->name : r.comm->mesh_dim, n, r.bytes, us / 1e3,
        algbw_gbps(r.bytes, us), busbw_gbps(r.kind, n, r.bytes, us));
    if (r.debug) {
      line += fmt::format(" | in: {} | out: {}", format_tensor_stats(r.debug->input),
                          format_tensor_stats(r.debug->output));
    }
    log().info("{}", line);
  }
}

std::vector<SummaryRow> CommLogger::summary(int global_rank) const {
  // Communicators of one dim (e.g. two meshes) merge into one row; a communicator outside any
  // mesh stays apart from a dim of the same name. Program rows sort before setup rows.
  using MergeKey = std::tuple<bool, std::string, bool, OpKind, int, uint64_t>;
  std::map<MergeKey, SummaryRow> merged;
  std::map<MergeKey, std::pair<std::vector<int64_t>, uint64_t>> samples;  // Latencies, bytes.
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, row] : rows_) {
      if (key.global_rank != global_rank) continue;
      const int n = static_cast<int>(row.comm->global_ranks.size());
      const MergeKey k{
          key.setup, mesh_dim_label(*row.comm), row.comm->mesh_dim.empty(), key.kind, n,
          key.bucket};
      SummaryRow& s = merged[k];
      s.mesh_dim = mesh_dim_label(*row.comm);
      s.comm = s.comm.empty() ? row.comm->name : s.comm;
      s.op = std::string(op_kind_name(key.kind));
      s.kind = key.kind;
      s.setup = key.setup;
      s.group_size = n;
      s.bucket_bytes = key.bucket;
      s.min_bytes = s.count ? std::min(s.min_bytes, row.min_bytes) : row.min_bytes;
      s.max_bytes = std::max(s.max_bytes, row.max_bytes);
      s.count += row.count;
      s.total_ms += row.total_ns / 1e6;
      auto& [all, bytes] = samples[k];
      all.insert(all.end(), row.samples_ns.begin(), row.samples_ns.end());
      bytes += row.total_bytes;
    }
  }
  std::vector<SummaryRow> out;
  for (auto& [k, s] : merged) {
    const auto& [all, bytes] = samples[k];
    s.avg_ms = s.count ? s.total_ms / s.count : 0;
    s.p50_ms = percentile_ms(all, 0.50);
    s.p99_ms = percentile_ms(all, 0.99);
    s.mean_bytes = s.count ? static_cast<double>(bytes) / s.count : 0;
    s.algbw_gbps = algbw_gbps(static_cast<uint64_t>(s.mean_bytes), s.avg_ms * 1e3);
    s.busbw_gbps = s.algbw_gbps * bus_factor(s.kind, s.group_size);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<int> CommLogger::ranks() const {
  std::lock_guard lock(mu_);
  std::set<int> ranks;
  for (const auto& [key, row] : rows_) ranks.insert(key.global_rank);
  return {ranks.begin(), ranks.end()};
}

void CommLogger::print_unasked_tables() const {
  for (int rank : ranks()) {
    {
      std::lock_guard lock(mu_);
      if (tables_asked_.contains(rank)) continue;
    }
    const std::string table = summary_table(rank);
    std::fprintf(stderr, "meshrt comm summary, rank %d (MESHRT_COMMS_LOG=1):\n%s", rank,
                 table.c_str());
  }
  std::fflush(stderr);
}

std::string CommLogger::summary_table(int global_rank) const {
  {
    std::lock_guard lock(mu_);
    tables_asked_.insert(global_rank);
  }
  const auto rows = summary(global_rank);
  size_t dim_width = 10;  // Names of communicators outside a mesh can be long.
  for (const auto& r : rows) dim_width = std::max(dim_width, r.mesh_dim.size());
  const auto line = [&](std::string_view dim, std::string_view op, auto group,
                        std::string_view size, auto count, auto total, auto avg, auto p50, auto p99,
                        std::string_view algbw, std::string_view busbw) {
    return fmt::format(
        "{:<{}} {:<16} {:>5} {:>10} {:>8} {:>11} {:>10} {:>10} {:>10} {:>11} {:>11}\n", dim,
        dim_width, op, group, size, count, total, avg, p50, p99, algbw, busbw);
  };
  std::string out = line("mesh dim", "op", "group", "size", "count", "total ms", "avg ms", "p50 ms",
                         "p99 ms", "algbw", "busbw");
  // The previous row: a dim is shown once per run of rows, and again after the setup heading.
  const SummaryRow* previous = nullptr;
  bool in_setup = false;
  for (const auto& r : rows) {
    if (r.setup && !in_setup) {
      // Users see all_gathers they never wrote: say where they come from.
      out +=
          "setup: ops meshrt ran itself to create communicators (split) and meshes "
          "(init_device_mesh)\n";
      in_setup = true;
      previous = nullptr;
    }
    const bool same_dim = previous != nullptr && previous->mesh_dim == r.mesh_dim;
    out += line(same_dim ? "" : r.mesh_dim, r.op, r.group_size, format_bytes(r.mean_bytes), r.count,
                fmt::format("{:.3f}", r.total_ms), fmt::format("{:.3f}", r.avg_ms),
                fmt::format("{:.3f}", r.p50_ms), fmt::format("{:.3f}", r.p99_ms),
                format_bandwidth(r.algbw_gbps), format_bandwidth(r.busbw_gbps));
    previous = &r;
  }
  return out;
}

std::string CommLogger::summary_json(int global_rank) const {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& r : summary(global_rank)) {
    rows.push_back({{"mesh_dim", r.mesh_dim},
                    {"comm", r.comm},
                    {"op", r.op},
                    {"setup", r.setup},
                    {"group_size", r.group_size},
                    {"size_bucket", size_bucket_label(r.bucket_bytes)},
                    {"bucket_bytes", r.bucket_bytes},
                    {"mean_bytes", r.mean_bytes},
                    {"min_bytes", r.min_bytes},
                    {"max_bytes", r.max_bytes},
                    {"count", r.count},
                    {"total_ms", r.total_ms},
                    {"avg_ms", r.avg_ms},
                    {"p50_ms", r.p50_ms},
                    {"p99_ms", r.p99_ms},
                    {"algbw_gbps", r.algbw_gbps},
                    {"busbw_gbps", r.busbw_gbps}});
  }
  nlohmann::ordered_json doc = {{"rank", global_rank}, {"rows", rows}};
  return doc.dump(2) + "\n";
}

std::vector<std::string> CommLogger::write_summaries(const std::string& pattern) const {
  std::vector<std::string> written;
  for (int rank : ranks()) {
    const std::string path = output_path(pattern, rank);
    if (write_output_file(path, summary_json(rank), "comms summary")) written.push_back(path);
  }
  return written;
}

}  // namespace meshrt::trace
