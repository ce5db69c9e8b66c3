#include "trace/analyze/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "trace/analyze/format.h"
#include "trace/analyze/own_history.h"

namespace meshrt::trace::analysis {
namespace {

// Finding kinds that mean the ranks' programs parted at the finding's op.
bool diverges(FindingKind kind) {
  return kind == FindingKind::kNotJoined || kind == FindingKind::kTypeMismatch ||
         kind == FindingKind::kSizeMismatch || kind == FindingKind::kDtypeMismatch;
}

// "train.cc:88" (meshrt) or a PyTorch frame's "train.py:7" as a call site.
CallSite parse_call_site(std::string_view caller) {
  const size_t colon = caller.rfind(':');
  int64_t line = 0;
  if (colon != std::string_view::npos) {
    const char* end = caller.data() + caller.size();
    const auto r = std::from_chars(caller.data() + colon + 1, end, line);
    if (r.ec == std::errc() && r.ptr == end) return {std::string(caller.substr(0, colon)), line};
  }
  return {std::string(caller), 0};
}

// One rank's ops in the numbering a finding uses: its collectives in the finding's group, or its
// side of the finding's p2p channel. Seqs rise.
struct Stream {
  const RankDump* dump = nullptr;
  const RankGroup* rg = nullptr;                 // Collectives,
  const std::vector<ChannelOp>* side = nullptr;  // or one side of a p2p channel.
  int peer = -1;                                 // p2p: the other end.

  size_t size() const {
    if (rg != nullptr) return rg->ops.size();
    return side != nullptr ? side->size() : 0;
  }
  int64_t seq(size_t i) const { return rg != nullptr ? rg->ops[i].seq : (*side)[i].seq; }
  // Op i's first entry, and its last (the closing entry of a coalesced group).
  const DumpEntry& first(size_t i) const {
    return dump->entries[rg != nullptr ? rg->first_entry(rg->ops[i]) : (*side)[i].entry];
  }
  const DumpEntry& last(size_t i) const {
    return dump->entries[rg != nullptr ? rg->last_entry(rg->ops[i]) : (*side)[i].entry];
  }
  // Op i's caller (a symbol; 0 when unknown): its first entry's, else its closing entry's.
  uint32_t caller(size_t i) const {
    const uint32_t c = first(i).caller;
    return c != 0 ? c : last(i).caller;
  }
  // The index of the last op numbered `seq` or lower; size() when there is none.
  size_t at_or_before(int64_t s) const {
    size_t lo = 0, hi = size();
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (seq(mid) <= s) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo == 0 ? size() : lo - 1;
  }
};

// What one rank did where the ranks of a finding parted.
struct RankFacts {
  std::optional<OpCall> first_unmatched;
  std::optional<OpCall> last_matched;
  bool moved_on = false;
  bool operator==(const RankFacts&) const = default;
};

class Explainer {
 public:
  explicit Explainer(Matching& m) : m_(m) {}

  Report run() {
    find_causes();
    for (Draft& d : m_.drafts) {
      if (d.finding.root && d.key.group != UINT32_MAX && diverges(d.finding.kind)) {
        d.finding.divergence = divergence(d);
      }
    }
    return report();
  }

 private:
  // ---- waits --------------------------------------------------------------------------------

  // The op a rank waits in, preferring one that has a finding of its own (the wait to follow).
  const Pending* blocked_in(int rank, const OpKey& except, int* finding) const {
    *finding = -1;
    const int32_t di = m_.dump_of_rank[rank];
    if (di < 0) return nullptr;
    const Pending* first = nullptr;
    for (const Pending& p : m_.states[di].pending) {
      if (p.key == except) continue;
      if (first == nullptr) first = &p;
      if (const auto it = finding_of_.find(p.key); it != finding_of_.end()) {
        *finding = it->second;
        return &p;
      }
    }
    // An op waiting on a member that left no dump (killed, crashed): the wait ends at that
    // member, so the rank is its victim, not a cause of its own.
    if (missing_draft_ >= 0) {
      for (const Pending& p : m_.states[di].pending) {
        if (!(p.key == except) && !dumpless(p.key, rank).empty()) {
          *finding = missing_draft_;
          return &p;
        }
      }
    }
    return first;
  }

