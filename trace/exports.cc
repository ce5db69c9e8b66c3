#include "trace/exports.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "trace/atomic_file.h"
#include "trace/jsonl_export.h"

namespace meshrt::trace {
namespace {

constexpr std::string_view kRankField = "{rank}";

bool has_path(const ExportOptions& o) {
  return !o.chrome_path.empty() || !o.jsonl_path.empty() || !o.prometheus_path.empty();
}

void write_at_exit() { Exports::instance().write_configured(); }

}  // namespace

Exports::Exports() : wall_minus_steady_ns_(wall_now_ns() - steady_now_ns()) {}

Exports& Exports::instance() {
  // Leaked, as every sink: worker threads may still deliver while static destructors run.
  static Exports* exports = new Exports;
  return *exports;
}

void Exports::configure(ExportOptions options) {
  const bool enable = options.enabled;
  const bool wants_exit_writer = has_path(options);
  bool was_enabled;
  {
    std::lock_guard lock(mu_);
    was_enabled = options_.enabled;
    if (options.max_ops_per_rank != options_.max_ops_per_rank) rings_.clear();
    options_ = std::move(options);
  }
  keep_registered_while_enabled(instance(), was_enabled, enable);
  if (wants_exit_writer) run_at_exit_once(write_at_exit);
}

ExportOptions Exports::options() const {
  std::lock_guard lock(mu_);
  return options_;
}

void Exports::reset() {
  std::lock_guard lock(mu_);
  rings_.clear();
  metrics_.reset();
}

void Exports::on_end(const OpRecord& r) {
  if (!r.comm) return;
  std::lock_guard lock(mu_);
  if (!options_.enabled) return;
  Ring& ring = rings_[r.comm->global_rank];
  if (ring.ops.size() < options_.max_ops_per_rank) {
    ring.ops.push_back(r);
  } else if (!ring.ops.empty()) {
    ring.ops[ring.next] = r;
    ring.next = (ring.next + 1) % ring.ops.size();
  }
  ++ring.total;
  metrics_.add(r);
}

std::vector<int> Exports::ranks() const {
  std::lock_guard lock(mu_);
  std::vector<int> out;
  for (const auto& [rank, ring] : rings_) out.push_back(rank);
  return out;
}

std::vector<RankOps> Exports::snapshot(std::span<const int> ranks) const {
  std::lock_guard lock(mu_);
  std::vector<RankOps> out;
  for (const auto& [rank, ring] : rings_) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
    RankOps& r = out.emplace_back();
    r.global_rank = rank;
    r.ops.reserve(ring.ops.size());
    r.ops.insert(r.ops.end(), ring.ops.begin() + static_cast<ptrdiff_t>(ring.next), ring.ops.end());
    r.ops.insert(r.ops.end(), ring.ops.begin(),
                 ring.ops.begin() + static_cast<ptrdiff_t>(ring.next));
    r.dropped = ring.total - ring.ops.size();
  }
  return out;
}

std::string Exports::render(ExportFormat format, std::span<const int> ranks) const {
  switch (format) {
    case ExportFormat::kChromeTrace:
      return chrome_trace(snapshot(ranks), wall_minus_steady_ns_);
    case ExportFormat::kJsonl: {
      std::string out;
      for (const RankOps& rank : snapshot(ranks)) {
        for (const OpRecord& r : rank.ops) append_jsonl(r, out);
      }
      return out;
    }
    case ExportFormat::kPrometheus: {
      std::lock_guard lock(mu_);
      return metrics_.text(ranks);
    }
  }
  return {};
}

std::vector<std::string> Exports::write(ExportFormat format, const std::string& pattern) const {
  std::vector<std::pair<std::string, std::vector<int>>> files;
  const std::vector<int> local = ranks();
  if (pattern.find(kRankField) == std::string::npos) {
    // One file for the process's ranks (all of an in-process world's); output_path() still gives
    // each process of a multi-process job its own.
    files.emplace_back(output_path(pattern, local.empty() ? 0 : local.front()), std::vector<int>{});
  } else {
    for (int rank : local) files.emplace_back(output_path(pattern, rank), std::vector<int>{rank});
  }
  std::vector<std::string> written;
  for (const auto& [path, file_ranks] : files) {
    if (write_output_file(path, render(format, file_ranks), "trace export")) {
      written.push_back(path);
    }
  }
  return written;
}

std::vector<std::string> Exports::write_configured() const {
  const ExportOptions o = options();
  std::vector<std::string> written;
  const std::pair<ExportFormat, const std::string&> outputs[] = {
      {ExportFormat::kChromeTrace, o.chrome_path},
      {ExportFormat::kJsonl, o.jsonl_path},
      {ExportFormat::kPrometheus, o.prometheus_path}};
  for (const auto& [format, pattern] : outputs) {
    if (pattern.empty()) continue;
    for (std::string& path : write(format, pattern)) written.push_back(std::move(path));
  }
  return written;
}

}  // namespace meshrt::trace
