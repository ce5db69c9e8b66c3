#include "trace/analyze/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "trace/analyze/op_types.h"

namespace meshrt::trace {
namespace {

using Json = nlohmann::ordered_json;

// ---- divergence as text ----------------------------------------------------------------------

// "hang.cc:37": the file's basename, which is what people recognise, and the line; empty when
// the call site is unknown.
std::string site_text(const CallSite& at) {
  if (at.file.empty()) return "";
  const std::string_view base = std::string_view(at.file).substr(at.file.find_last_of('/') + 1);
  return at.line > 0 ? fmt::format("{}:{}", base, at.line) : std::string(base);
}

// " at hang.cc:37", or nothing when the call site is unknown.
std::string at_text(const CallSite& at) {
  const std::string site = site_text(at);
  return site.empty() ? site : " at " + site;
}

// " to rank 1" or " from rank 0" for p2p ops; nothing for collectives.
std::string peer_text(const OpCall& c) {
  if (c.peer < 0) return "";
  return fmt::format(" {} rank {}", op_type(c.op).send() ? "to" : "from", c.peer);
}

// "rank 0 ran all_reduce #5 at hang.cc:37", or for ranks that never issued it "ranks [1, 2, 3]
// ran their last all_reduce (#4) at hang.cc:37 and moved on", or "rank 1 has no record in this
// group" (`where`: "in this group", "on this channel").
std::string side_text(const DivergenceSide& side, std::string_view where) {
  const std::string who = ranks_phrase(side.ranks);
  const bool one = side.ranks.size() == 1;
  if (side.first_unmatched) {
    const OpCall& c = *side.first_unmatched;
    return fmt::format("{} ran {} #{}{}{}", who, c.op, c.seq, peer_text(c), at_text(c.at));
  }
  if (!side.last_matched)
    return fmt::format("{} {} no record {}", who, one ? "has" : "have", where);
  const OpCall& c = *side.last_matched;
  return fmt::format("{} ran {} last {}{} (#{}){}{}", who, one ? "its" : "their", c.op,
                     peer_text(c), c.seq, at_text(c.at), side.moved_on ? " and moved on" : "");
}

// "; the last op they matched: all_reduce #2 at train.cc:37" when every side shows the op it
// parted at (otherwise a side's last op is shown already); sides that called it from different
// places are listed: "all_reduce #2 (rank 3 at a.cc:1, ranks [0, 1, 2] at b.cc:2)".
std::string last_matched_text(const Divergence& d) {
  for (const DivergenceSide& s : d.sides) {
    if (!s.first_unmatched || !s.last_matched) return "";
  }
  std::vector<std::string> items;
  std::vector<bool> done(d.sides.size(), false);
  for (size_t i = 0; i < d.sides.size(); ++i) {
    if (done[i]) continue;
    const OpCall& op = *d.sides[i].last_matched;
    std::vector<size_t> same_op;  // Sides whose last matched op is this one.
    for (size_t j = i; j < d.sides.size(); ++j) {
      const OpCall& other = *d.sides[j].last_matched;
      if (!done[j] && other.op == op.op && other.seq == op.seq) {
        same_op.push_back(j);
        done[j] = true;
      }
    }
    const bool one_site = std::all_of(same_op.begin(), same_op.end(), [&](size_t j) {
      return d.sides[j].last_matched->at == op.at;
    });
    if (one_site) {
      items.push_back(fmt::format("{} #{}{}", op.op, op.seq, at_text(op.at)));
      continue;
    }
    std::vector<std::string> sites;
    for (const size_t j : same_op) {
      const std::string site = site_text(d.sides[j].last_matched->at);
      sites.push_back(fmt::format("{} at {}", ranks_phrase(d.sides[j].ranks),
                                  site.empty() ? "an unknown place" : site));
    }
    items.push_back(fmt::format("{} #{} ({})", op.op, op.seq, fmt::join(sites, ", ")));
  }
  return fmt::format("; the last {} they matched: {}", items.size() == 1 ? "op" : "ops",
                     fmt::join(items, ", "));
}

// The divergence line: each side, the last op they matched, and where call sites first differ.
std::string divergence_text(const Divergence& d) {
  // The ops of a p2p finding carry their peer.
  const bool p2p = std::any_of(d.sides.begin(), d.sides.end(), [](const DivergenceSide& s) {
    const std::optional<OpCall>& c = s.first_unmatched ? s.first_unmatched : s.last_matched;
    return c && c->peer >= 0;
  });
  std::vector<std::string> sides;
  for (const DivergenceSide& s : d.sides) {
    sides.push_back(side_text(s, p2p ? "on this channel" : "in this group"));
  }
  std::string out = fmt::format("{}{}", fmt::join(sides, "; "), last_matched_text(d));
  if (d.call_sites_differ) {
    const CallSiteSplit& split = *d.call_sites_differ;
    std::vector<std::string> sites;
    for (const RanksAt& r : split.sites) {
      sites.push_back(fmt::format("{} at {}", ranks_phrase(r.ranks), site_text(r.at)));
    }
    out += fmt::format("; call sites first differ at {} #{}: {}", split.op, split.seq,
                       fmt::join(sites, ", "));
  }
  return out;
}

// ---- divergence as JSON ----------------------------------------------------------------------

// Adds "file" (the full path as recorded) and "line", null when unknown.
void add_site(Json& j, const CallSite& at) {
  j["file"] = at.file.empty() ? Json(nullptr) : Json(at.file);
  j["line"] = at.line > 0 ? Json(at.line) : Json(nullptr);
}

Json call_json(const std::optional<OpCall>& c) {
  if (!c) return nullptr;
  Json j;
  j["op"] = c->op;
  j["seq"] = c->seq;
  j["peer"] = c->peer >= 0 ? Json(c->peer) : Json(nullptr);
  add_site(j, c->at);
  return j;
}

// {"sides": [{"ranks", "first_unmatched", "last_matched", "moved_on"}], "call_sites_differ":
// {"op", "seq", "sites": [{"ranks", "file", "line"}]} or null}.
Json divergence_json(const Divergence& d) {
  Json j;
  j["sides"] = Json::array();
  for (const DivergenceSide& s : d.sides) {
    Json side;
    side["ranks"] = s.ranks;
    side["first_unmatched"] = call_json(s.first_unmatched);
    side["last_matched"] = call_json(s.last_matched);
    side["moved_on"] = s.moved_on;
    j["sides"].push_back(std::move(side));
  }
  j["call_sites_differ"] = nullptr;
  if (d.call_sites_differ) {
    Json split;
    split["op"] = d.call_sites_differ->op;
    split["seq"] = d.call_sites_differ->seq;
    split["sites"] = Json::array();
    for (const RanksAt& r : d.call_sites_differ->sites) {
      Json site;
      site["ranks"] = r.ranks;
      add_site(site, r.at);
      split["sites"].push_back(std::move(site));
    }
    j["call_sites_differ"] = std::move(split);
  }
  return j;
}

}  // namespace

std::string format_ranks(const std::vector<int>& ranks) {
  const bool shorten = ranks.size() > 8;
  if (shorten && ranks[1] - ranks[0] > 1) {
    const int stride = ranks[1] - ranks[0];
    bool strided = true;
    for (size_t i = 2; i < ranks.size() && strided; ++i)
      strided = ranks[i] - ranks[i - 1] == stride;
    if (strided)
      return fmt::format("[{}, {}, {}, ..., {}]", ranks[0], ranks[1], ranks[2], ranks.back());
  }
  std::string out = "[";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (shorten && j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += j - i >= 2 ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]);
    if (j - i == 1) out += fmt::format(", {}", ranks[j]);
    i = j + 1;
  }
  return out + "]";
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? fmt::format("rank {}", ranks[0])
                           : fmt::format("ranks {}", format_ranks(ranks));
}

