#include "trace/analyze/live_verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trace/analyze/format.h"
#include "trace/tracer.h"

namespace meshrt::trace {
namespace {

// Whole seconds, rounded to nearest: "12 s".
int64_t seconds(int64_t ms) { return (ms + 500) / 1000; }

// "mesh0/dp broadcast #12" for the last op `rank` completed, from its snapshot; empty if none.
std::string last_completed(const std::vector<RankDump>& dumps, int rank) {
  for (const RankDump& d : dumps) {
    if (d.rank != rank) continue;
    for (size_t i = d.entries.size(); i-- > 0;) {
      const DumpEntry& e = d.entries[i];
      if (e.state != EntryState::kCompleted) continue;
      const std::string& group = d.groups[e.group].name;
      if (e.is_p2p && e.peer >= 0) {
        return fmt::format("{} {} #{} {} rank {}", group, d.symbols[e.type], e.channel_seq,
                           d.symbols[e.type] == "send" ? "to" : "from", e.peer);
      }
      return fmt::format("{} {} #{}", group, d.symbols[e.type],
                         e.is_p2p ? e.p2p_seq : e.collective_seq);
    }
  }
  return "";
}

// "has been in user code for 12 s", from the rank's progress record; empty without one.
std::string activity(const std::vector<RankProgress>& progress, int rank) {
  for (const RankProgress& p : progress) {
    if (p.rank != rank) continue;
    const int64_t s = seconds(p.state_ms);
    if (p.state == "user_code") return fmt::format("has been in user code for {} s", s);
    if (p.state == "between_ops")
      return fmt::format("has had ops queued, none running, for {} s", s);
    if (p.state == "finished") return fmt::format("has had no communicator for {} s", s);
    if (p.longest.rank >= 0) {
      return fmt::format("has been in {} {} #{} for {} s", p.longest.group, p.longest.op,
                         p.longest.seq, seconds(p.longest.running_ms));
    }
  }
  return "";
}

// The first root finding that names an op (missing dumps are a consequence of a dead rank).
const Finding* root_finding(const Report& report) {
  for (const Finding& f : report.findings) {
    if (f.root && f.kind != FindingKind::kMissingDump) return &f;
  }
  for (const Finding& f : report.findings) {
    if (f.kind != FindingKind::kMissingDump) return &f;
  }
  return nullptr;
}

// What the finding says went wrong, after the dash.
std::string what_went_wrong(const Finding& f) {
  std::vector<int> culprits = f.culprit_ranks;
  std::vector<int> missing = f.missing_ranks;
  std::sort(culprits.begin(), culprits.end());
  std::sort(missing.begin(), missing.end());
  const bool p2p = f.op == "send" || f.op == "recv";
  if (f.kind == FindingKind::kNotJoined && f.skipped && !culprits.empty()) {
    return fmt::format("rank {} skipped it and went on with other ops while its peers wait in it",
                       culprits.front());
  }
  if (f.kind == FindingKind::kNotJoined && !p2p) {
    if (culprits.empty() || culprits == missing) {
      return fmt::format("{} {} not entered it", ranks_phrase(missing),
                         missing.size() == 1 ? "has" : "have");
    }
    return fmt::format("{} issued it, which {} never called", ranks_phrase(culprits),
                       ranks_phrase(missing));
  }
  if (f.divergence && f.divergence->sides.size() >= 2 &&
      (f.kind == FindingKind::kTypeMismatch || f.kind == FindingKind::kSizeMismatch ||
       f.kind == FindingKind::kDtypeMismatch)) {
    // Each way the op was called; the analyzer's culprits first.
    std::vector<std::string> ways;
    for (const DivergenceSide& side : f.divergence->sides) {
      if (!side.first_unmatched) continue;
      ways.push_back(
          fmt::format("{} called {}", ranks_phrase(side.ranks), side.first_unmatched->op));
    }
    const std::string kind(finding_kind_name(f.kind));
    if (culprits.size() == f.divergence->sides[0].ranks.size()) {
      return fmt::format("{} ({}; culprit {})", fmt::join(ways, ", "), kind,
                         ranks_phrase(culprits));
    }
    return fmt::format("{} ({}; no majority: {} to blame)", fmt::join(ways, ", "), kind,
                       ranks_phrase(culprits));
  }
  // p2p and the rest: the analyzer's own first sentence.
  return f.detail.substr(0, f.detail.find(';'));
}

}  // namespace

RankProgress parse_progress(const std::string& text, const std::string& what) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("rank") || !j.contains("comms")) {
    throw InputError(fmt::format("'{}': not a progress record", what));
  }
  RankProgress p;
  try {
    p.rank = j.at("rank").get<int>();
    p.state = j.value("state", "");
    p.state_ms = j.value("state_ms", int64_t{0});
    p.wall_ns = j.value("wall_ns", int64_t{0});
    for (const auto& c : j.at("comms")) {
      const auto& f = c.at("in_flight");
      if (f.is_null()) continue;
      const int64_t ms = f.at("running_ms").get<int64_t>();
      if (p.longest.rank >= 0 && ms <= p.longest.running_ms) continue;
      p.longest = {
          p.rank, c.at("name").get<std::string>(), f.at("op").get<std::string>(),
          f.at("p2p").get<bool>() ? f.at("channel_seq").get<int64_t>() : f.at("seq").get<int64_t>(),
          ms};
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("'{}': not a progress record ({})", what, e.what()));
  }
  return p;
}

