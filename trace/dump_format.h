// The flight-recorder dump format in code (docs/flight-recorder.md is its contract): the schema
// versions and every key name. The recorder that writes dumps (flight_recorder.cc) and the
// analyzer that reads them (analyze/dump_reader.cc) both spell keys through these constants, so
// that a renamed or misspelt key breaks the build instead of silently splitting the two.
#pragma once

#include <string_view>

namespace meshrt::trace::dump_format {

// PyTorch Flight Recorder's schema, which every dump mirrors (top-level `version`).
inline constexpr std::string_view kSchemaVersion = "2.10";
// meshrt's own schema version (`meshrt_dump_version`): bumped on any change to the keys below.
// The analyzer reads dumps up to this version.
// 2: top-level `device`, entries' `cuda_graph_id`.
inline constexpr int kMeshrtDumpVersion = 2;

// Top level.
inline constexpr std::string_view kVersion = "version";
inline constexpr std::string_view kMeshrtDumpVersionKey = "meshrt_dump_version";
inline constexpr std::string_view kProducer = "producer";
inline constexpr std::string_view kCommLibVersion = "comm_lib_version";
inline constexpr std::string_view kRank = "rank";  // Also a key of `trigger`.
inline constexpr std::string_view kWorldSize = "world_size";
inline constexpr std::string_view kHost = "host";
inline constexpr std::string_view kPid = "pid";
// The process's device (PCI bus id of its CUDA device), null for CPU-only processes.
inline constexpr std::string_view kDevice = "device";
inline constexpr std::string_view kRunId = "run_id";
inline constexpr std::string_view kDumpReason = "dump_reason";
inline constexpr std::string_view kTrigger = "trigger";
inline constexpr std::string_view kClock = "clock";
inline constexpr std::string_view kBufferSize = "buffer_size";
inline constexpr std::string_view kRecordsDropped = "records_dropped";
inline constexpr std::string_view kMeshDims = "mesh_dims";
inline constexpr std::string_view kPgConfig = "pg_config";
inline constexpr std::string_view kPgStatus = "pg_status";
// meshrt's: the repair epochs this dump's communicators belong to (CommInfo::epoch), ascending:
// [{epoch, ranks: the global ranks of its communicators, groups: their names}].
inline constexpr std::string_view kEpochs = "epochs";
// meshrt's: every thread's stack at the dump (trace/thread_stacks.h), [{tid, name, main,
// answered, frames: [{function, file, line}]}]; absent from crash dumps (written by a child that
// has one thread).
inline constexpr std::string_view kMeshrtThreads = "meshrt_threads";
inline constexpr std::string_view kEntries = "entries";

// `trigger` (with kRank): the op that caused the dump.
inline constexpr std::string_view kGroup = "group";  // Also a key of `mesh_dims` values.
inline constexpr std::string_view kSeq = "seq";
inline constexpr std::string_view kOp = "op";
inline constexpr std::string_view kDetail = "detail";

// `clock`.
inline constexpr std::string_view kWallNs = "wall_ns";
inline constexpr std::string_view kSteadyNs = "steady_ns";

// `pg_config` values (with kPgId and kMeshDim, also entry keys).
inline constexpr std::string_view kName = "name";  // Also a key of `frames`.
inline constexpr std::string_view kDesc = "desc";
inline constexpr std::string_view kRanks = "ranks";
inline constexpr std::string_view kStoreKey = "store_key";
inline constexpr std::string_view kEpoch = "epoch";  // Also an entry key (meshrt's).
inline constexpr std::string_view kGroups = "groups";

// `pg_status` values.
inline constexpr std::string_view kLastEnqueuedCollective = "last_enqueued_collective";
inline constexpr std::string_view kLastStartedCollective = "last_started_collective";
inline constexpr std::string_view kLastCompletedCollective = "last_completed_collective";

// Entries: PyTorch's keys, then meshrt's.
inline constexpr std::string_view kRecordId = "record_id";
inline constexpr std::string_view kPgId = "pg_id";
inline constexpr std::string_view kProcessGroup = "process_group";
inline constexpr std::string_view kThreadId = "thread_id";
inline constexpr std::string_view kThreadName = "thread_name";
inline constexpr std::string_view kCollectiveSeqId = "collective_seq_id";
inline constexpr std::string_view kP2pSeqId = "p2p_seq_id";
inline constexpr std::string_view kOpId = "op_id";
inline constexpr std::string_view kProfilingName = "profiling_name";
inline constexpr std::string_view kTimeCreatedNs = "time_created_ns";
inline constexpr std::string_view kDurationMs = "duration_ms";
inline constexpr std::string_view kInputSizes = "input_sizes";
inline constexpr std::string_view kOutputSizes = "output_sizes";
inline constexpr std::string_view kInputDtypes = "input_dtypes";
inline constexpr std::string_view kOutputDtypes = "output_dtypes";
inline constexpr std::string_view kState = "state";
inline constexpr std::string_view kTimeDiscoveredStartedNs = "time_discovered_started_ns";
inline constexpr std::string_view kTimeDiscoveredCompletedNs = "time_discovered_completed_ns";
inline constexpr std::string_view kRetired = "retired";
inline constexpr std::string_view kTimeoutMs = "timeout_ms";
inline constexpr std::string_view kIsP2p = "is_p2p";
inline constexpr std::string_view kFrames = "frames";  // Pickle, or MESHRT_TRACE_STACKS.
inline constexpr std::string_view kMeshDim = "mesh_dim";
inline constexpr std::string_view kGroupRanks = "group_ranks";  // Also a key of `mesh_dims`.
inline constexpr std::string_view kGroupRank = "group_rank";
// The CUDA graph capture id of an op captured into a graph (NCCL), null otherwise.
inline constexpr std::string_view kCudaGraphId = "cuda_graph_id";
inline constexpr std::string_view kScope = "scope";
inline constexpr std::string_view kPeer = "peer";
inline constexpr std::string_view kRoot = "root";
inline constexpr std::string_view kP2pChannelSeq = "p2p_channel_seq";
inline constexpr std::string_view kReduceOp = "reduce_op";
// How the op ran: "library", "slots", "recursive_doubling", "ring", "none" (meshrt only).
inline constexpr std::string_view kAlgorithm = "algorithm";
inline constexpr std::string_view kError = "error";
inline constexpr std::string_view kCaller = "caller";
inline constexpr std::string_view kInputStats = "input_stats";
inline constexpr std::string_view kOutputStats = "output_stats";

// `input_stats` and `output_stats`.
inline constexpr std::string_view kCount = "count";
inline constexpr std::string_view kMin = "min";
inline constexpr std::string_view kMax = "max";
inline constexpr std::string_view kMean = "mean";
inline constexpr std::string_view kNan = "nan";
inline constexpr std::string_view kInf = "inf";

// `frames` (with kName): PyTorch's call stack, innermost first.
inline constexpr std::string_view kFilename = "filename";
inline constexpr std::string_view kLine = "line";

}  // namespace meshrt::trace::dump_format
