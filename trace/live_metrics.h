// Live metrics (docs/diagnosis.md, "A live view"): each rank keeps cheap running totals of its
// completed ops per (communicator, op, message-size bucket), which its progress publisher adds to
// the record it writes to the job's store once a period; the status server merges every rank's
// totals with the live board's gauges into one Prometheus exposition at "/metrics". Totals only
// grow while the process lives, so the counters they become never go backwards mid-job.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trace/prometheus_export.h"
#include "trace/spin_lock.h"
#include "trace/tracer.h"

namespace meshrt::trace {

// Sink of the live totals. Registered by enable() (the watchdog does so when it has a job store
// to publish progress to); costs an op one uncontended spin lock and a small map update in
// on_end (no floating-point maths beyond a bucket search: bandwidth is derived when published).
class LiveMetrics : public Sink {
 public:
  // The process's instance (leaked: worker threads may deliver while statics are destroyed).
  static LiveMetrics& instance();
  LiveMetrics() = default;

  // Registers the sink once; later calls do nothing.
  void enable();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // A start time is used when the backend measured one; ops without one are counted (ops,
  // bytes) but not timed, so device backends are not made to record start events for this.
  bool needs_timing() const override { return false; }
  void on_enqueue(const OpRecord&) override {}
  void on_start(const OpRecord&) override {}
  void on_end(const OpRecord& record) override;

  // Global rank `rank`'s totals as a JSON array, one object per (communicator name, op, size
  // bucket): comm, mesh_dim (mesh_dim_label()), nranks, backend, op, p2p, size_bytes (the
  // bucket's floor), ops, bytes, timed_ops, exec_seconds, exec_buckets (non-cumulative counts per
  // kExecTimeBucketsSeconds bound, +Inf last) and busbw_bytes_per_second (the timed ops' bus
  // bytes over their execution time, nccl-tests' factor on the group; 0 for ops that move none).
  // Communicators of the same name (one destroyed, one re-created) are summed, so a series never
  // splits. Called off the op path.
  nlohmann::json rank_json(int rank) const;
  // Drops every total (tests).
  void reset();

 private:
  struct Key {
    int global_rank;
    uint64_t comm_uid;
    OpKind kind;
    uint64_t bucket_bytes;
    auto operator<=>(const Key&) const = default;
  };
  struct Totals {
    std::shared_ptr<const CommInfo> comm;
    std::string_view op;  // Static storage.
    OpKind kind = OpKind::kBarrier;
    bool is_p2p = false;
    uint64_t ops = 0;
    uint64_t bytes = 0;
    uint64_t timed_ops = 0;
    double exec_seconds = 0;
    std::array<uint64_t, kExecTimeBucketsSeconds.size() + 1> exec_buckets{};
    uint64_t timed_bytes = 0;  // Bytes of the timed ops: busbw is derived off the op path.
  };
  // Sharded by communicator, so that the in-process backend's rank threads rarely meet on a lock.
  struct Shard {
    mutable SpinLock lock;
    std::map<Key, Totals> totals;
    // The entry of the shard's last op: a loop of one op finds it without the map's search (a
    // map's nodes stay where they are until reset()).
    Key last_key{};
    Totals* last = nullptr;
  };
  static constexpr size_t kShards = 16;

  std::atomic<bool> enabled_{false};
  std::array<Shard, kShards> shards_;
};

// A Prometheus text exposition built from parts: each family's HELP and TYPE lines come once,
// followed by all of its samples, however many sources add to it (Prometheus rejects a scrape
// that repeats a family).
class Exposition {
 public:
  // A sample's labels, in order; values are escaped when rendered.
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Declares a family; declaring it again changes nothing.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // Adds a sample of family `name` (declared before), written as name + suffix ("_bucket",
  // "_sum", "_count" for histograms, "" otherwise).
  void sample(std::string_view name, std::string_view suffix, const Labels& labels, double value);
  // The exposition text.
  std::string text() const;

 private:
  struct Family {
    std::string name;
    std::string type;
    std::string help;
    std::string samples;  // Rendered sample lines.
  };
  std::vector<Family> families_;  // In order of declaration.
};

// Adds one rank's totals (LiveMetrics::rank_json(), as published) to `out`: meshrt_ops_total,
// meshrt_bytes_total, meshrt_op_exec_time_seconds (histogram) and
// meshrt_bus_bandwidth_bytes_per_second (only for ops that move bus bytes), labelled rank, comm,
// mesh_dim, op and message_size.
// Malformed entries are skipped.
void add_live_totals(Exposition& out, int rank, const nlohmann::json& totals);

}  // namespace meshrt::trace