  // The ranks `rank` waits on in op `key` that left no dump.
  std::vector<int> dumpless(const OpKey& key, int rank) const {
    std::vector<int> out;
    if (key.src >= 0) {
      const int other = rank == key.src ? key.dst : key.src;
      if (m_.dump_of(other) == nullptr) out.push_back(other);
      return out;
    }
    const Group& g = m_.groups[key.group];
    for (size_t m = 0; m < g.ranks.size(); ++m) {
      if (g.member_dump[m] < 0) out.push_back(g.ranks[m]);
    }
    return out;
  }

  // Where a rank waits: "is blocked in all_gather #17 on dim dp (group mesh0/dp [2, 6];
  // started; at train.cc:88 in MLP / forward), which rank 2 did not join"; `plural` for several
  // ranks in the same op.
  std::string wait_phrase(int rank, const Pending& p, int target, bool plural) const {
    const DumpEntry& e = m_.dump_of(rank)->entries[p.entry];
    std::string note(entry_state_name(e.state));
    if (e.caller != 0) note += fmt::format("; at {}", m_.symbols[e.caller]);
    if (e.scope != 0) note += fmt::format(" in {}", m_.symbols[e.scope]);
    std::string s =
        fmt::format("{} blocked in {} {}", plural ? "are" : "is",
                    op_phrase(p.key, m_.type_name(e), rank), m_.where(p.key.group, note));
    if (target >= 0) {
      const Finding& t = m_.drafts[target].finding;
      if (t.kind == FindingKind::kMissingDump) {
        s += fmt::format(", waiting for {}, which left no dump",
                         ranks_phrase(dumpless(p.key, rank)));
      } else if (t.kind == FindingKind::kNotJoined) {
        s += fmt::format(", which {} did not join", ranks_phrase(t.missing_ranks));
      } else {
        s += fmt::format(", which has a {} finding", finding_kind_name(t.kind));
      }
    }
    return s;
  }

  // For a rank with nothing pending: "has nothing pending; its last op in this group, all_reduce
  // #4, completed".
  std::string idle_phrase(int rank, uint32_t group, bool plural) const {
    const int32_t di = m_.dump_of_rank[rank];
    const RankDump& d = m_.dumps[di];
    std::string last = "no record in this group";
    for (size_t i = d.entries.size(); i-- > 0;) {
      const DumpEntry& e = d.entries[i];
      if (m_.states[di].global_group[e.group] != group) continue;
      const std::string op =
          m_.type(e).channel_op() && e.peer >= 0
              ? fmt::format("{} #{} {} rank {}", m_.type_name(e), e.channel_seq,
                            m_.type(e).send() ? "to" : "from", e.peer)
              : fmt::format("{} #{}", m_.type_name(e), e.is_p2p ? e.p2p_seq : e.collective_seq);
      last = fmt::format("{} op in this group, {}, {}", plural ? "their last" : "its last", op,
                         entry_state_name(e.state));
      break;
    }
    return fmt::format("{} nothing pending; {}", plural ? "have" : "has", last);
  }

  // What the given ranks are doing, grouped: "rank 6 is blocked in ...; ranks [1, 2] have ...".
  std::string doing(const std::vector<int>& ranks, const OpKey& except, uint32_t group) const {
    std::map<std::string, std::vector<int>> by_phrase;
    for (const int r : ranks) {
      int target = -1;
      const Pending* p = blocked_in(r, except, &target);
      by_phrase[p != nullptr ? wait_phrase(r, *p, target, false) : idle_phrase(r, group, false)]
          .push_back(r);
    }
    std::vector<std::string> parts;
    for (const auto& [phrase, rs] : by_phrase) {
      if (rs.size() == 1) {
        parts.push_back(fmt::format("rank {} {}", rs[0], phrase));
        continue;
      }
      int target = -1;
      const Pending* p = blocked_in(rs[0], except, &target);
      parts.push_back(fmt::format(
          "{} {}", ranks_phrase(rs),
          p != nullptr ? wait_phrase(rs[0], *p, target, true) : idle_phrase(rs[0], group, true)));
    }
    return fmt::format("{}", fmt::join(parts, "; "));
  }

