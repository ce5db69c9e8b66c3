// Stragglers: which ranks arrive late at collectives, and how long the others wait for them.
// A sink keeps each rank's last completed collectives as compact samples (communicator, sequence
// number, arrival and end wall times). The analysis matches samples across ranks by
// (communicator, collective_seq) without running a collective of its own, so ranks that ran
// different numbers of ops still get a report: an instance that some member did not record is
// listed as incomplete. Ranks of other processes send their samples through the job's store
// (runtime/straggler_exchange.h); in-process worlds are analysed in place (local_report()).
//
// Definitions, per op instance (communicator, seq) that every member recorded:
//   arrival     the wall time the rank called the op (its enqueue);
//   start skew  latest arrival - earliest arrival;
//   wait        latest arrival - own arrival: how long the rank waited for the slowest;
//   last        the member that arrived latest (lowest rank on a tie), when the skew is > 0;
//   lateness    for each rank, the sum of the skews of the instances where it was last: the time
//               the others waited for it. Top late ranks rank by lateness.
//
// JSON report (StragglerReport::json()), times in ms:
//   ranks_reported, missing_ranks  ranks analysed; ranks whose samples never arrived
//   hosts, clock                   distinct hosts; the caveat on comparing their wall clocks
//   matched_ops, incomplete_ops, mismatched_ops   instances every member recorded; that some
//                                  member did not record (fewer ops, or its ring wrapped); whose
//                                  members recorded different ops (desynchronised)
//   dims[]     per mesh dim (the communicator's name outside a mesh): dim, ops, incomplete_ops,
//              skew_ms {min, mean, p50, max}, max_skew {comm, seq, op, last_rank, skew_ms},
//              wait_ms_min and wait_ms_max {rank, ms} (the members that waited least and most in
//              total), most_often_last {rank, times}, top_late[] (as below, within the dim)
//   top_late[] the top-k ranks by lateness: {rank, lateness_ms, times_last}
//   ranks[]    per rank: rank, samples, dropped (overwritten in its ring), ops (matched
//              instances), comm_ms (arrival to end, summed), wait_ms, times_last, lateness_ms
//   incomplete[]  the first kMaxListedIncomplete incomplete instances: comm, dim, seq, op,
//              missing_ranks
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trace/tracer.h"

namespace meshrt::trace {

// A communicator as the analysis identifies it: the same on every member.
struct StragglerGroup {
  std::string store_key;     // e.g. "world/split1.c0".
  std::string name;          // e.g. "mesh0/tp".
  std::string mesh_dim;      // Empty outside a mesh.
  std::vector<int> members;  // Global ranks.
};

// One completed collective of one rank: plain data, copied into a ring without allocating.
struct StragglerSample {
  uint32_t group = 0;           // Index into RankSamples::groups.
  std::array<char, 16> op{};    // The op's name, NUL-terminated (the longest is 14 characters).
  uint64_t seq = 0;             // The communicator's collective_seq.
  uint64_t bytes = 0;           // Message size S (nccl-tests).
  int64_t arrival_wall_ns = 0;  // When the rank called the op (system clock).
  int64_t end_wall_ns = 0;      // When the op completed (system clock).

  std::string_view op_name() const { return op.data(); }
};

// What one rank recorded: the input of the analysis.
struct RankSamples {
  int rank = -1;  // Global rank.
  std::string host;
  uint64_t dropped = 0;  // Samples overwritten in the ring before this snapshot.
  std::vector<StragglerGroup> groups;
  std::vector<StragglerSample> samples;  // Oldest first.
};

// Totals of one rank, over every dim or within one.
struct RankStragglerStats {
  int rank = -1;
  uint64_t samples = 0;  // Overall totals only: samples analysed and dropped.
  uint64_t dropped = 0;
  uint64_t ops = 0;  // Matched instances the rank was a member of.
  double comm_ms = 0;
  double wait_ms = 0;
  uint64_t times_last = 0;
  double lateness_ms = 0;
};

// The instance with the largest skew of a dim.
struct SkewAt {
  std::string comm;
  uint64_t seq = 0;
  std::string op;
  int last_rank = -1;
  double skew_ms = 0;
};

// Statistics of one mesh dim (or communicator outside a mesh).
struct DimStragglerStats {
  std::string dim;
  uint64_t ops = 0;  // Matched instances.
  uint64_t incomplete_ops = 0;
  double skew_min_ms = 0;
  double skew_mean_ms = 0;
  double skew_p50_ms = 0;
  double skew_max_ms = 0;
  SkewAt max_skew;
  int wait_min_rank = -1;  // The member that waited least in total (often the straggler).
  double wait_min_ms = 0;
  int wait_max_rank = -1;
  double wait_max_ms = 0;
  int most_often_last_rank = -1;
  uint64_t most_often_last_times = 0;
  std::vector<RankStragglerStats> top_late;
};

// An instance that some member did not record.
struct IncompleteOp {
  std::string comm;
  std::string dim;
  uint64_t seq = 0;
  std::string op;
  std::vector<int> missing_ranks;
};

// The result of analyze_stragglers().
struct StragglerReport {
  static constexpr size_t kMaxListedIncomplete = 32;

