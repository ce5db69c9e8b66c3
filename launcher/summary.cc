#include "launcher/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

namespace meshrt::launcher {
namespace {

// "0-3, 5, 7-8".
std::string rank_ranges(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string indent(const std::string& text, const std::string& pad) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) out += pad + line + "\n";
  return out;
}

// The ranks and nodes the job went on without (--on-rank-failure=continue): a line each under a
// heading (empty when none was left behind), and how many of how many ranks went on.
struct LeftBehind {
  std::string lines;
  int went_on = 0;
  int world = 0;
};

LeftBehind left_behind(const AttemptOutcome& o, const std::vector<NodeInfo>& nodes) {
  int world = 0;
  for (const NodeInfo& n : nodes) world += n.nproc;
  std::string s;
  int dead = 0;
  for (const RankStatus& r : o.ranks) {
    if (!r.left_behind) continue;
    s += "  " + describe_death(r) + "\n";
    ++dead;
  }
  for (const Failure& f : o.lost_nodes) {
    const int nproc =
        f.node >= 0 && f.node < static_cast<int>(nodes.size()) ? nodes[f.node].nproc : 0;
    s += fmt::format("  node {} (host {}, agent pid {}), ranks {}-{}: its agent was lost at {}\n",
                     f.node, f.host, f.pid, f.rank, f.rank + nproc - 1, f.time);
    dead += nproc;
  }
  if (s.empty()) return {"", world, world};
  return {"ranks that died and were left behind (--on-rank-failure=continue):\n" + s,
          std::max(0, world - dead), world};
}

}  // namespace

