// JSON lines of op records, one object per op, in the spirit of NCCL Inspector's JSONL but with
// every OpRecord field. Keys, always present and in this order: rank, comm, comm_uid, store_key,
// description, mesh_dim (mesh_dim_label(): "world" for the default group), backend, group_size,
// group_rank, op, dtype, reduce_op, collective_seq, p2p_seq, op_seq, is_p2p, input_count,
// output_count, bytes, size_bucket (size_bucket_label(): "2-4KiB"), root_or_peer, timeout_ms,
// created_wall_ns, enqueue_ns, start_ns, end_ns (steady clock), state, duration_us, algbw_gbps,
// busbw_gbps, scope, phase, setup (issued by meshrt itself), thread_id, caller_file, caller_line.
#pragma once

#include <string>

#include "trace/op_record.h"

namespace meshrt::trace {

// Appends `record` as one line of JSON (ending in '\n') to `out`.
void append_jsonl(const OpRecord& record, std::string& out);

}  // namespace meshrt::trace