  int ranks_reported = 0;
  std::vector<int> missing_ranks;  // Filled by the store exchange: ranks that sent nothing.
  int hosts = 0;
  std::string clock;  // The caveat on the clocks compared.
  uint64_t matched_ops = 0;
  uint64_t incomplete_ops = 0;
  uint64_t mismatched_ops = 0;
  std::vector<DimStragglerStats> dims;       // By dim name.
  std::vector<RankStragglerStats> top_late;  // Most lateness first; only ranks that were last.
  std::vector<RankStragglerStats> ranks;     // By rank; every rank analysed.
  std::vector<IncompleteOp> incomplete;      // The first kMaxListedIncomplete, by (comm, seq).

  // An aligned text table, and the JSON document described at the top of this file.
  std::string text() const;
  std::string json() const;
};

// Matches `ranks`' samples by (communicator, seq) and computes skews, waits and lateness; lists
// at most `top_k` late ranks overall and per dim. Pure: reads only its arguments. A rank holding
// two samples of one instance (two worlds with the same identity in one process) counts the later.
StragglerReport analyze_stragglers(std::span<const RankSamples> ranks, size_t top_k);

// What the sink records and reports.
struct StragglerOptions {
  bool enabled = false;        // Records completed collectives while on.
  size_t ops_per_rank = 4096;  // Samples kept per rank (a ring); older ones are dropped.
  size_t top_k = 5;            // Late ranks listed overall and per dim.
  std::string report_path;     // The JSON report, written by the collecting rank at exit.
  bool print_table = false;    // With the report, print the text table on stderr.
};

// Records completed collectives (not p2p ops, not failures) per global rank. Each op costs a
// look-up in a thread-local cache and a copy into its rank's ring under that ring's spin lock: no
// allocation and no lock shared between ranks (a thread's first op on a communicator takes the
// sink's mutex once).
class StragglerSink : public Sink {
 public:
  // The process's sink, configured by install_sinks_from_env().
  static StragglerSink& instance();

  ~StragglerSink() override;

  // Registers the sink while enabled; a report path writes the in-process report at exit (see
  // write_report). A new ops_per_rank drops the samples kept.
  void configure(StragglerOptions options);
  StragglerOptions options() const;
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Drops every sample.
  void reset();

  // Global ranks that recorded something in this process.
  std::vector<int> ranks() const;
  // What `global_rank` recorded (empty when nothing).
  RankSamples samples(int global_rank) const;
  // Whether every member of every communicator recorded here is a rank of this process (an
  // in-process world): then local_report() sees whole instances.
  bool holds_every_member() const;
  // analyze_stragglers() over every rank of this process, with options().top_k.
  StragglerReport local_report() const;
  // Delivers a report as configured: JSON to report_path (atomically), the text table on stderr
  // with print_table. Called once by the collecting rank; at exit, a process that delivered none
  // and holds every member writes local_report().
  void write_report(const StragglerReport& report);
  bool report_written() const { return report_written_.load(); }

  void on_enqueue(const OpRecord&) override {}
  void on_start(const OpRecord&) override {}
  void on_end(const OpRecord& record) override;

 private:
  struct Ring;
  // Where one communicator's samples go: its group index and its rank's ring.
  struct Route {
    uint64_t uid_plus_one = 0;  // The communicator's uid + 1 (0 = empty cache slot).
    uint32_t group = 0;
    Ring* ring = nullptr;
  };

  StragglerSink();
  Route route(const CommInfo& comm);

  const std::string host_;
  std::atomic<bool> enabled_{false};
  std::atomic<bool> report_written_{false};
  mutable std::mutex mu_;  // Guards the fields below; on the op path only on a route miss.
  StragglerOptions options_;
  std::vector<StragglerGroup> groups_;
  std::map<std::pair<std::string, std::vector<int>>, uint32_t> group_index_;
  std::map<int, std::unique_ptr<Ring>> rings_;  // Never freed: routes point at them.
  std::unordered_map<uint64_t, Route> routes_;  // By communicator uid.
};

}  // namespace meshrt::trace
