// A Prometheus text file (node_exporter's textfile format) under NCCL Inspector's metric names and
// labels, plus `rank` (the global rank, so files of several ranks on one node never collide) and
// `mesh_dim`. Series are per (rank, communicator, op, message-size range), as Inspector buckets
// them; values cover every completed op since the start or the last reset, not one dump interval.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "trace/op_record.h"

namespace meshrt::trace {

// Inspector's aggregates: per series the op count, the mean execution time and the geometric mean
// of busbw (ops with busbw 0, e.g. barriers, are left out of the mean). Not thread-safe.
//
// Metrics: nccl_bus_bandwidth_gbs and nccl_collective_exec_time_microseconds (gauges),
// nccl_collectives_total (counter); nccl_p2p_bus_bandwidth_gbs, nccl_p2p_exec_time_microseconds,
// nccl_p2p_total for send, recv and batch_p2p. Labels: version, slurm_job_id, node, gpu,
// comm_name, n_nodes, nranks (the group size), collective or p2p_operation ("AllReduce", "Send"),
// message_size ("1-2KB"), algo_proto (collectives: the backend that ran them), rank, mesh_dim.
class PrometheusMetrics {
 public:
  // Adds a completed op; failed ops are ignored (their time says nothing about bandwidth).
  void add(const OpRecord& record);
  void reset();
  // The exposition text for `ranks` (every rank when empty): each metric's HELP and TYPE lines
  // followed by all its samples.
  std::string text(std::span<const int> ranks) const;

 private:
  struct Key {
    int global_rank;
    uint64_t comm_uid;
    std::string_view op;  // Static storage.
    uint64_t size_range_bytes;
    auto operator<=>(const Key&) const = default;
  };
  struct Series {
    std::shared_ptr<const CommInfo> comm;
    bool is_p2p = false;
    uint64_t count = 0;
    double exec_time_sum_us = 0;
    double busbw_log_sum = 0;  // Sum of ln(busbw) over ops with busbw > 0.
    uint64_t busbw_count = 0;
  };

  std::map<Key, Series> series_;
};

// Inspector's message_size label: the size in its largest 1024-based unit, as the range between
// the whole part and the next integer: 4000 -> "3-4KB", 8 MiB -> "8-9MB", 0 -> "0B".
std::string message_size_range(uint64_t bytes);
// The lower bound in bytes of message_size_range(bytes): 4000 -> 3072.
uint64_t message_size_range_bytes(uint64_t bytes);
// NCCL's spelling of an op: "all_reduce" -> "AllReduce", "send" -> "Send".
std::string nccl_op_name(std::string_view op);
// A label value escaped for the text format: backslash, double quote and newline.
std::string escape_label_value(std::string_view value);

}  // namespace meshrt::trace
