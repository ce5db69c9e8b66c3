// The trace exports: a Chrome trace (Perfetto), JSON lines (one per op) and a Prometheus text
// file, fed by one sink. The sink keeps each rank's last max_ops_per_rank op records (for the
// trace and the JSON lines) and Inspector-style aggregates of every op (for Prometheus), and
// formats nothing on the hot path: files are written at exit and on demand, never from the
// communicator's worker, so exporting does not change the schedule of ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "trace/chrome_trace.h"
#include "trace/prometheus_export.h"
#include "trace/tracer.h"

namespace meshrt::trace {

// The export formats.
enum class ExportFormat { kChromeTrace, kJsonl, kPrometheus };

// What is exported, and where. A path with "{rank}" gives one file per rank (the global rank);
// without it, one file with every rank this process recorded (in-process ranks share a process).
struct ExportOptions {
  bool enabled = false;              // Master switch: records ops while on.
  std::string chrome_path;           // Chrome trace JSON, written at exit; empty = none.
  std::string jsonl_path;            // JSON lines, written at exit; empty = none.
  std::string prometheus_path;       // Prometheus text file, written at exit; empty = none.
  size_t max_ops_per_rank = 100000;  // Records kept per rank; older ones are dropped (counted).
};

class Exports : public Sink {
 public:
  // The process's exports, configured by install_sinks_from_env().
  static Exports& instance();

  // Registers the sink while enabled; a configured path makes the files be written at exit.
  // A new max_ops_per_rank drops the kept records.
  void configure(ExportOptions options);
  ExportOptions options() const;
  // Drops every record and aggregate.
  void reset();

  // Ranks that recorded something in this process.
  std::vector<int> ranks() const;
  // The content of `format` for `ranks` (every recorded rank when empty).
  std::string render(ExportFormat format, std::span<const int> ranks = {}) const;
  // Writes `format` to `path_pattern` atomically, per rank when it holds "{rank}". Returns the
  // paths written; failures are reported on stderr.
  std::vector<std::string> write(ExportFormat format, const std::string& path_pattern) const;
  // Writes every format that has a configured path (what happens at exit).
  std::vector<std::string> write_configured() const;

  void on_enqueue(const OpRecord&) override {}
  void on_start(const OpRecord&) override {}
  void on_end(const OpRecord& record) override;

 private:
  Exports();

  // Kept records of one rank: a ring once full.
  struct Ring {
    std::vector<OpRecord> ops;
    size_t next = 0;  // Oldest slot once full.
    uint64_t total = 0;
  };

  std::vector<RankOps> snapshot(std::span<const int> ranks) const;

  const int64_t wall_minus_steady_ns_;
  mutable std::mutex mu_;
  ExportOptions options_;
  std::map<int, Ring> rings_;
  PrometheusMetrics metrics_;
};

}  // namespace meshrt::trace