  // ---- causes -------------------------------------------------------------------------------

  // Index in `rank`'s dump of the first entry of its op `seq` in global group `group`; -1 when
  // it has no record of it.
  int64_t entry_of(int rank, uint32_t group, int64_t seq) const {
    const Group& g = m_.groups[group];
    const auto pos = std::lower_bound(g.ranks.begin(), g.ranks.end(), rank);
    if (pos == g.ranks.end() || *pos != rank) return -1;
    const size_t m = pos - g.ranks.begin();
    if (g.member_dump[m] < 0 || g.member_slot[m] < 0) return -1;
    const RankGroup& rg = m_.states[g.member_dump[m]].groups[g.member_slot[m]];
    const CollOp* op = rg.find(seq);
    if (op == nullptr) return -1;
    // An op known only from the group's counters (its record overwritten) has no entry.
    const uint32_t entry = rg.first_entry(*op);
    return entry < m_.dumps[g.member_dump[m]].entries.size() ? static_cast<int64_t>(entry) : -1;
  }

  // Whether `rank`, which never issued collective `d`, completed more ops elsewhere after its
  // previous op in that group than an issuer did before entering it: in a program every rank
  // runs alike, it then skipped the op and went on. Ranks that are merely blocked elsewhere (a
  // real deadlock) completed nothing past that point. Returns the evidence, or "" for none.
  std::string went_on_past(const Draft& d, int rank) const {
    const RankDump* rd = m_.dump_of(rank);
    if (rd == nullptr || d.issuers.empty() || d.key.seq < 1) return "";
    const int32_t rdi = m_.dump_of_rank[rank];
    const int64_t r_prev = d.key.seq == 1 ? -1 : entry_of(rank, d.key.group, d.key.seq - 1);
    if (r_prev < 0 && (d.key.seq > 1 || rd->wrapped())) return "";  // Lost history: no claim.
    int64_t went = 0;
    std::vector<std::string> done;
    for (size_t i = static_cast<size_t>(r_prev + 1); i < rd->entries.size(); ++i) {
      const DumpEntry& e = rd->entries[i];
      const uint32_t g = m_.states[rdi].global_group[e.group];
      if (g == d.key.group) return "";  // It called this group again: a mismatch, not a skip.
      if (e.state != EntryState::kCompleted) continue;
      ++went;
      if (done.size() < 3) {
        const std::string dim = m_.groups[g].mesh_dim.value_or(m_.groups[g].name);
        done.push_back(fmt::format("{} {} #{}", dim, m_.type_name(e),
                                   e.is_p2p ? e.p2p_seq : e.collective_seq));
      }
    }
    // The fewest ops an issuer ran between its previous op here and this one.
    int64_t fewest = INT64_MAX;
    int fewest_rank = -1;
    for (const int w : d.issuers) {
      const RankDump* wd = m_.dump_of(w);
      const int64_t w_at = entry_of(w, d.key.group, d.key.seq);
      const int64_t w_prev = d.key.seq == 1 ? -1 : entry_of(w, d.key.group, d.key.seq - 1);
      if (wd == nullptr || w_at < 0 || (w_prev < 0 && (d.key.seq > 1 || wd->wrapped()))) continue;
      if (w_at - w_prev - 1 < fewest) {
        fewest = w_at - w_prev - 1;
        fewest_rank = w;
      }
    }
    if (fewest_rank < 0 || went <= fewest) return "";
    return fmt::format(
        "rank {} went on past it: after its previous op in this group it completed {} op{} "
        "elsewhere ({}{}), where rank {} ran {} before entering it",
        rank, went, went == 1 ? "" : "s", fmt::join(done, ", "), went > 3 ? ", ..." : "",
        fewest_rank, fewest);
  }

