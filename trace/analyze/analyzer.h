// The offline flight-recorder analyzer behind `meshtrace analyze`: it matches every rank's
// records per (group, sequence number) and per p2p channel (match.h), blames by majority rather
// than by load order and follows waits across groups to the op that started a hang (explain.h),
// and says where the ranks' programs parted. format.h prints the report.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "trace/analyze/dump_reader.h"

namespace meshrt::trace {

// What a finding says went wrong.
enum class FindingKind {
  kNotJoined,      // Members never issued an op that others did.
  kTypeMismatch,   // Ranks issued different ops at the same sequence number.
  kSizeMismatch,   // Same op, different shapes (or a coalesced group of another length).
  kDtypeMismatch,  // Same op and shapes, different dtypes.
  kStateMismatch,  // Same op, but some ranks are further along than the rest.
  kNumelMismatch,  // all_to_all: the elements sent differ from the elements received.
  kMissingDump,    // Members of a group left no dump (--allow-incomplete-ranks).
};

// "not_joined", "type_mismatch", ... as in the JSON output.
std::string_view finding_kind_name(FindingKind kind);

// Where a program called an op, as its record says.
struct CallSite {
  std::string file;  // As recorded (usually a path); empty when the record has no caller.
  int64_t line = 0;
  bool operator==(const CallSite&) const = default;
};

// One op that ranks called.
struct OpCall {
  std::string op;   // "all_reduce", "send", ... as the dump names it.
  int64_t seq = 0;  // Collective sequence number in the group, or the p2p channel's sequence.
  int peer = -1;    // p2p: the global rank at the other end; -1 for collectives.
  CallSite at;
  bool operator==(const OpCall&) const = default;
};

// Ranks of a finding that went the same way where the ranks parted.
struct DivergenceSide {
  std::vector<int> ranks;
  // Their op at the finding's sequence number; nullopt when they never issued it.
  std::optional<OpCall> first_unmatched;
  // Their op before it, when the others matched it; for ranks that never issued the finding's
  // op, their last op in the group (on the p2p channel). nullopt when none was recorded.
  std::optional<OpCall> last_matched;
  bool moved_on = false;  // They never issued the finding's op and have nothing pending at all.
};

// Ranks that called an op from one place.
struct RanksAt {
  std::vector<int> ranks;
  CallSite at;
};

// An op at which the sides of a divergence called from different places.
struct CallSiteSplit {
  std::string op;
  int64_t seq = 0;
  std::vector<RanksAt> sites;  // The divergence's first side first.
};

// Where the ranks of a not_joined or mismatch finding parted, with call sites.
struct Divergence {
  std::vector<DivergenceSide> sides;  // The side that issued the op, or the odd one, first.
  // The first op of the group before the finding's at which the two sides called from different
  // places: where an extra or skipped call likely shifted the sequence numbers.
  std::optional<CallSiteSplit> call_sites_differ;
};

// One problem the analyzer found, in the terms of the group and op concerned.
struct Finding {
  FindingKind kind = FindingKind::kNotJoined;
  std::string group;                    // The group's name.
  std::vector<int> group_ranks;         // Its global ranks, sorted.
  std::optional<std::string> mesh_dim;  // The mesh dim the group serves.
  std::optional<int64_t> seq;           // Collective sequence number, or p2p channel sequence.
  std::string op;                       // "all_reduce", "send", ...; empty for missing_dump.
  std::vector<int> culprit_ranks;
  std::vector<int> missing_ranks;
  std::string detail;    // One or two sentences in mesh terms.
  bool root = true;      // False when the finding follows from another one (a consequence).
  bool cycle = false;    // One of the waits of a cycle (a deadlock): each root of it is a cause.
  bool skipped = false;  // not_joined: the culprit skipped the op and went on (explain.cc).
  std::optional<Divergence> divergence;  // Root not_joined and type/size/dtype mismatches.
};

// The analysis of one job's dumps.
// The members of one repair epoch across the dumps (docs/repair.md).
struct RepairEpoch {
  std::set<int> ranks;           // Global ranks of its groups.
  std::set<std::string> groups;  // Their names, e.g. "world@1", "mesh0/dp@1".
};

struct Report {
  std::vector<int> ranks;  // Ranks whose dumps were read.
  // By epoch, when some group was made by a repair (a shrink); else empty. Ops are matched
  // within their group, so never across epochs.
  std::map<int64_t, RepairEpoch> epochs;
  int64_t collectives_checked = 0;  // (group, seq) collectives plus p2p channel ops examined.
  std::vector<Finding> findings;    // Root causes first, then consequences.
  // Each rank's main-thread stack at its dump, where the dump carried one (meshrt_threads).
  std::map<int, std::string> main_stacks;
};

// How to find and judge the dumps.
struct AnalyzeOptions {
  std::string prefix;                   // Dump file prefix; empty: inferred.
  bool allow_incomplete_ranks = false;  // Missing dumps become a finding instead of an error.
  unsigned threads = 0;                 // Loading threads; 0: one per core.
  InputLimits limits;                   // Bytes of dumps read at most.
  // What the launcher knows of ranks that left no dump ("stopped (SIGSTOP) ..."), by rank: a
  // missing-dump finding says it instead of "may have crashed or exited before dumping".
  std::map<int, std::string> rank_notes{};
};

// Which files in a dump directory are one job's, where the directory is shared (meshrt's default
// prefix /tmp/meshrt_fr_ is every job's on a host): set by meshrt-monitor from what it knows.
struct JobFiles {
  int world_size = 0;  // > 0: files named for a rank at or above it are another job's.
  // Files last written before this are an earlier job's (min(): no limit).
  std::filesystem::file_time_type written_since = std::filesystem::file_time_type::min();
};

// Removes from `files` those of another job; returns one line per file removed, saying why.
std::vector<std::string> keep_job_files(std::vector<DumpFile>& files, const JobFiles& job);

// Throws InputError unless every dump has the same `version` ("<int>.<int>") and the same
// `meshrt_dump_version` (or none), and the analyzer knows that meshrt version.
void check_versions(const std::vector<RankDump>& dumps);

// Analyzes loaded dumps. Throws InputError on inconsistent dumps, and on members without a dump
// unless options.allow_incomplete_ranks.
Report analyze(std::vector<RankDump> dumps, const AnalyzeOptions& options);
// Finds, reads and analyzes the dumps under `dir`.
Report analyze_directory(const std::filesystem::path& dir, const AnalyzeOptions& options);

}  // namespace meshrt::trace