std::vector<int> root_culprits(const std::string& analysis) {
  // meshtrace's text (trace/analyze/format.cc): "culprit rank 3" or "culprit ranks [1, 2]"
  // lines under its findings, root causes first, up to "Consequences".
  std::vector<int> ranks;
  const size_t start = analysis.find("\nRoot causes:\n");
  if (start == std::string::npos) return ranks;
  std::istringstream in(analysis.substr(start, analysis.find("\nConsequences", start) - start));
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find_first_not_of(' ');
    if (at == std::string::npos || line.compare(at, 8, "culprit ") != 0) continue;
    for (char& c : line) {
      if (!std::isdigit(static_cast<unsigned char>(c))) c = ' ';
    }
    std::istringstream nums(line);
    for (int r; nums >> r;) ranks.push_back(r);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::string format_summary(const SummaryInput& in) {
  const AttemptOutcome& o = in.outcome;
  // Attempts count from 0 everywhere: attempt_<n>/, MESHRT_RESTART_COUNT, the restart lines.
  std::string s = fmt::format("meshrun: job failed (run '{}', attempt {}, --max-restarts {})\n",
                              in.run_id, o.attempt, in.max_restarts);
  if (o.failure) {
    s += fmt::format("first failure: {}\n", describe(*o.failure));
  } else if (!o.silent_nodes.empty()) {
    s += "first failure: none seen; some nodes did not report\n";
  } else {
    s +=
        fmt::format("first failure: none recorded; meshrun stopped the ranks on a stop request{}\n",
                    o.stop_reason.empty() ? "" : fmt::format(" ('{}')", o.stop_reason));
  }
  // The first rank to fail is often a victim (its watchdog fired first): where the analysis
  // names the culprit, say so up front.
  const std::vector<int> culprits =
      in.analysis ? root_culprits(in.analysis->output) : std::vector<int>{};
  if (!culprits.empty() && !(o.failure && culprits == std::vector<int>{o.failure->rank})) {
    s += fmt::format(
        "culprit: rank{} {}, named by the analysis below{}\n", culprits.size() == 1 ? "" : "s",
        rank_ranges(culprits),
        o.failure ? fmt::format(" (rank {} failed first, as a consequence)", o.failure->rank) : "");
  }
  if (o.failure && !o.failure->error_file.empty()) {
    // torchelastic's ChildFailedError shows the same two fields of the failing rank.
    s += fmt::format("  error_file: {}\n", o.failure->error_file);
    const std::string& message = o.failure->error_message;
    // A what() of several lines keeps them, indented under the first.
    s += "  message: " + (message.empty() ? "\n" : indent(message, "    ").substr(4));
  }
  s += "ranks:\n";
  for (const auto& r : o.ranks) {
    const bool first = o.failure && o.failure->rank == r.rank;
    const bool culprit = std::binary_search(culprits.begin(), culprits.end(), r.rank);
    s += fmt::format("  rank {} (node {}, local rank {}, pid {}): {}{}{}\n", r.rank, r.node,
                     r.local_rank, r.pid, describe(r), first ? "  <- first failure" : "",
                     culprit ? "  <- culprit (analysis)" : "");
  }
  for (int node : o.silent_nodes) {
    const NodeInfo& n = in.nodes[node];
    s += fmt::format("  node {} (host {}, agent pid {}), ranks {}-{}: its agent did not report\n",
                     node, n.host, n.pid, n.rank_offset, n.rank_offset + n.nproc - 1);
  }
  if (const LeftBehind dead = left_behind(o, in.nodes); !dead.lines.empty()) {
    s += dead.lines;
    s += dead.went_on == 0 ? "every rank died: none was left to go on with\n"
                           : fmt::format("the job went on with {} of {} ranks until it failed\n",
                                         dead.went_on, dead.world);
  }
  const std::string attempt_dir = fmt::format("attempt_{}", o.attempt);
  if (in.log_files) {
    s += "logs:\n";
    for (const auto& n : in.nodes) {
      s += fmt::format("  node {} (host {}): {}/{}/rank_<rank>.log\n", n.node_rank, n.host,
                       n.log_dir, attempt_dir);
    }
  } else {
    s += "logs: on the console above, lines prefixed [rank<r>] (--log-dir keeps them in files)\n";
  }
  if (in.this_node != 0) {
    s += fmt::format("flight recorder: dumps are gathered on node 0 (host {})\n", in.nodes[0].host);
  } else if (in.dumped_ranks.empty()) {
    s += "flight recorder: no rank wrote a dump\n";
  } else {
    s += fmt::format("flight recorder: {} {} in {}/{}<rank>\n",
                     in.dumped_ranks.size() == 1 ? "the dump of rank" : "dumps of ranks",
                     rank_ranges(in.dumped_ranks), in.dump_dir, in.dump_name);
    if (!in.analysis) {
      s += fmt::format("analysis: {}\n", in.analysis_note);
    } else {
      s += fmt::format("analysis ({}, exit status {}):\n", in.analysis->command,
                       in.analysis->exit_code);
      s += indent(in.analysis->output, "  ");
    }
  }
  if (!in.report.empty()) s += in.report + "\n";
  return s;
}

std::string format_continued_summary(const SummaryInput& in) {
  const LeftBehind dead = left_behind(in.outcome, in.nodes);
  return fmt::format(
      "meshrun: job finished (run '{}')\n{}the job went on with {} of {} ranks and finished: exit "
      "status 0\n",
      in.run_id, dead.lines, dead.went_on, dead.world);
}

std::string describe_report(const std::string& dir, const std::optional<MeshtraceRun>& run,
                            const std::string& note) {
  const std::string page = dir + "/report.html";
  if (!run) return "report: not made: " + note;
  if (run->exit_code == 0 && std::filesystem::exists(page)) return "report: " + page;
  // Its last line says why, in meshtrace's words.
  std::string last;
  std::istringstream lines(run->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  const std::string status =
      run->exit_code < 0 ? "was killed" : fmt::format("exited with status {}", run->exit_code);
  if (run->exit_code == 0)
    return fmt::format("report: not made: `{}` wrote no {}", run->command, page);
  return fmt::format("report: not made: `{}` {}{}{}", run->command, status,
                     last.empty() ? "" : ": ", last);
}

}  // namespace meshrt::launcher