  // Whether the op at entries[at] of dump `di` is what that rank's own recent ops predict, by
  // group, op and call site (tail_period); nullopt when its history shows no clear pattern.
  std::optional<bool> keeps_own_pattern(size_t di, size_t at) const {
    const RankDump& d = m_.dumps[di];
    auto key = [&](size_t i) {
      const DumpEntry& e = d.entries[i];
      return std::tuple(m_.states[di].global_group[e.group], e.type, e.caller);
    };
    const std::optional<size_t> p =
        tail_period(at, [&](size_t i, size_t j) { return key(i) == key(j); });
    if (!p) return std::nullopt;
    return key(at) == key(at - *p);
  }

  // A cycle of not_joined waits, each blaming one rank, where exactly one of those ranks waits in
  // an op its own history does not predict while every other one's op continues its pattern:
  // that rank left the program's order (it skipped the op its peer waits in) and the cycle is
  // its consequence, not a deadlock. Returns the draft that rank is blamed in, or -1.
  int departed_in_cycle(const std::vector<int>& cycle, std::string* why) const {
    const std::vector<Draft>& drafts = m_.drafts;
    int departed = -1;
    for (const int c : cycle) {
      const Draft& d = drafts[c];
      if (d.finding.kind != FindingKind::kNotJoined || d.key.src >= 0 ||
          d.finding.culprit_ranks.size() != 1) {
        return -1;
      }
      const int r = d.finding.culprit_ranks.front();
      const int32_t di = r < static_cast<int>(m_.dump_of_rank.size()) ? m_.dump_of_rank[r] : -1;
      if (di < 0) return -1;
      const RankDump& dump = m_.dumps[di];
      size_t at = 0;
      while (at < dump.entries.size() && dump.entries[at].state == EntryState::kCompleted) ++at;
      if (at == dump.entries.size()) return -1;
      const std::optional<bool> keeps = keeps_own_pattern(di, at);
      if (!keeps) return -1;
      if (*keeps) continue;
      if (departed >= 0) return -1;
      departed = c;
      const DumpEntry& e = dump.entries[at];
      *why = fmt::format(
          "its own ops repeat in a fixed order that puts its next op on {}, where its peers wait, "
          "but it called {} {} on {} instead",
          m_.groups[d.key.group].name, m_.type_name(e),
          e.is_p2p ? fmt::format("#{}", e.p2p_seq) : fmt::format("#{}", e.collective_seq),
          m_.groups[m_.states[di].global_group[e.group]].name);
    }
    return departed;
  }

