// Flight-recorder dumps for the analyzer's tests and benchmark, written as the contract
// (docs/flight-recorder.md) says meshrt writes them, from a simulated job in which each rank
// numbers its own ops the way meshrt does; tests then make ranks misbehave.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace meshrt::testing {

// A group as pg_config lists it.
struct FrGroup {
  std::string name;  // "mesh0/tp"
  std::string desc;  // "mesh_tp"
  std::vector<int> ranks;
  std::optional<std::string> mesh_dim;
};

// One record in the contract's terms.
struct FrEntry {
  std::string group;  // An FrGroup name of the dump.
  std::string type;   // "all_reduce", "send", "coalesced", ...
  std::string meta;   // profiling_name after the type: "0->1" (group-local ranks).
  int64_t collective_seq = 0;
  int64_t p2p_seq = 0;
  int64_t op_id = 0;
  std::vector<std::vector<int64_t>> input_sizes;
  std::vector<std::vector<int64_t>> output_sizes;
  std::vector<std::string> input_dtypes;
  std::vector<std::string> output_dtypes;
  std::string state = "completed";
  bool is_p2p = false;
  int peer = -1;  // Global rank.
  int root = -1;
  int64_t channel_seq = 0;
  int64_t time_created_ns = 0;
  // "file:line" of the call, "" for none; unset: "train.cc:<100 + the entry's index % 7>".
  std::optional<std::string> caller;
};

// One rank's dump.
struct FrDump {
  int rank = 0;
  int world_size = 0;
  std::string version = "2.10";
  int64_t meshrt_dump_version = 1;
  int64_t first_record_id = 0;
  int64_t records_dropped = 0;
  // The rank sees its ops start: false writes no start times and no "started" state, as an
  // untimed NCCL rank.
  bool records_starts = true;
  std::vector<FrGroup> groups;
  std::vector<FrEntry> entries;
};

// The dump as meshrt's JSON (one line per entry).
std::string to_json(const FrDump& dump);

// A simulated job: calls append records to the calling rank's dump with the sequence numbers
// meshrt would give them (per group collective_seq/p2p_seq/op_id, per channel p2p_channel_seq)
// and a shared clock, so that skipping or changing one rank's call looks as it would in a run.
class FrJob {
 public:
  explicit FrJob(int world_size);

  // Registers a group with every member's pg_config.
  void add_group(const FrGroup& group);
  // `rank` calls `type` on `numel` elements per rank (shapes follow the op: all_gather's output
  // is numel x group size, ...). Returns the record for adjustments.
  FrEntry& call(int rank, const std::string& group, const std::string& type, int64_t numel,
                const std::string& state = "completed", const std::string& dtype = "Float");
  // Every member of `group` calls it.
  void collective(const std::string& group, const std::string& type, int64_t numel,
                  const std::string& state = "completed");
  // A lone send/recv between global ranks.
  FrEntry& send(int rank, const std::string& group, int dst, int64_t numel,
                const std::string& state = "completed");
  FrEntry& recv(int rank, const std::string& group, int src, int64_t numel,
                const std::string& state = "completed");
  // A coalesced group on `rank`: each member op, then the closing entry with `state`.
  void coalesced(int rank, const std::string& group,
                 const std::vector<std::pair<std::string, int64_t>>& ops,
                 const std::string& state = "completed");

  // Keeps only the last `n` records of `rank`, as a ring of that capacity would.
  void keep_last(int rank, size_t n);
  FrDump& dump(int rank) { return dumps_[rank]; }
  // Writes `prefix<rank>` for each rank (all when `ranks` is empty) into `dir`.
  void write(const std::filesystem::path& dir, const std::string& prefix = "fr_",
             const std::vector<int>& ranks = {}) const;

 private:
  FrEntry& p2p(int rank, const std::string& group, bool is_send, int peer, int64_t numel,
               const std::string& state);
  FrEntry& append(int rank, const std::string& group, FrEntry entry);
  const FrGroup& group_of(int rank, const std::string& name) const;
  int local_rank(const FrGroup& group, int global) const;

  std::vector<FrDump> dumps_;
  int64_t clock_ns_ = 1'700'000'000'000'000'000;
  std::map<std::tuple<int, std::string>, int64_t> collective_seq_, p2p_seq_, op_id_;
  std::map<std::tuple<int, std::string, bool, int>, int64_t> channel_seq_;
};

// A dp x tp mesh (rank = d * tp + t): groups "world", "mesh0/tp" (dim tp) and "mesh0/dp" (dim dp).
FrJob dp_tp_job(int dp, int tp);

}  // namespace meshrt::testing
