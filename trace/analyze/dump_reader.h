// Reading flight-recorder dumps (docs/flight-recorder.md) into the compact form the analyzer
// works on: meshrt JSON dumps and PyTorch FR pickle dumps, one file per rank, found by prefix.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshrt::trace {

// Input the analyzer cannot use (unreadable, corrupt or inconsistent dumps, bad arguments);
// what() names the file or the ranks concerned.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How far an op got when the dump was taken (a failed op stays scheduled or started).
enum class EntryState : uint8_t { kScheduled, kStarted, kCompleted };

// "scheduled", "started", "completed".
std::string_view entry_state_name(EntryState state);

// The most groups one dump may list (pg_config and groups only entries name): real dumps have
// a few per mesh dim; each costs a few hundred bytes from a dozen bytes of input.
inline constexpr size_t kMaxGroupsPerDump = size_t{1} << 16;

// The most distinct strings one dump may hold. A real dump has a few per entry at most (its
// op, dtype, caller, scope), thousands in all; each costs ~130 bytes from a few of input.
inline constexpr size_t kMaxStringsPerDump = size_t{1} << 20;

// The largest world a dump may claim. Ranks and world sizes are checked against it (and against
// the dump's own world_size) before anything is sized by them: dumps are untrusted input.
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;

// A run of RankDump::pool.
struct PoolSpan {
  uint32_t offset = 0;
  uint32_t size = 0;
};

// One record, reduced to what matching needs. Strings are ids into the dump's symbols.
struct DumpEntry {
  int64_t record_id = 0;
  int64_t collective_seq = 0;
  int64_t p2p_seq = 0;
  int64_t channel_seq = 0;  // p2p_channel_seq; 0 when the dump has none (PyTorch).
  int64_t time_created_ns = 0;
  uint32_t group = 0;   // Index into RankDump::groups.
  uint32_t type = 0;    // "all_reduce", "send", "coalesced", ... (profiling_name's op).
  uint32_t caller = 0;  // "file:line" (meshrt) or the innermost frame (PyTorch); 0 = none.
  uint32_t scope = 0;
  PoolSpan input_sizes;  // Shapes as [ndim, d0, d1, ...] one after the other.
  PoolSpan output_sizes;
  PoolSpan input_dtypes;  // Symbol ids.
  PoolSpan output_dtypes;
  int32_t peer = -1;  // p2p: the peer's global rank; -1 otherwise or for an any-source recv.
  EntryState state = EntryState::kScheduled;
  bool is_p2p = false;
  bool any_source = false;  // A recv from any source ("recv 1<-?").
};

// A process group as one rank's pg_config describes it.
struct DumpGroup {
  std::string name;
  std::string desc;
  std::vector<int> ranks;  // Global ranks, as listed.
  std::optional<std::string> mesh_dim;
  int64_t epoch = 0;  // meshrt's repair epoch (docs/repair.md); 0 in PyTorch's dumps.
};

// One rank's dump.
struct RankDump {
  int rank = -1;  // From the file name.
  std::string path;
  std::string version;
  std::optional<int64_t> meshrt_dump_version;  // Absent in PyTorch dumps.
  std::optional<int64_t> world_size;
  int64_t records_dropped = -1;  // -1: the dump does not say (PyTorch).
  // Some entry was seen to start (state "started" or a start time): this rank's ops go
  // scheduled -> started -> completed, so "scheduled" means never started. Without start events
  // (NCCL untimed) an op goes from "scheduled" straight to "completed", running or not.
  bool records_starts = false;
  std::vector<DumpGroup> groups;
  std::vector<std::string> symbols;  // symbols[0] is "".
  std::vector<int64_t> pool;
  std::vector<DumpEntry> entries;  // Oldest first.
  // The main thread's stack from meshrt's `meshrt_threads`, formatted for a verdict
  // ("run_rank (train.cc:88) <- main (train.cc:120)", at most 8 frames); empty when absent.
  std::string main_stack;

  std::span<const int64_t> span(PoolSpan s) const { return {pool.data() + s.offset, s.size}; }
  // The ring dropped records: entries older than the first one were lost.
  bool wrapped() const;
};

// A dump file and the rank its name gives.
struct DumpFile {
  std::filesystem::path path;
  int rank = -1;
};

// The dump files under `dir` (recursively): names `prefix` + rank. An empty prefix is inferred
// as torchfrtrace does (the part before the trailing digits, one prefix common to all files);
// writers' temporary files (`*.tmp.<pid>`) are ignored. Sorted by rank. Throws InputError.
std::vector<DumpFile> find_dump_files(const std::filesystem::path& dir, const std::string& prefix);

// Parses one dump (JSON, or pickle when it starts with the PROTO opcode). Throws InputError.
RankDump parse_dump(std::string_view bytes, int rank);

// Why the first bytes of a file cannot start a dump (neither a JSON object nor a pickle), or
// "" when they can; `head` is the file's start (64 bytes are enough), or the whole file.
std::string sniff_dump_format(std::string_view head, bool whole_file);

// How many bytes of dumps the analyzer reads: a file's parse takes a multiple of its size
// (docs/reliability.md measures it), so the sizes are checked before anything is read.
struct InputLimits {
  uint64_t file_bytes = uint64_t{256} << 20;  // One dump file (meshtrace --max-input-mib).
  uint64_t total_bytes = uint64_t{8} << 30;   // All of them (--max-total-input-mib).
};

// Reads and parses the files on up to `threads` threads (0: one per core). Throws InputError
// naming the file of the lowest rank that failed, or the file or total over `limits`.
std::vector<RankDump> read_dumps(const std::vector<DumpFile>& files, unsigned threads = 0,
                                 const InputLimits& limits = {});

}  // namespace meshrt::trace