  void find_causes() {
    std::vector<Draft>& drafts = m_.drafts;
    for (size_t i = 0; i < drafts.size(); ++i) {
      if (drafts[i].finding.kind == FindingKind::kMissingDump) missing_draft_ = static_cast<int>(i);
    }
    for (size_t i = 0; i < drafts.size(); ++i) {
      if (drafts[i].key.group == UINT32_MAX) continue;
      finding_of_.emplace(drafts[i].key, static_cast<int>(i));
      if (diverges(drafts[i].finding.kind)) diverged_.insert(drafts[i].key);
    }
    // not_joined: who is to blame, and whose waits to follow.
    for (Draft& d : drafts) {
      if (d.finding.kind != FindingKind::kNotJoined) continue;
      const auto& missing = d.finding.missing_ranks;
      size_t blocked = 0;
      int dummy = 0;
      for (const int m : missing) blocked += blocked_in(m, d.key, &dummy) != nullptr ? 1 : 0;
      if (blocked == 0 && d.issuers.size() < missing.size()) {
        d.finding.culprit_ranks = d.issuers;  // The few issued an op the rest never called.
      } else {
        d.finding.culprit_ranks = missing;
        d.follow = missing;
        // A missing rank that went on past this op is no victim of its own wait: it skipped the
        // op, and whatever it waits in now follows from that (the wait chain would otherwise
        // close into a cycle of four equal "causes").
        if (d.key.src < 0) {
          for (const int r : missing) {
            if (std::string why = went_on_past(d, r); !why.empty()) {
              d.follow.clear();
              d.finding.culprit_ranks = {r};
              d.went_on = std::move(why);
              break;
            }
          }
        }
      }
    }
    // Follow waits: a finding whose ranks all wait in ops with findings of their own is a
    // consequence of those.
    std::vector<int> next(drafts.size(), -1);
    for (size_t i = 0; i < drafts.size(); ++i) {
      const Draft& d = drafts[i];
      if (d.follow.empty()) continue;
      int target = -1;
      bool all = true;
      for (const int r : d.follow) {
        int t = -1;
        blocked_in(r, d.key, &t);
        if (t < 0 || t == static_cast<int>(i)) {
          all = false;
          break;
        }
        if (target < 0) target = t;
      }
      if (all) next[i] = target;
    }
    // Roots: findings without a next; a chain that loops is a deadlock, all of whose members
    // are roots.
    std::vector<int> mark(drafts.size(), 0);  // 0 new, 1 on the current path, 2 done
    for (size_t start = 0; start < drafts.size(); ++start) {
      std::vector<int> path;
      int i = static_cast<int>(start);
      while (i >= 0 && mark[i] == 0) {
        mark[i] = 1;
        path.push_back(i);
        i = next[i];
      }
      if (i >= 0 && mark[i] == 1) {
        const auto cycle = std::find(path.begin(), path.end(), i);
        std::string why;
        if (const int c = departed_in_cycle(std::vector<int>(cycle, path.end()), &why); c >= 0) {
          next[c] = -1;  // The others' waits lead to it.
          drafts[c].went_on = std::move(why);
          for (const int p : path) mark[p] = 2;
          continue;
        }
        // A p2p deadlock traced to one op on a channel its peer never used: that op's issuer
        // (who sent to or received from the wrong peer) is the root, and the cycle follows.
        const auto fresh =
            std::count_if(cycle, path.end(), [&](int c) { return drafts[c].fresh_channel; });
        for (auto it = cycle; it != path.end(); ++it) {
          const bool opened = fresh == 1 && drafts[*it].fresh_channel;
          drafts[*it].cycle = true;
          if (fresh != 1 || opened) next[*it] = -1;
          if (opened) {
            drafts[*it].wrong_peer = true;
            drafts[*it].finding.culprit_ranks = drafts[*it].issuers;
          }
        }
      }
      for (const int p : path) mark[p] = 2;
    }
    // The same mistake without a cycle: the peer of a fresh-channel op finished or moved on (the
    // finding is a root that blames it), while another rank's p2p op in the group waits on the
    // issuer. In examples/stall's pipeline, rank 2 receives from rank 3, which never sends to
    // it, while rank 0's send to rank 2 waits: rank 2 named the wrong peer; rank 3 did its part.
    for (size_t i = 0; i < drafts.size(); ++i) {
      Draft& d = drafts[i];
      if (!d.fresh_channel || d.cycle || next[i] >= 0 || d.key.src < 0 ||
          d.finding.culprit_ranks != d.finding.missing_ranks) {
        continue;
      }
      const bool issuer_awaited = std::any_of(drafts.begin(), drafts.end(), [&](const Draft& o) {
        return &o != &d && next[&o - drafts.data()] == static_cast<int>(i) && o.key.src >= 0 &&
               o.key.group == d.key.group;
      });
      if (!issuer_awaited) continue;
      d.wrong_peer = true;
      d.finding.culprit_ranks = d.issuers;
    }
    for (size_t i = 0; i < drafts.size(); ++i) {
      drafts[i].cause = next[i];
      drafts[i].finding.root = next[i] < 0;
    }
    // A rank that died without a dump (a signal) while no wait ends at it explains nothing of
    // a hang that other roots explain: it is not a root beside them.
    if (missing_draft_ >= 0) {
      bool waited_on = false, other_root = false;
      for (size_t i = 0; i < drafts.size(); ++i) {
        waited_on |= next[i] == missing_draft_;
        other_root |= next[i] < 0 && static_cast<int>(i) != missing_draft_;
      }
      if (!waited_on && other_root) drafts[missing_draft_].finding.root = false;
    }
    mark_shifted();
    for (Draft& d : drafts) write_detail(d);
  }

