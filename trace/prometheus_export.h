// A Prometheus text file (node_exporter's textfile format) that `promtool check metrics` accepts,
// named after NCCL Inspector's metrics and labels, plus `rank` (the global rank, so files of
// several ranks on one node never collide) and `mesh_dim`. Series are per (rank, communicator,
// op, message-size bucket); values cover every completed op since the start or the last reset,
// not one dump interval.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "trace/op_record.h"

namespace meshrt::trace {

// Upper bounds (`le`, seconds) of the execution-time histograms' buckets, +Inf aside: 1, 2.5 and
// 5 per decade from 10 us to 50 s.
inline constexpr std::array<double, 21> kExecTimeBucketsSeconds = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1,    0.25, 0.5,  1,      2.5,  5,    10,     25,   50};

// Inspector's aggregates: per series the op count, an execution-time histogram and the geometric
// mean of busbw (ops with busbw 0, e.g. barriers, are left out of the mean). Not thread-safe.
//
// Metrics, in base units as promtool wants them (Inspector's names differ in the unit only):
// nccl_bus_bandwidth_bytes_per_second (gauge; Inspector: nccl_bus_bandwidth_gbs, GB/s),
// nccl_collective_exec_time_seconds (histogram; Inspector: the mean as the gauge
// nccl_collective_exec_time_microseconds), nccl_collectives_total (counter); the same three as
// nccl_p2p_bus_bandwidth_bytes_per_second, nccl_p2p_exec_time_seconds and nccl_p2p_total for
// send, recv and batch_p2p. Labels: version, slurm_job_id, node, gpu, comm_name, n_nodes, nranks
// (the group size), collective or p2p_operation ("AllReduce", "Send"), message_size (the
// size_bucket_label(), "2-4KiB", where Inspector writes "3-4KB"), algo_proto (collectives: the
// backend that ran them), rank, mesh_dim (mesh_dim_label(): "world" for the default group).
class PrometheusMetrics {
 public:
  // Adds a completed op; failed ops are ignored (their time says nothing about bandwidth).
  void add(const OpRecord& record);
  // Drops every series.
  void reset();
  // The exposition text for `ranks` (every rank when empty): each metric's HELP and TYPE lines
  // followed by all its samples.
  std::string text(std::span<const int> ranks) const;

 private:
  struct Key {
    int global_rank;
    uint64_t comm_uid;
    std::string_view op;  // Static storage.
    uint64_t bucket_bytes;
    auto operator<=>(const Key&) const = default;
  };
  struct Series {
    std::shared_ptr<const CommInfo> comm;
    bool is_p2p = false;
    uint64_t count = 0;
    double exec_time_sum_seconds = 0;
    // Ops per execution-time bucket (not cumulative); the last one is +Inf.
    std::array<uint64_t, kExecTimeBucketsSeconds.size() + 1> exec_time_buckets{};
    double busbw_log_sum = 0;  // Sum of ln(busbw in bytes/s) over ops with busbw > 0.
    uint64_t busbw_count = 0;
  };

  std::map<Key, Series> series_;
};

// NCCL's spelling of an op: "all_reduce" -> "AllReduce", "send" -> "Send".
std::string nccl_op_name(std::string_view op);
// A label value escaped for the text format: backslash, double quote and newline.
std::string escape_label_value(std::string_view value);

}  // namespace meshrt::trace
