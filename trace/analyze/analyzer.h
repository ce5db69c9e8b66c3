// The offline flight-recorder analyzer behind `meshtrace analyze`: it matches every rank's
// records per (group, sequence number) and per p2p channel, blames by majority rather than by
// load order, and follows waits across groups to the op that started a hang.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trace/analyze/dump_reader.h"

namespace meshrt::trace {

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

struct Finding {
  FindingKind kind = FindingKind::kNotJoined;
  std::string group;                    // The group's name.
  std::vector<int> group_ranks;         // Its global ranks, sorted.
  std::optional<std::string> mesh_dim;  // The mesh dim the group serves.
  std::optional<int64_t> seq;           // Collective sequence number, or p2p channel sequence.
  std::string op;                       // "all_reduce", "send", ...; empty for missing_dump.
  std::vector<int> culprit_ranks;
  std::vector<int> missing_ranks;
  std::string detail;  // One or two sentences in mesh terms.
  bool root = true;    // False when the finding follows from another one (a consequence).
};

struct Report {
  std::vector<int> ranks;           // Ranks whose dumps were read.
  int64_t collectives_checked = 0;  // (group, seq) collectives plus p2p channel ops examined.
  std::vector<Finding> findings;    // Root causes first, then consequences.
};

struct AnalyzeOptions {
  std::string prefix;                   // Dump file prefix; empty: inferred.
  bool allow_incomplete_ranks = false;  // Missing dumps become a finding instead of an error.
  unsigned threads = 0;                 // Loading threads; 0: one per core.
};

// Throws InputError unless every dump has the same `version` ("<int>.<int>") and the same
// `meshrt_dump_version` (or none), and the analyzer knows that meshrt version.
void check_versions(const std::vector<RankDump>& dumps);

// Analyzes loaded dumps. Throws InputError on inconsistent dumps, and on members without a dump
// unless options.allow_incomplete_ranks.
Report analyze(std::vector<RankDump> dumps, const AnalyzeOptions& options);
// Finds, reads and analyzes the dumps under `dir`.
Report analyze_directory(const std::filesystem::path& dir, const AnalyzeOptions& options);

// The report for people, and as one line of JSON {"ranks", "collectives_checked", "findings"}.
std::string format_text(const Report& report);
std::string format_json(const Report& report);

// What `-j` prints.
struct EntriesTableOptions {
  std::vector<int> ranks;               // Columns; empty: every rank.
  std::vector<std::string> pg_filters;  // Only entries whose group name or desc is listed.
};

// The raw entries side by side, one column per rank, row i holding each rank's i-th entry.
std::string format_entries_table(const std::vector<RankDump>& dumps,
                                 const EntriesTableOptions& options);

}  // namespace meshrt::trace
