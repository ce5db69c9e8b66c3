// Chrome trace JSON (opens in Perfetto and chrome://tracing) of op records: one process per rank,
// one thread (track) per mesh dim (mesh_dim_label(): "world" for the default group, a
// communicator's name outside any mesh), and one complete ("X") event per op, named by the op,
// category the track, with args comm, mesh_dim, seq (the collective or p2p sequence number),
// op_seq, bytes, size_bucket (size_bucket_label()), dtype, reduce_op, root_or_peer, group_size,
// scope, phase, setup (issued by meshrt itself), state, queued_us, algbw_gbps, busbw_gbps, caller.
// Above them, a "user scopes" track per rank (one per thread that issued ops) holds the
// trace::Scope spans the ops were issued in ("MLP.fc2 / forward", category "scope", args scope,
// phase, ops), nested as the scopes were and enclosing their ops.
//
// Times are microseconds of wall-clock time since otherData.origin_wall_ns (a whole second), so
// traces written by different processes line up when merged; within a process, steady-clock times
// map to the wall clock by one offset, so consecutive ops on a track never overlap. Every event
// has ph, ts, pid and tid (metadata at ts 0).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trace/op_record.h"

namespace meshrt::trace {

// The ops of one rank, oldest first.
struct RankOps {
  int global_rank = -1;
  std::vector<OpRecord> ops;
  uint64_t dropped = 0;  // Older ops no longer kept (reported in otherData.dropped_ops).
};

// The trace of `ranks`; `wall_minus_steady_ns` maps the records' steady-clock times to the wall
// clock. Every rank gets the same thread id for the same track name.
std::string chrome_trace(std::span<const RankOps> ranks, int64_t wall_minus_steady_ns);

// Merges Chrome trace files (per-rank files written by meshrt, or any with distinct process ids)
// into one trace: events shifted to the earliest origin_wall_ns, thread ids renumbered so that a
// track name has one id in every process. Throws std::runtime_error naming the file that cannot
// be read or parsed, or two files that hold the same process (rank).
std::string merge_chrome_traces(std::span<const std::string> paths);

}  // namespace meshrt::trace
