// The comm logger: per-op latency, size and bandwidth, summarised by mesh dim, op and message
// size, like DeepSpeed's comms logger but per group (busbw uses the size of the group the op ran
// on), without synchronising anything, and per rank (in-process ranks share a process).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "trace/labels.h"
#include "trace/tracer.h"

namespace meshrt::trace {

// What the logger records.
struct CommLoggerOptions {
  bool enabled = false;          // Master switch.
  bool verbose = false;          // One line per completed op on stderr.
  std::vector<std::string> ops;  // Only these ops ("all_reduce", ...); empty = every op.
  std::string summary_path;      // Written at exit per rank; "{rank}" becomes the global rank.
  // MESHRT_COMMS_LOG=1: each rank's summary table goes to stderr at exit, unless the program
  // asked for it (summary_table()) already.
  bool print_at_exit = false;
};

// One row of the summary: ops of one rank on one mesh dim (or communicator), of one kind, in one
// message-size bucket (size_bucket()), issued by the program or by meshrt's setup.
struct SummaryRow {
  std::string mesh_dim;  // mesh_dim_label(): the communicator's name outside any mesh ("world").
  std::string comm;
  std::string op;  // op_kind_name(kind)
  OpKind kind = OpKind::kBarrier;
  bool setup = false;  // meshrt's own ops (OpRecord::setup): split's and mesh creation's exchanges.
  int group_size = 0;
  uint64_t bucket_bytes =
      0;                   // size_bucket() of the ops: groups them; size_bucket_label() names it.
  double mean_bytes = 0;   // The ops' mean message size: what the table shows.
  uint64_t min_bytes = 0;  // The smallest and largest message of the row's ops.
  uint64_t max_bytes = 0;
  uint64_t count = 0;
  double total_ms = 0;
  double avg_ms = 0;
  double p50_ms = 0;  // Over the last kSamples ops of the row.
  double p99_ms = 0;
  double algbw_gbps = 0;  // Mean bytes per op / mean latency.
  double busbw_gbps = 0;
};

class CommLogger : public Sink {
 public:
  // Latencies kept per row for percentiles.
  static constexpr size_t kSamples = 4096;

  // The process's logger, configured from MESHRT_COMMS_LOG (1 enables), MESHRT_COMMS_LOG_VERBOSE,
  // MESHRT_COMMS_LOG_OPS (comma list) and MESHRT_COMMS_SUMMARY (path) on first use, and
  // registered as a trace sink. With a summary path it writes every rank's summary at exit.
  static CommLogger& instance();

  void configure(CommLoggerOptions options);
  CommLoggerOptions options() const;
  // Start/stop a recording window (on by default once enabled) and drop what was recorded.
  void start();
  void stop();
  void reset();

  // Rows for `global_rank`: the program's, then meshrt's setup rows, each sorted by mesh dim, op
  // and size bucket.
  std::vector<SummaryRow> summary(int global_rank) const;
  // Ranks that recorded something in this process.
  std::vector<int> ranks() const;
  // The summary as an aligned text table (mean sizes and bandwidths in adaptive units; setup rows
  // in a section of their own), and as one JSON object {"rank", "rows": [...]}.
  std::string summary_table(int global_rank) const;
  // Prints the summary table of every rank whose table nobody asked for yet to stderr.
  void print_unasked_tables() const;
  std::string summary_json(int global_rank) const;
  // Writes each rank's JSON summary to `path_pattern` with "{rank}" replaced, atomically (temp
  // file + rename). Returns the paths written.
  std::vector<std::string> write_summaries(const std::string& path_pattern) const;

  void on_enqueue(const OpRecord&) override {}
  void on_start(const OpRecord&) override {}
  void on_end(const OpRecord& record) override;

 private:
  struct Key {
    int global_rank;
    uint64_t comm_uid;
    bool setup;
    OpKind kind;
    uint64_t bucket;
    auto operator<=>(const Key&) const = default;
  };
  struct Row {
    std::shared_ptr<const CommInfo> comm;
    uint64_t count = 0;
    uint64_t total_bytes = 0;
    uint64_t min_bytes = UINT64_MAX;
    uint64_t max_bytes = 0;
    int64_t total_ns = 0;
    std::vector<int64_t> samples_ns;  // Ring of the last kSamples latencies.
  };

  bool selected(std::string_view op) const;

  mutable std::mutex mu_;
  mutable std::set<int> tables_asked_;  // Ranks whose summary_table() was called (under mu_).
  CommLoggerOptions options_;
  bool active_ = true;
  std::map<Key, Row> rows_;
};

// A byte count to three significant digits in 1024-based units: 3072 -> "3 KiB",
// 4000 -> "3.91 KiB", 64 -> "64 B".
std::string format_bytes(double bytes);
// A bandwidth given in GB/s to three significant digits in 1000-based units (nccl-tests' GB/s):
// 0.00123 -> "1.23 MB/s", 12.5 -> "12.5 GB/s"; "-" for 0 (a barrier moves no bytes).
std::string format_bandwidth(double gbps);

}  // namespace meshrt::trace