std::string live_verdict(std::vector<RankDump> dumps, const std::vector<RankProgress>& progress,
                         std::vector<int>* culprits_out) {
  std::vector<int> ignored;
  std::vector<int>& blamed = culprits_out != nullptr ? *culprits_out : ignored;
  blamed.clear();
  StalledOp stalled;
  for (const RankProgress& p : progress) {
    if (p.longest.rank >= 0 && (stalled.rank < 0 || p.longest.running_ms > stalled.running_ms)) {
      stalled = p.longest;
    }
  }
  const std::string age =
      stalled.rank >= 0 ? fmt::format("stall {} s", seconds(stalled.running_ms)) : "stall";
  AnalyzeOptions options;
  options.allow_incomplete_ranks = true;  // A rank that died or did not answer in time.
  std::vector<RankDump> kept = dumps;
  Report report;
  try {
    report = analyze(std::move(kept), options);
  } catch (const InputError& e) {
    return fmt::format("{}: {} {} #{} on rank {} — the snapshots cannot be matched: {}", age,
                       stalled.group, stalled.op, stalled.seq, stalled.rank, e.what());
  }
  const Finding* f = root_finding(report);
  if (f == nullptr) {
    // The snapshots match, but a rank that finished its program, or one that did not answer
    // the snapshot request (frozen, stopped, dead), is what the others wait for.
    std::vector<int> finished;
    for (const RankProgress& p : progress) {
      if (p.state == "finished" && stalled.rank >= 0) finished.push_back(p.rank);
    }
    std::sort(finished.begin(), finished.end());
    if (!finished.empty()) {
      blamed = finished;
      return fmt::format(
          "{}: {} {} #{} — {} finished {} program (no communicator for {} s) while the others "
          "wait in ops with {}: it returned early or skipped the rest",
          age, stalled.group, stalled.op, stalled.seq, ranks_phrase(finished),
          finished.size() == 1 ? "its" : "their",
          seconds(std::find_if(progress.begin(), progress.end(),
                               [&](const RankProgress& p) { return p.rank == finished.front(); })
                      ->state_ms),
          finished.size() == 1 ? "it" : "them");
    }
    for (const Finding& m : report.findings) {
      if (m.kind != FindingKind::kMissingDump) continue;
      std::vector<std::string> silent;
      const int64_t now_ns = wall_now_ns();
      for (const int r : m.missing_ranks) {
        std::string s = fmt::format("rank {}", r);
        for (const RankProgress& p : progress) {
          if (p.rank == r && p.wall_ns > 0) {
            s += fmt::format(" (last progress record {} s old",
                             seconds((now_ns - p.wall_ns) / 1000000));
            if (p.longest.rank >= 0) {
              s += fmt::format(", in {} {} #{}", p.longest.group, p.longest.op, p.longest.seq);
            }
            s += ")";
          }
        }
        silent.push_back(std::move(s));
      }
      blamed = m.missing_ranks;
      std::sort(blamed.begin(), blamed.end());
      std::string line = fmt::format("{}: ", age);
      line += m.seq ? fmt::format("{} {} #{}", m.group, m.op, *m.seq)
                    : fmt::format("{} {} #{}", stalled.group, stalled.op, stalled.seq);
      if (m.seq && m.mesh_dim) line += fmt::format(" (dim {})", *m.mesh_dim);
      return line + fmt::format(
                        " — {} did not answer the snapshot request: frozen (stopped, swapped out) "
                        "or dead, while its peers wait for it",
                        fmt::join(silent, ", "));
    }
    if (stalled.rank < 0) return fmt::format("{}: no op in flight and no mismatch found", age);
    return fmt::format(
        "{}: {} {} #{} — every member has entered it and the snapshots match (a slow or stuck "
        "transport, not a program mismatch)",
        age, stalled.group, stalled.op, stalled.seq);
  }
  std::string line = fmt::format("{}: {} {}", age, f->group, f->op);
  if (f->seq) line += fmt::format(" #{}", *f->seq);
  if (f->mesh_dim) line += fmt::format(" (dim {})", *f->mesh_dim);
  line += fmt::format(" — {}", what_went_wrong(*f));
  if (f->cycle) {
    // A deadlock has no single culprit: say so, with every rank on the cycle.
    std::vector<int> on_cycle;
    for (const Finding& g : report.findings) {
      if (!g.cycle || !g.root) continue;
      on_cycle.insert(on_cycle.end(), g.culprit_ranks.begin(), g.culprit_ranks.end());
      on_cycle.insert(on_cycle.end(), g.missing_ranks.begin(), g.missing_ranks.end());
    }
    std::sort(on_cycle.begin(), on_cycle.end());
    on_cycle.erase(std::unique(on_cycle.begin(), on_cycle.end()), on_cycle.end());
    line += fmt::format("; a cycle of waits (a deadlock) among {}", ranks_phrase(on_cycle));
    blamed = on_cycle;
  }
  std::vector<int> culprits = f->culprit_ranks;
  std::sort(culprits.begin(), culprits.end());
  if (!f->cycle) blamed = culprits;
  if (!culprits.empty()) {
    const int c = culprits.front();
    const std::string last = last_completed(dumps, c);
    const std::string doing = activity(progress, c);
    if (!last.empty() || !doing.empty()) {
      line += fmt::format("; rank {}", c);
      if (!last.empty()) line += fmt::format(" last completed {}", last);
      if (!last.empty() && !doing.empty()) line += " and";
      if (!doing.empty()) line += " " + doing;
    }
    // Where its main thread is (issue #15's "at train.cc:88 step() <- main()").
    for (const RankDump& d : dumps) {
      if (d.rank == c && !d.main_stack.empty()) line += fmt::format(", at {}", d.main_stack);
    }
  }
  return line;
}

std::string live_verdict_from_directory(const std::filesystem::path& dir, const std::string& prefix,
                                        std::vector<int>* culprits) {
  std::vector<RankProgress> progress;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("progress_") || !name.ends_with(".json")) continue;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    progress.push_back(parse_progress(ss.str(), entry.path().string()));
  }
  if (ec) throw InputError(fmt::format("'{}': {}", dir.string(), ec.message()));
  return live_verdict(read_dumps(find_dump_files(dir, prefix)), progress, culprits);
}

}  // namespace meshrt::trace
