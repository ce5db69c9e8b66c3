// The live verdict (docs/diagnosis.md): while a job stalls, meshrun gathers every rank's progress
// record and flight-recorder snapshot and runs `meshtrace stall`, which matches the snapshots
// with the offline analyzer's own rules (analyze()) and says in one line which rank stopped
// which op on which mesh dim, and what that rank is doing.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_reader.h"

namespace meshrt::trace {

// The longest-running op in the ranks' progress records: what a stall is measured by.
struct StalledOp {
  int rank = -1;  // -1: no rank has an op in flight.
  std::string group;
  std::string op;
  int64_t seq = 0;
  int64_t running_ms = 0;
};

// One rank's progress record (runtime/progress_publisher.h), as read back.
struct RankProgress {
  int rank = -1;
  std::string state;  // "in_op", "between_ops", "user_code".
  int64_t state_ms = 0;
  int64_t wall_ns = 0;  // When the rank published it (its wall clock); 0 when unknown.
  StalledOp longest;    // Its longest op in flight; rank -1 when none.
};

// Parses one progress record (JSON). Throws InputError naming `what` when it is not one.
RankProgress parse_progress(const std::string& text, const std::string& what);

// The verdict line for snapshots `dumps` and records `progress`: "stall 12 s: mesh0/tp
// all_reduce #37 — rank 3 has not entered it; rank 3 last completed mesh0/dp broadcast #12 and
// has been in user code for 12 s". Majority blame as analyze() decides it. `culprits`, when
// given, gets the ranks the line blames (sorted; empty when it blames none).
std::string live_verdict(std::vector<RankDump> dumps, const std::vector<RankProgress>& progress,
                         std::vector<int>* culprits = nullptr);

// Reads `<dir>/<prefix><rank>` snapshots and `<dir>/progress_<rank>.json` records and returns
// live_verdict(). Throws InputError.
std::string live_verdict_from_directory(const std::filesystem::path& dir, const std::string& prefix,
                                        std::vector<int>* culprits = nullptr);

}  // namespace meshrt::trace