  // A rank that skipped or added a collective shifts its sequence numbers in that group: every
  // later op there looks mismatched. Only the first mismatch is the cause.
  void mark_shifted() {
    std::vector<Draft>& drafts = m_.drafts;
    std::vector<size_t> order(drafts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const OpKey& x = drafts[a].key;
      const OpKey& y = drafts[b].key;
      return std::tie(x.group, x.src, x.dst, x.seq) < std::tie(y.group, y.src, y.dst, y.seq);
    });
    std::unordered_map<uint32_t, size_t> first_mismatch;  // group -> draft
    for (const size_t i : order) {
      Draft& d = drafts[i];
      if (d.key.src >= 0 || d.key.group == UINT32_MAX) continue;
      const auto it = first_mismatch.find(d.key.group);
      if (it != first_mismatch.end()) {
        const auto& first = drafts[it->second].finding.culprit_ranks;
        const bool overlap = std::any_of(
            d.finding.culprit_ranks.begin(), d.finding.culprit_ranks.end(),
            [&](int r) { return std::find(first.begin(), first.end(), r) != first.end(); });
        if (overlap && d.finding.root) {
          d.finding.root = false;
          d.shifted = true;
          d.cause = static_cast<int>(it->second);
        }
        continue;
      }
      const FindingKind k = d.finding.kind;
      if (k == FindingKind::kTypeMismatch || k == FindingKind::kSizeMismatch ||
          k == FindingKind::kDtypeMismatch) {
        first_mismatch.emplace(d.key.group, i);
      }
    }
  }

  void write_detail(Draft& d) {
    Finding& f = d.finding;
    if (f.kind == FindingKind::kNotJoined) {
      const std::string doing_now = doing(f.missing_ranks, d.key, d.key.group);
      if (d.wrong_peer) {
        const bool sent = d.issuers.front() == d.key.src;
        f.detail = fmt::format(
            "rank {} posted {} but rank {} never {} rank {} on this channel: no matching peer op "
            "(the wrong peer?); {}",
            d.issuers.front(), d.what, f.missing_ranks.front(), sent ? "received from" : "sent to",
            d.issuers.front(), doing_now);
      } else if (d.key.src >= 0) {
        // The issuer sent (it is the channel's source) or received; the peer posted neither.
        const OpKind unposted = d.issuers.front() == d.key.src ? OpKind::kRecv : OpKind::kSend;
        f.detail =
            fmt::format("{} did not post the {} matching rank {}'s {} (p2p channel {}->{}); {}",
                        ranks_phrase(f.missing_ranks), op_kind_name(unposted), d.issuers.front(),
                        d.what, d.key.src, d.key.dst, doing_now);
      } else if (f.culprit_ranks != f.missing_ranks) {
        f.detail = fmt::format("{} issued {} that {} never called; {}", ranks_phrase(d.issuers),
                               d.what, ranks_phrase(f.missing_ranks), doing_now);
      } else if (!d.went_on.empty()) {
        f.detail = fmt::format("rank {} skipped {} (issued by {}): {}; {}", f.culprit_ranks.front(),
                               d.what, ranks_phrase(d.issuers), d.went_on, doing_now);
      } else {
        f.detail =
            fmt::format("{} did not join {} (issued by {}); {}", ranks_phrase(f.missing_ranks),
                        d.what, ranks_phrase(d.issuers), doing_now);
      }
    } else if (f.kind == FindingKind::kStateMismatch && d.cause >= 0) {
      f.detail += "; " + doing(d.follow, d.key, d.key.group);
    }
    if (d.cycle) f.detail += "; these waits form a cycle (a deadlock)";
    if (d.shifted) {
      f.detail += fmt::format(
          "; likely a consequence of the mismatch at #{}: those ranks' sequence numbers shifted",
          m_.drafts[d.cause].key.seq);
    }
  }