std::string format_shapes(std::span<const int64_t> pool) {
  std::string out = "[";
  for (size_t i = 0; i < pool.size();) {
    const auto ndim = static_cast<size_t>(pool[i++]);
    out += out.size() > 1 ? ", [" : "[";
    for (size_t d = 0; d < ndim && i < pool.size(); ++d, ++i) {
      out += d > 0 ? fmt::format(", {}", pool[i]) : std::to_string(pool[i]);
    }
    out += "]";
  }
  return out + "]";
}

std::string format_text(const Report& report) {
  size_t roots = 0;
  for (const Finding& f : report.findings) roots += f.root ? 1 : 0;
  std::string out = fmt::format("meshtrace: {} ranks {}, {} ops checked", report.ranks.size(),
                                format_ranks(report.ranks), report.collectives_checked);
  // The repairs, oldest first: who went on in each epoch, and who was left behind.
  std::string epochs;
  const std::set<int>* before = nullptr;
  for (const auto& [epoch, e] : report.epochs) {
    std::vector<int> left;
    if (before) std::ranges::set_difference(*before, e.ranks, std::back_inserter(left));
    epochs += fmt::format(
        "  epoch {}: ranks {} in {}{}\n", epoch,
        format_ranks(std::vector<int>(e.ranks.begin(), e.ranks.end())), fmt::join(e.groups, ", "),
        left.empty() ? "" : fmt::format(" (left behind: {})", ranks_phrase(left)));
    before = &e.ranks;
  }
  if (!epochs.empty()) {
    epochs = "\nRepair epochs (ops are matched within their epoch's groups only):\n" + epochs;
  }
  if (report.findings.empty()) return out + ": no problem found\n" + epochs;
  out += fmt::format(", {} finding{} ({} root cause{})\n", report.findings.size(),
                     report.findings.size() == 1 ? "" : "s", roots, roots == 1 ? "" : "s");
  out += epochs;
  bool consequences = false;
  out += "\nRoot causes:\n";
  for (const Finding& f : report.findings) {
    if (!f.root && !consequences) {
      out += "\nConsequences (they follow from the above):\n";
      consequences = true;
    }
    const std::string where =
        f.mesh_dim ? fmt::format("mesh dim {}, group {} {}", *f.mesh_dim, f.group,
                                 format_ranks(f.group_ranks))
                   : fmt::format("group {} {}", f.group, format_ranks(f.group_ranks));
    out += fmt::format("  [{}] {}: {}\n", finding_kind_name(f.kind), where, f.detail);
    if (!f.culprit_ranks.empty()) {
      out += fmt::format("      culprit {}\n", ranks_phrase(f.culprit_ranks));
      // Where a root cause's culprit was when it dumped: a rank stuck in its own code shows it.
      for (const int r : f.root ? f.culprit_ranks : std::vector<int>{}) {
        if (const auto it = report.main_stacks.find(r); it != report.main_stacks.end()) {
          out += fmt::format("      rank {} main thread: {}\n", r, it->second);
        }
      }
    }
    if (f.divergence && !f.divergence->sides.empty()) {
      out += fmt::format("      diverged: {}\n", divergence_text(*f.divergence));
    }
  }
  return out;
}

