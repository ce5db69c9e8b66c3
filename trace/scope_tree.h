// The scope tree: collectives per user scope (like PyTorch's CommDebugMode), with bytes and time
// per mesh dim, per rank. Counts are cumulative up the tree. Noise levels: 0 counts; 1 adds each
// op's dtype, element counts and mesh dim; 2 adds bytes and time per op; 3 adds every record field.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tracer.h"

namespace meshrt::trace {

// Counts every op that ends (failed ones and meshrt's setup ops included) under the scope it was
// enqueued in, per global rank of this process. Thread-safe; off until enabled.
class ScopeTree : public Sink {
 public:
  // Ops kept per rank for noise levels 1-3; counts and sums are never capped.
  static constexpr size_t kMaxOpsPerRank = 100000;

  // The process's scope tree (never destroyed); registered as a sink by enable().
  static ScopeTree& instance();
  // Enables instance() and writes each rank's JSON (noise level 0) to output_path(pattern, rank)
  // at exit ("{rank}" in `pattern` is replaced; MESHRT_SCOPE_TREE, via install_sinks_from_env()).
  void write_at_exit(std::string pattern);
  // As write_at_exit(), each rank's tree as the self-contained HTML viewer (scope_tree_html.h;
  // MESHRT_SCOPE_TREE_HTML).
  void write_html_at_exit(std::string pattern);
  // Starts counting ops that end from now on. Idempotent.
  void enable();
  // Stops counting; what was counted is kept.
  void disable();
  // Forgets what was counted; enabled or not stays as it was.
  void reset();

  // Global ranks that recorded something in this process, ascending.
  std::vector<int> ranks() const;
  // The tree of `global_rank` as text, indented by depth; `color` adds ANSI colours (use it only
  // on a terminal). A rank with nothing recorded gets the bare root.
  std::string table(int global_rank, int noise_level, bool color) const;
  // The tree as JSON: {"rank", "noise_level", "root": {"scope", "name", "phase", "collectives":
  // {op: cumulative count}, "self": {op: count}, "dims": {dim: {"count", "bytes", "time_ms"}},
  // "ops": [...] (noise >= 1), "children": [...]}}.
  std::string json(int global_rank, int noise_level) const;
  // Writes table (no colour) or JSON atomically to `path`; false on failure.
  bool write(const std::string& path, int global_rank, int noise_level, bool as_json) const;

  // Sink: ignored.
  void on_enqueue(const OpRecord&) override {}
  // Sink: ignored.
  void on_start(const OpRecord&) override {}
  // Sink: counts `record` under its scope and mesh dim while enabled.
  void on_end(const OpRecord& record) override;

 private:
  // Sets the exit pattern `which` and registers write_exit_files() once.
  void write_at_exit(std::string ScopeTree::*which, std::string pattern);
  // At exit: every rank's tree to the JSON and HTML patterns that are set.
  static void write_exit_files();
  struct DimStats {
    uint64_t count = 0;
    uint64_t bytes = 0;
    int64_t time_ns = 0;
  };
  struct NodeStats {
    std::map<std::string, uint64_t> self_counts;  // op -> count in this scope itself
    std::map<std::string, DimStats> dims;         // mesh dim (or comm name) -> sums
  };
  struct RankData {
    std::map<const ScopeNode*, NodeStats> nodes;
    std::vector<OpRecord> ops;
  };

  mutable std::mutex mu_;
  bool enabled_ = false;
  std::string exit_pattern_;       // MESHRT_SCOPE_TREE: where write_at_exit() writes.
  std::string exit_html_pattern_;  // MESHRT_SCOPE_TREE_HTML: where write_html_at_exit() writes.
  std::map<int, RankData> ranks_;
};

}  // namespace meshrt::trace