  // ---- divergence ---------------------------------------------------------------------------

  // `rank`'s ops in the numbering of the op `key`.
  Stream stream(const OpKey& key, int rank) const {
    Stream s;
    s.dump = m_.dump_of(rank);
    if (s.dump == nullptr) return s;
    if (key.src >= 0) {
      const auto it = m_.channels.find(OpKey{.group = key.group, .src = key.src, .dst = key.dst});
      if (it == m_.channels.end()) return s;
      s.side = rank == key.src ? &it->second.sends : &it->second.recvs;
      s.peer = rank == key.src ? key.dst : key.src;
      return s;
    }
    const Group& g = m_.groups[key.group];
    const auto pos = std::lower_bound(g.ranks.begin(), g.ranks.end(), rank);
    if (pos == g.ranks.end() || *pos != rank) return s;
    const size_t m = pos - g.ranks.begin();
    if (g.member_dump[m] >= 0 && g.member_slot[m] >= 0) {
      s.rg = &m_.states[g.member_dump[m]].groups[g.member_slot[m]];
    }
    return s;
  }

  OpCall call(const Stream& s, size_t i) const {
    const uint32_t caller = s.caller(i);
    return OpCall{.op = std::string(m_.type_name(s.last(i))),
                  .seq = s.seq(i),
                  .peer = s.peer,
                  .at = caller != 0 ? parse_call_site(m_.symbols[caller]) : CallSite{}};
  }

  // What `rank` did around the op `key`: that op, and the last op before it that the others
  // matched; or, when it never issued the op, its last op before it.
  RankFacts facts(const OpKey& key, int rank) const {
    RankFacts f;
    const Stream s = stream(key, rank);
    const size_t i = s.at_or_before(key.seq);
    if (i == s.size()) return f;
    if (s.seq(i) != key.seq) {
      f.last_matched = call(s, i);
      f.moved_on = m_.states[m_.dump_of_rank[rank]].pending.empty();
      return f;
    }
    f.first_unmatched = call(s, i);
    for (size_t j = i; j-- > 0;) {
      OpKey earlier = key;
      earlier.seq = s.seq(j);
      if (!diverged_.contains(earlier)) {
        f.last_matched = call(s, j);
        break;
      }
    }
    return f;
  }

  // The groups of ranks that parted at `d`'s op: the issuers and the ranks that did not join,
  // or each way the op was called; the culprits' way first.
  std::vector<std::vector<int>> camps(const Draft& d) const {
    if (d.finding.kind == FindingKind::kNotJoined) return {d.issuers, d.finding.missing_ranks};
    return d.classes;
  }

  Divergence divergence(const Draft& d) const {
    Divergence out;
    const std::vector<std::vector<int>> parted = camps(d);
    for (const std::vector<int>& camp : parted) {
      std::vector<std::pair<RankFacts, std::vector<int>>> alike;  // In the order first seen.
      for (const int r : camp) {
        RankFacts f = facts(d.key, r);
        auto it =
            std::find_if(alike.begin(), alike.end(), [&](const auto& a) { return a.first == f; });
        if (it == alike.end()) {
          alike.emplace_back(std::move(f), std::vector<int>{r});
        } else {
          it->second.push_back(r);
        }
      }
      for (auto& [f, ranks] : alike) {
        out.sides.push_back(DivergenceSide{.ranks = std::move(ranks),
                                           .first_unmatched = std::move(f.first_unmatched),
                                           .last_matched = std::move(f.last_matched),
                                           .moved_on = f.moved_on});
      }
    }
    // Send and recv are called from different places by nature: compare collectives only.
    if (d.key.src < 0 && parted.size() == 2) out.call_sites_differ = site_split(d.key, parted);
    return out;
  }