std::string format_json(const Report& report) {
  Json out;
  out["ranks"] = report.ranks;
  Json stacks = Json::object();
  for (const auto& [rank, stack] : report.main_stacks) stacks[std::to_string(rank)] = stack;
  out["main_stacks"] = std::move(stacks);
  out["collectives_checked"] = report.collectives_checked;
  if (!report.epochs.empty()) {
    Json epochs = Json::array();
    for (const auto& [epoch, e] : report.epochs) {
      epochs.push_back({{"epoch", epoch}, {"ranks", e.ranks}, {"groups", e.groups}});
    }
    out["epochs"] = std::move(epochs);
  }
  out["findings"] = Json::array();
  for (const Finding& f : report.findings) {
    Json j;
    j["kind"] = finding_kind_name(f.kind);
    j["group"] = f.group;
    j["group_ranks"] = f.group_ranks;
    j["mesh_dim"] = f.mesh_dim ? Json(*f.mesh_dim) : nullptr;
    j["seq"] = f.seq ? Json(*f.seq) : nullptr;
    j["op"] = f.op.empty() ? nullptr : Json(f.op);
    j["culprit_ranks"] = f.culprit_ranks;
    j["missing_ranks"] = f.missing_ranks;
    j["detail"] = f.detail;
    j["root"] = f.root;
    j["cycle"] = f.cycle;
    j["skipped"] = f.skipped;
    j["divergence"] = f.divergence ? divergence_json(*f.divergence) : nullptr;
    out["findings"].push_back(std::move(j));
  }
  // Names come from the dumps, which may hold bytes that are not UTF-8: shown as U+FFFD rather
  // than thrown on (nlohmann's default).
  return out.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string format_entries_table(const std::vector<RankDump>& dumps,
                                 const EntriesTableOptions& options) {
  std::vector<const RankDump*> columns;
  for (const RankDump& d : dumps) {
    if (options.ranks.empty() ||
        std::find(options.ranks.begin(), options.ranks.end(), d.rank) != options.ranks.end()) {
      columns.push_back(&d);
    }
  }
  if (columns.empty()) throw InputError("none of the selected ranks has a dump");
  // Cells: "<group> [p2p]#<seq> <op>[->peer] <sizes> <dtypes> <state>".
  std::vector<std::vector<std::string>> cells(columns.size());
  size_t rows = 0;
  for (size_t c = 0; c < columns.size(); ++c) {
    const RankDump& d = *columns[c];
    std::vector<bool> recv(d.symbols.size());  // By symbol: names a recv.
    for (size_t s = 0; s < d.symbols.size(); ++s) recv[s] = op_type(d.symbols[s]).recv();
    for (const DumpEntry& e : d.entries) {
      const DumpGroup& g = d.groups[e.group];
      if (!options.pg_filters.empty() &&
          std::none_of(options.pg_filters.begin(), options.pg_filters.end(),
                       [&](const std::string& f) { return f == g.name || f == g.desc; })) {
        continue;
      }
      // A recv's buffer is its output; everything else shows its input.
      const bool is_recv = recv[e.type];
      std::vector<std::string_view> parts = {g.name};
      const std::string seq =
          fmt::format("{}#{}", e.is_p2p ? "p2p" : "", e.is_p2p ? e.p2p_seq : e.collective_seq);
      std::string op(d.symbols[e.type]);
      if (e.peer >= 0) op += fmt::format("{}{}", is_recv ? "<-" : "->", e.peer);
      const std::string shapes = format_shapes(d.span(is_recv ? e.output_sizes : e.input_sizes));
      std::vector<std::string_view> dtype_names;
      for (const int64_t id : d.span(is_recv ? e.output_dtypes : e.input_dtypes)) {
        dtype_names.push_back(d.symbols[id]);
      }
      const std::string dtypes = fmt::format("{}", fmt::join(dtype_names, "/"));
      parts.insert(parts.end(), {seq, op, shapes});
      if (!dtypes.empty()) parts.push_back(dtypes);
      parts.push_back(entry_state_name(e.state));
      cells[c].push_back(fmt::format("{}", fmt::join(parts, " ")));
    }
    rows = std::max(rows, cells[c].size());
  }
  std::vector<size_t> width(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) {
    width[c] = fmt::format("rank {}", columns[c]->rank).size();
    for (const std::string& s : cells[c]) width[c] = std::max(width[c], s.size());
  }
  std::string out;
  auto line = [&](auto cell) {
    std::string row;
    for (size_t c = 0; c < columns.size(); ++c) {
      row += fmt::format("{}{:<{}}", c == 0 ? "" : " | ", cell(c), width[c]);
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  };
  line([&](size_t c) { return fmt::format("rank {}", columns[c]->rank); });
  line([&](size_t c) { return std::string(width[c], '-'); });
  for (size_t r = 0; r < rows; ++r) {
    line([&](size_t c) { return r < cells[c].size() ? cells[c][r] : std::string(); });
  }
  return out;
}

}  // namespace meshrt::trace
