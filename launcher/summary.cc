#include "launcher/summary.h"

#include <fmt/format.h>

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

}  // namespace

std::string format_summary(const SummaryInput& in) {
  const AttemptOutcome& o = in.outcome;
  std::string s = fmt::format("meshrun: job failed (run '{}', attempt {} of at most {})\n",
                              in.run_id, o.attempt + 1, in.max_restarts + 1);
  s += o.failure ? fmt::format("first failure: {}\n", describe(*o.failure))
                 : "first failure: none seen; some nodes did not report\n";
  s += "ranks:\n";
  for (const auto& r : o.ranks) {
    const bool first = o.failure && o.failure->rank == r.rank;
    s += fmt::format("  rank {} (node {}, local rank {}, pid {}): {}{}\n", r.rank, r.node,
                     r.local_rank, r.pid, describe(r), first ? "  <- first failure" : "");
  }
  for (int node : o.silent_nodes) {
    const NodeInfo& n = in.nodes[node];
    s += fmt::format("  node {} (host {}, agent pid {}), ranks {}-{}: its agent did not report\n",
                     node, n.host, n.pid, n.rank_offset, n.rank_offset + n.nproc - 1);
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
    return s;
  }
  if (in.dumped_ranks.empty()) {
    s += "flight recorder: no rank wrote a dump\n";
    return s;
  }
  s += fmt::format("flight recorder: {} {} in {}/{}<rank>\n",
                   in.dumped_ranks.size() == 1 ? "the dump of rank" : "dumps of ranks",
                   rank_ranges(in.dumped_ranks), in.dump_dir, in.dump_name);
  if (!in.analysis) {
    s += fmt::format("analysis: {}\n", in.analysis_note);
    return s;
  }
  s +=
      fmt::format("analysis ({}, exit status {}):\n", in.analysis->command, in.analysis->exit_code);
  s += indent(in.analysis->output, "  ");
  return s;
}

}  // namespace meshrt::launcher
