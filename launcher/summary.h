// The text meshrun prints when a job fails: the first failure, every rank's status, where the
// logs and dumps are, the analyzer's verdict and where the job report is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/post_mortem.h"
#include "launcher/rank_status.h"
#include "launcher/rendezvous.h"

namespace meshrt::launcher {

// Everything the summary reports.
struct SummaryInput {
  std::string run_id;
  int max_restarts = 0;
  AttemptOutcome outcome;       // The last attempt.
  std::vector<NodeInfo> nodes;  // Every node, by node rank.
  int this_node = 0;
  bool log_files = false;                // Per-rank log files were written (--log-dir).
  std::string dump_dir;                  // Where node 0 gathered the dumps of the last attempt.
  std::string dump_name;                 // Dump file name before the rank, e.g. "fr_trace_".
  std::vector<int> dumped_ranks;         // Ranks whose dump is in dump_dir (node 0 only).
  std::optional<MeshtraceRun> analysis;  // Node 0, when there were dumps and meshtrace was found.
  std::string analysis_note;             // Why there is no analysis, when there is none.
  std::string report;  // With --report: the last line, from describe_report(); else empty.
};

// The culprit ranks of the root causes in `analysis`, meshtrace analyze's text output; sorted,
// empty when it names none.
std::vector<int> root_culprits(const std::string& analysis);

// The summary, one item per line, ending with a newline.
std::string format_summary(const SummaryInput& in);

// The end of a job that finished (exit status 0) after leaving ranks behind
// (--on-rank-failure=continue): who died, when, and what the job did; uses run_id, outcome and
// nodes. Ends with a newline.
std::string format_continued_summary(const SummaryInput& in);

// The line that says where `meshtrace report` put the job report of `dir`: "report:
// <dir>/report.html", or "report: not made: <why>" from its run, or from `note` when it did not
// run.
std::string describe_report(const std::string& dir, const std::optional<MeshtraceRun>& run,
                            const std::string& note);

}  // namespace meshrt::launcher
