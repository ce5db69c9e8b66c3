#include "launcher/live_stragglers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace meshrt::launcher {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

StragglerWatch::StragglerWatch(StragglerOptions options) : options_(options) {}

bool StragglerWatch::parse(const std::string& record, Sample* sample, int* rank) {
  const auto j = nlohmann::json::parse(record, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("metrics")) return false;
  try {
    *rank = j.at("rank").get<int>();
    sample->wall_ns = j.at("wall_ns").get<int64_t>();
    for (const auto& c : j.at("comms")) {
      sample->groups[c.at("name").get<std::string>()] = {c.value("mesh_dim", ""),
                                                         c.at("ranks").get<std::vector<int>>()};
    }
    for (const auto& m : j.at("metrics")) {
      const double exec = m.at("exec_seconds").get<double>();
      sample->exec_s += exec;
      if (m.value("p2p", false)) continue;
      auto& [ops, s] = sample->by_comm[m.at("comm").get<std::string>()];
      ops += m.at("timed_ops").get<int64_t>();
      s += exec;
    }
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

std::vector<Straggler> StragglerWatch::add(const std::vector<std::string>& records) {
  const int64_t window_ns = options_.window.count() * 1'000'000;
  for (const std::string& text : records) {
    Sample s;
    int rank = -1;
    if (text.empty() || !parse(text, &s, &rank)) continue;
    auto& h = history_[rank];
    if (!h.empty() && h.back().wall_ns == s.wall_ns) continue;  // Not republished since.
    h.push_back(std::move(s));
    // Keep one sample at or before the window's start, to measure from.
    while (h.size() > 2 && h[1].wall_ns <= h.back().wall_ns - window_ns) h.pop_front();
  }
  // Per rank: the change over the window (from its oldest kept sample to its newest).
  struct Delta {
    double wall_s = 0, exec_s = 0;
    std::map<std::string, std::pair<int64_t, double>> by_comm;
    const Sample* now = nullptr;
  };
  std::map<int, Delta> deltas;
  for (const auto& [rank, h] : history_) {
    if (h.size() < 2) continue;
    const Sample &a = h.front(), &b = h.back();
    // A window much shorter than asked for says too little (the job just began).
    if (b.wall_ns - a.wall_ns < window_ns / 2) continue;
    Delta d{(b.wall_ns - a.wall_ns) / 1e9, b.exec_s - a.exec_s, {}, &b};
    for (const auto& [comm, now] : b.by_comm) {
      const auto before = a.by_comm.find(comm);
      const auto was =
          before == a.by_comm.end() ? std::pair<int64_t, double>{0, 0} : before->second;
      d.by_comm[comm] = {now.first - was.first, now.second - was.second};
    }
    deltas[rank] = std::move(d);
  }
  std::vector<Straggler> found;
  std::map<std::pair<std::string, std::vector<int>>, bool> seen;
  for (const auto& [rank, d] : deltas) {
    for (const auto& [name, group] : d.now->groups) {
      const auto& [dim, members] = group;
      if (members.size() < 2 || seen[{name, members}]) continue;
      seen[{name, members}] = true;
      // Every member's mean time per collective here, and share of its time in ops.
      std::map<int, std::pair<double, double>> per;  // Rank: (mean ms, share).
      std::map<int, int64_t> ops;
      for (const int m : members) {
        const auto it = deltas.find(m);
        if (it == deltas.end()) break;
        const auto c = it->second.by_comm.find(name);
        if (c == it->second.by_comm.end() || c->second.first < options_.min_ops) break;
        per[m] = {c->second.second * 1e3 / static_cast<double>(c->second.first),
                  it->second.wall_s > 0 ? it->second.exec_s / it->second.wall_s : 0};
        ops[m] = c->second.first;
      }
      if (per.size() != members.size()) continue;
      Straggler best;
      for (const int m : members) {
        std::vector<double> peer_ms, peer_share;
        for (const int p : members) {
          if (p == m) continue;
          peer_ms.push_back(per[p].first);
          peer_share.push_back(per[p].second);
        }
        const double ms = median(peer_ms), share = median(peer_share);
        const double late = ms - per[m].first;
        if (late < options_.min_late_ms || per[m].first > options_.max_time_ratio * ms ||
            per[m].second > share - options_.min_share_gap || late <= best.late_ms) {
          continue;
        }
        best = {m,
                name,
                dim,
                members,
                late,
                ops[m],
                per[m].second,
                share,
                std::round(deltas[m].wall_s)};
      }
      if (best.rank >= 0) found.push_back(std::move(best));
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Straggler& a, const Straggler& b) { return a.late_ms > b.late_ms; });
  return found;
}

std::string describe(const Straggler& s) {
  const std::string where =
      s.mesh_dim.empty()
          ? fmt::format("ranks [{}]", fmt::join(s.members, ", "))
          : fmt::format("dim {}, ranks [{}]", s.mesh_dim, fmt::join(s.members, ", "));
  return fmt::format(
      "rank {} arrives late at {} ({}) by {:.0f} ms per collective on average over the last {:.0f} "
      "s ({} ops): it spends {:.0f}% of its time in ops, its peers {:.0f}%",
      s.rank, s.group, where, s.late_ms, s.window_s, s.ops, s.in_op_share * 100,
      s.peers_in_op_share * 100);
}

}  // namespace meshrt::launcher