  // The first op of the group before `key`'s, among those every rank's record still holds, at
  // which each of the two camps called from one place and the places differ.
  std::optional<CallSiteSplit> site_split(const OpKey& key,
                                          const std::vector<std::vector<int>>& parted) const {
    std::vector<std::vector<Stream>> streams(parted.size());
    int64_t lo = INT64_MIN;
    for (size_t c = 0; c < parted.size(); ++c) {
      for (const int r : parted[c]) {
        const Stream s = stream(key, r);
        if (s.size() == 0) continue;
        lo = std::max(lo, s.seq(0));
        streams[c].push_back(s);
      }
      if (streams[c].empty()) return std::nullopt;
    }
    for (int64_t seq = lo; seq < key.seq; ++seq) {
      CallSiteSplit split{.op = {}, .seq = seq, .sites = {}};
      for (const std::vector<Stream>& camp : streams) {
        std::optional<RanksAt> at = camp_site(camp, seq, &split.op);
        if (!at) break;
        split.sites.push_back(std::move(*at));
      }
      if (split.sites.size() == 2 && split.sites[0].at != split.sites[1].at) return split;
    }
    return std::nullopt;
  }

  // The one known place from which the camp's ranks called op `seq` (and the op's name), or
  // nullopt when none of them has it, a caller is unknown or they called from several places.
  std::optional<RanksAt> camp_site(const std::vector<Stream>& camp, int64_t seq,
                                   std::string* op) const {
    RanksAt out;
    uint32_t caller = 0;  // Compared as symbols: this runs for every op of the group.
    for (const Stream& s : camp) {
      const size_t i = s.at_or_before(seq);
      if (i == s.size() || s.seq(i) != seq) continue;
      const uint32_t c = s.caller(i);
      if (c == 0 || (caller != 0 && c != caller)) return std::nullopt;
      if (caller == 0) *op = m_.type_name(s.last(i));
      caller = c;
      out.ranks.push_back(s.dump->rank);
    }
    if (caller == 0) return std::nullopt;
    out.at = parse_call_site(m_.symbols[caller]);
    return out;
  }

  // ---- report -------------------------------------------------------------------------------

  Report report() {
    Report out;
    bool repaired = false;
    for (const RankDump& d : m_.dumps) {
      out.ranks.push_back(d.rank);
      if (!d.main_stack.empty()) out.main_stacks[d.rank] = d.main_stack;
      for (const DumpGroup& g : d.groups) {
        RepairEpoch& e = out.epochs[g.epoch];
        e.ranks.insert(g.ranks.begin(), g.ranks.end());
        e.groups.insert(g.name);
        repaired = repaired || g.epoch > 0;
      }
    }
    if (!repaired) out.epochs.clear();
    out.collectives_checked = m_.checked;
    std::vector<Draft>& drafts = m_.drafts;
    std::vector<size_t> order(drafts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Roots first, missing dumps first among them, then by group and op.
    auto key = [&](size_t i) {
      const Finding& f = drafts[i].finding;
      return std::tuple<bool, bool, const std::string&, const std::vector<int>&, int64_t, int32_t,
                        int32_t, FindingKind>(!f.root, f.kind != FindingKind::kMissingDump, f.group,
                                              f.group_ranks, f.seq.value_or(-1), drafts[i].key.src,
                                              drafts[i].key.dst, f.kind);
    };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
    for (const size_t i : order) {
      drafts[i].finding.cycle = drafts[i].cycle;
      drafts[i].finding.skipped = !drafts[i].went_on.empty();
      out.findings.push_back(std::move(drafts[i].finding));
    }
    return out;
  }

  Matching& m_;
  std::unordered_map<OpKey, int, OpKeyHash> finding_of_;
  int missing_draft_ = -1;                         // The missing_dump finding's draft, if any.
  std::unordered_set<OpKey, OpKeyHash> diverged_;  // Ops with a not_joined or mismatch finding.
};

}  // namespace

Report explain(Matching matching) { return Explainer(matching).run(); }

}  // namespace meshrt::trace::analysis
