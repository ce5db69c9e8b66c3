#include "trace/analyze/match.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <tuple>
#include <utility>

#include "trace/analyze/format.h"
#include "trace/analyze/own_history.h"

namespace meshrt::trace::analysis {
namespace {

using enum OpType::Flag;

int64_t first_numel(std::span<const int64_t> pool) {
  if (pool.empty()) return 0;
  int64_t numel = 1;
  const auto ndim = static_cast<size_t>(pool[0]);
  // Saturates: a crafted dump's dims must not overflow.
  for (size_t d = 1; d <= ndim && d < pool.size(); ++d) {
    if (__builtin_mul_overflow(numel, pool[d], &numel)) return INT64_MAX;
  }
  return numel;
}

bool same(std::span<const int64_t> a, std::span<const int64_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

class Matcher {
 public:
  Matcher(Matching& m, const AnalyzeOptions& options) : m_(m), options_(options) {}

  void run() {
    // PyTorch's analyzer: dumps up to 2.3 did not log all_to_all sizes.
    const std::string& v = m_.dumps.front().version;
    const int major = std::stoi(v), minor = std::stoi(v.substr(v.find('.') + 1));
    sizes_logged_ = major > 2 || (major == 2 && minor > 3);
    std::sort(m_.dumps.begin(), m_.dumps.end(),
              [](const RankDump& a, const RankDump& b) { return a.rank < b.rank; });
    intern_symbols();
    intern_groups();
    check_missing_dumps();
    index_ranks();
    match_collectives();
    match_p2p();
    add_missing_dump_finding();
  }

 private:
  // ---- interning ----------------------------------------------------------------------------

  uint32_t intern(const std::string& s) {
    const auto [it, added] = symbol_ids_.emplace(s, static_cast<uint32_t>(m_.symbols.size()));
    if (added) {
      m_.symbols.push_back(s);
      m_.types.push_back(op_type(s));
    }
    return it->second;
  }

  // Dumps number their strings independently; give every string one id across dumps so that
  // ops compare by integer.
  void intern_symbols() {
    for (RankDump& d : m_.dumps) {
      std::vector<uint32_t> ids(d.symbols.size());
      for (size_t i = 0; i < d.symbols.size(); ++i) ids[i] = intern(d.symbols[i]);
      for (DumpEntry& e : d.entries) {
        e.type = ids[e.type];
        e.caller = ids[e.caller];
        e.scope = ids[e.scope];
        for (const PoolSpan s : {e.input_dtypes, e.output_dtypes}) {
          for (uint32_t i = s.offset; i < s.offset + s.size; ++i) {
            d.pool[i] = ids[static_cast<size_t>(d.pool[i])];
          }
        }
      }
      d.symbols.clear();
    }
  }

  void intern_groups() {
    int max_rank = -1;
    for (const RankDump& d : m_.dumps) {
      max_rank = std::max({max_rank, d.rank, static_cast<int>(d.world_size.value_or(0)) - 1});
    }
    std::map<std::pair<std::string, std::vector<int>>, uint32_t> ids;
    std::map<uint32_t, std::pair<const std::string*, const RankDump*>> descs;  // First seen.
    m_.states.resize(m_.dumps.size());
    for (size_t di = 0; di < m_.dumps.size(); ++di) {
      const RankDump& d = m_.dumps[di];
      for (const DumpGroup& g : d.groups) {
        std::vector<int> ranks = g.ranks;
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        for (const int r : ranks) max_rank = std::max(max_rank, r);
        const auto [it, added] =
            ids.emplace(std::pair{g.name, ranks}, static_cast<uint32_t>(m_.groups.size()));
        // One group has one description everywhere (PyTorch's analyzer checks it too): ranks
        // that disagree created their groups in different orders or with different names.
        const auto [first, new_desc] = descs.emplace(it->second, std::pair{&g.desc, &d});
        if (!new_desc && *first->second.first != g.desc) {
          throw InputError(fmt::format(
              "group '{}' {} is '{}' in '{}' but '{}' in '{}': the ranks describe one group "
              "differently",
              g.name, format_ranks(ranks), *first->second.first, first->second.second->path, g.desc,
              d.path));
        }
        if (added) {
          m_.groups.push_back(Group{.name = g.name,
                                    .ranks = std::move(ranks),
                                    .mesh_dim = g.mesh_dim,
                                    .member_dump = {},
                                    .member_slot = {}});
        }
        m_.states[di].global_group.push_back(it->second);
      }
    }
    m_.dump_of_rank.assign(static_cast<size_t>(max_rank) + 1, -1);
    for (size_t di = 0; di < m_.dumps.size(); ++di) m_.dump_of_rank[m_.dumps[di].rank] = di;
    for (Group& g : m_.groups) {
      g.member_dump.assign(g.ranks.size(), -1);
      g.member_slot.assign(g.ranks.size(), -1);
      for (size_t i = 0; i < g.ranks.size(); ++i) g.member_dump[i] = m_.dump_of_rank[g.ranks[i]];
    }
    for (size_t di = 0; di < m_.dumps.size(); ++di) {
      const auto& gg = m_.states[di].global_group;
      for (size_t slot = 0; slot < gg.size(); ++slot) {
        Group& g = m_.groups[gg[slot]];
        // A dump may list groups its rank is not in; only members' records are matched.
        const auto pos = std::lower_bound(g.ranks.begin(), g.ranks.end(), m_.dumps[di].rank);
        if (pos != g.ranks.end() && *pos == m_.dumps[di].rank) {
          g.member_slot[pos - g.ranks.begin()] = static_cast<int32_t>(slot);
        }
      }
    }
  }

  void check_missing_dumps() {
    std::set<int> known;
    for (const Group& g : m_.groups) known.insert(g.ranks.begin(), g.ranks.end());
    int64_t world_size = 0;
    for (const RankDump& d : m_.dumps) world_size = std::max(world_size, d.world_size.value_or(0));
    for (int r = 0; r < world_size; ++r) known.insert(r);
    for (const int r : known) {
      if (m_.dump_of_rank[r] < 0) m_.missing_dumps.push_back(r);
    }
    if (!m_.missing_dumps.empty() && !options_.allow_incomplete_ranks) {
      throw InputError(
          fmt::format("missing dump files from {} (members of the dumped groups); pass "
                      "--allow-incomplete-ranks to analyze without them",
                      ranks_phrase(m_.missing_dumps)));
    }
  }

  // ---- per-rank indexes ---------------------------------------------------------------------

  bool closing(const DumpEntry& e) const { return m_.type(e).has(kClosing); }

  void index_ranks() {
    for (size_t di = 0; di < m_.dumps.size(); ++di) {
      RankDump& d = m_.dumps[di];
      RankState& st = m_.states[di];
      st.groups.resize(d.groups.size());
      for (size_t slot = 0; slot < d.groups.size(); ++slot) {
        st.groups[slot].group = st.global_group[slot];
      }
      mark_batches(d);
      // Collective ops: consecutive entries of a group with one sequence number.
      for (uint32_t i = 0; i < d.entries.size(); ++i) {
        const DumpEntry& e = d.entries[i];
        if (e.is_p2p) continue;
        RankGroup& rg = st.groups[e.group];
        if (rg.ops.empty() || rg.ops.back().seq != e.collective_seq) {
          rg.ops.push_back({.seq = e.collective_seq,
                            .first = static_cast<uint32_t>(rg.entries.size()),
                            .count = 0});
        }
        rg.entries.push_back(i);
        ++rg.ops.back().count;
      }
      for (const RankGroup& rg : st.groups) {
        for (const CollOp& op : rg.ops) {
          if (d.entries[rg.last_entry(op)].state != EntryState::kCompleted) {
            st.pending.push_back({rg.first_entry(op), OpKey{.group = rg.group, .seq = op.seq}});
          }
        }
      }
      index_channels(di);
      std::sort(st.pending.begin(), st.pending.end(),
                [](const Pending& a, const Pending& b) { return a.entry < b.entry; });
    }
  }

  // Batched p2p: the members stay "scheduled" and the closing entry carries the batch's state;
  // give the members that state. Dumps without `is_p2p` (PyTorch < 2.4) leave the closing entry
  // looking like a collective: recognise it by the p2p members before it.
  void mark_batches(RankDump& d) const {
    std::unordered_map<uint32_t, uint32_t> last_in_group;
    for (uint32_t i = 0; i < d.entries.size(); ++i) {
      DumpEntry& e = d.entries[i];
      if (closing(e) && !e.is_p2p) {
        const auto it = last_in_group.find(e.group);
        if (it != last_in_group.end()) {
          const DumpEntry& prev = d.entries[it->second];
          if (m_.type(prev).channel_op() && prev.p2p_seq == e.p2p_seq) e.is_p2p = true;
        }
      }
      last_in_group[e.group] = i;
    }
    std::unordered_map<uint32_t, std::pair<int64_t, EntryState>> batch;  // group -> closing
    for (uint32_t i = static_cast<uint32_t>(d.entries.size()); i-- > 0;) {
      DumpEntry& e = d.entries[i];
      if (!e.is_p2p) continue;
      if (closing(e)) {
        batch[e.group] = {e.p2p_seq, e.state};
      } else if (const auto it = batch.find(e.group);
                 it != batch.end() && it->second.first == e.p2p_seq) {
        e.state = it->second.second;
      }
    }
  }

  void index_channels(size_t di) {
    RankDump& d = m_.dumps[di];
    RankState& st = m_.states[di];
    std::unordered_map<uint64_t, int64_t> derived;  // (group, direction, peer) -> count
    for (uint32_t i = 0; i < d.entries.size(); ++i) {
      DumpEntry& e = d.entries[i];
      if (!e.is_p2p || !m_.type(e).channel_op()) continue;
      const uint32_t g = st.global_group[e.group];
      const bool send = m_.type(e).send();
      if (e.any_source) {
        any_source_.insert({g, d.rank});
        continue;
      }
      if (e.peer < 0) continue;
      const bool relative = e.channel_seq <= 0 && d.wrapped();
      if (e.channel_seq <= 0) {
        // PyTorch dumps: the n-th op of this rank with this peer in this direction.
        const uint64_t k =
            (uint64_t{g} << 33) | (uint64_t{send} << 32) | static_cast<uint32_t>(e.peer);
        e.channel_seq = ++derived[k];
      }
      const int src = send ? d.rank : e.peer;
      const int dst = send ? e.peer : d.rank;
      Channel& ch = m_.channels[OpKey{.group = g, .src = src, .dst = dst, .seq = 0}];
      (send ? ch.sends : ch.recvs).push_back({e.channel_seq, static_cast<uint32_t>(di), i});
      ch.relative |= relative;
      if (e.state != EntryState::kCompleted) {
        st.pending.push_back({i, OpKey{.group = g, .src = src, .dst = dst, .seq = e.channel_seq}});
      }
    }
  }

  Draft& add_draft(FindingKind kind, const OpKey& key, std::string_view op, std::string what) {
    const Group& g = m_.groups[key.group];
    Draft& d = m_.drafts.emplace_back();
    d.finding = Finding{.kind = kind,
                        .group = g.name,
                        .group_ranks = g.ranks,
                        .mesh_dim = g.mesh_dim,
                        .seq = key.seq,
                        .op = std::string(op),
                        .culprit_ranks = {},
                        .missing_ranks = {},
                        .detail = {},
                        .root = true,
                        .divergence = std::nullopt};
    d.key = key;
    d.what = std::move(what);
    return d;
  }

  // ---- collectives --------------------------------------------------------------------------

  // One rank's view of a (group, seq) collective.
  struct Issued {
    int rank = 0;
    const RankDump* dump = nullptr;
    const RankGroup* rg = nullptr;
    const CollOp* op = nullptr;

    const DumpEntry& entry(uint32_t i) const { return dump->entries[rg->entries[op->first + i]]; }
    const DumpEntry& last() const { return entry(op->count - 1); }
  };

  uint16_t op_flags(const Issued& x) const {
    if (x.op->count == 1) return m_.type(x.last()).flags;
    // A coalesced group is symmetric when all its members are.
    bool symmetric = true;
    uint16_t other = 0;
    for (uint32_t i = 0; i + 1 < x.op->count; ++i) {
      const uint16_t f = m_.type(x.entry(i)).flags;
      symmetric &= (f & kSymmetric) != 0;
      other |= f & ~kSymmetric;
    }
    return static_cast<uint16_t>(other | (symmetric ? kSymmetric : 0));
  }

  // The first difference between two ranks' ops, with a phrase for each side.
  struct Difference {
    FindingKind kind;
    std::string culprit;   // What the odd rank did.
    std::string majority;  // What the others did.
  };

  std::optional<Difference> compare(const Issued& a, const Issued& b) const {
    if (a.op->count != b.op->count) {
      const bool types = a.last().type != b.last().type;
      auto describe = [&](const Issued& x) {
        const uint32_t n = x.op->count - 1;
        return n == 0 ? fmt::format("called {}", m_.type_name(x.last()))
                      : fmt::format("coalesced {} op{}", n, n == 1 ? "" : "s");
      };
      return Difference{types ? FindingKind::kTypeMismatch : FindingKind::kSizeMismatch,
                        describe(a), describe(b)};
    }
    for (uint32_t i = 0; i < a.op->count; ++i) {
      const DumpEntry& ea = a.entry(i);
      const DumpEntry& eb = b.entry(i);
      auto member = [&] { return a.op->count > 1 ? fmt::format(" (member {})", i + 1) : ""; };
      if (ea.type != eb.type) {
        return Difference{FindingKind::kTypeMismatch,
                          fmt::format("called {}{}", m_.type_name(ea), member()),
                          fmt::format("called {}", m_.type_name(eb))};
      }
      const OpType& type = m_.type(ea);
      const bool in_differs = !type.has(kSkipInputSizes) &&
                              !same(a.dump->span(ea.input_sizes), b.dump->span(eb.input_sizes));
      const bool out_differs = !type.has(kSkipOutputSizes) &&
                               !same(a.dump->span(ea.output_sizes), b.dump->span(eb.output_sizes));
      if (in_differs || out_differs) {
        auto shapes = [&](const Issued& x, const DumpEntry& e) {
          return fmt::format("input {} and output {}", format_shapes(x.dump->span(e.input_sizes)),
                             format_shapes(x.dump->span(e.output_sizes)));
        };
        return Difference{FindingKind::kSizeMismatch,
                          fmt::format("passed {}{}", shapes(a, ea), member()),
                          fmt::format("passed {}", shapes(b, eb))};
      }
      auto dtypes_differ = [&](PoolSpan x, PoolSpan y, OpType::Flag skip) {
        return !type.has(skip) && x.size > 0 && y.size > 0 &&
               !same(a.dump->span(x), b.dump->span(y));
      };
      if (dtypes_differ(ea.input_dtypes, eb.input_dtypes, kSkipInputDtypes) ||
          dtypes_differ(ea.output_dtypes, eb.output_dtypes, kSkipOutputDtypes)) {
        return Difference{FindingKind::kDtypeMismatch,
                          fmt::format("used {}{}", dtypes(a, ea), member()),
                          fmt::format("used {}", dtypes(b, eb))};
      }
    }
    return std::nullopt;
  }

  std::string dtypes(const Issued& x, const DumpEntry& e) const {
    std::vector<std::string_view> in, out;
    for (const int64_t id : x.dump->span(e.input_dtypes)) in.push_back(m_.symbols[id]);
    for (const int64_t id : x.dump->span(e.output_dtypes)) out.push_back(m_.symbols[id]);
    return fmt::format("input {} and output {}", fmt::join(in, "/"), fmt::join(out, "/"));
  }

  // A wrapped ring's oldest op may have lost the first members of its coalesced group.
  bool truncated(const Issued& x) const {
    return x.dump->wrapped() && x.rg->entries[x.op->first] == 0 && closing(x.last());
  }

  // A member without an entry: did it not get there, or were its records lost?
  enum class Absence { kMissing, kUnknown };

  Absence absence(const RankDump& d, const RankGroup* rg, int64_t seq, int64_t issued_ns) const {
    if (rg != nullptr && !rg->ops.empty()) {
      // Its sequence numbers are its own count: a gap or an older seq means lost records.
      return seq > rg->ops.back().seq ? Absence::kMissing : Absence::kUnknown;
    }
    if (!d.wrapped()) return Absence::kMissing;
    // A wrapped ring with nothing of this group: missing only if the op is newer than the
    // oldest record the ring kept.
    const int64_t oldest_ns = d.entries.empty() ? 0 : d.entries.front().time_created_ns;
    return issued_ns > 0 && oldest_ns > 0 && issued_ns >= oldest_ns ? Absence::kMissing
                                                                    : Absence::kUnknown;
  }

  void match_collectives() {
    std::vector<Issued> issued;
    std::vector<int> missing, maybe_missing;
    for (uint32_t gi = 0; gi < m_.groups.size(); ++gi) {
      const Group& g = m_.groups[gi];
      std::vector<const RankGroup*> rgs(g.ranks.size(), nullptr);
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (size_t m = 0; m < g.ranks.size(); ++m) {
        if (g.member_dump[m] < 0 || g.member_slot[m] < 0) continue;
        const RankGroup& rg = m_.states[g.member_dump[m]].groups[g.member_slot[m]];
        rgs[m] = &rg;
        if (rg.ops.empty()) continue;
        lo = std::min(lo, rg.ops.front().seq);
        hi = std::max(hi, rg.ops.back().seq);
      }
      for (int64_t seq = lo; seq <= hi; ++seq) {
        issued.clear();
        missing.clear();
        maybe_missing.clear();
        bool unknown = false;
        for (size_t m = 0; m < g.ranks.size(); ++m) {
          if (g.member_dump[m] < 0) {
            unknown = true;
            continue;
          }
          const RankDump& d = m_.dumps[g.member_dump[m]];
          const CollOp* op = rgs[m] != nullptr ? rgs[m]->find(seq) : nullptr;
          if (op != nullptr) {
            Issued x{g.ranks[m], &d, rgs[m], op};
            if (truncated(x)) {
              unknown = true;
            } else {
              issued.push_back(x);
            }
          } else {
            maybe_missing.push_back(static_cast<int>(m));
          }
        }
        if (issued.empty()) continue;
        ++m_.checked;
        int64_t issued_ns = INT64_MAX;
        for (const Issued& x : issued) issued_ns = std::min(issued_ns, x.entry(0).time_created_ns);
        for (const int m : maybe_missing) {
          const RankDump& d = m_.dumps[g.member_dump[m]];
          if (absence(d, rgs[m], seq, issued_ns) == Absence::kMissing) {
            missing.push_back(g.ranks[m]);
          } else {
            unknown = true;
          }
        }
        check_collective(gi, seq, issued, missing, unknown);
      }
    }
  }

  void check_collective(uint32_t gi, int64_t seq, const std::vector<Issued>& issued,
                        const std::vector<int>& missing, bool unknown) {
    const uint16_t flags = op_flags(issued.front());
    bool any_completed = false;
    for (const Issued& x : issued) any_completed |= x.last().state == EntryState::kCompleted;
    const OpKey key{.group = gi, .seq = seq};
    const std::string_view type = m_.type_name(issued.front().last());
    const std::string what = fmt::format("{} #{}", type, seq);
    // Completing a symmetric collective takes every member: whoever has no record of it lost
    // the record or dumped before getting there, and it is no cause of a hang.
    if (!missing.empty() && !((flags & kSymmetric) != 0 && any_completed)) {
      Draft& d = add_draft(FindingKind::kNotJoined, key, type, what);
      d.finding.missing_ranks = missing;
      for (const Issued& x : issued) d.issuers.push_back(x.rank);
    }
    if (check_signatures(key, type, issued)) return;
    if (check_own_sizes(key, type, issued)) return;

    // all_to_all: shapes are per-rank splits; the elements sent must equal those received.
    if ((flags & kAllToAll) != 0 && missing.empty() && !unknown && issued.front().op->count == 1 &&
        sizes_logged_) {
      int64_t in = 0, out = 0;
      std::vector<int> uneven, even;
      for (const Issued& x : issued) {
        const int64_t xi = first_numel(x.dump->span(x.last().input_sizes));
        const int64_t xo = first_numel(x.dump->span(x.last().output_sizes));
        in += xi;
        out += xo;
        (xi == xo ? even : uneven).push_back(x.rank);
      }
      if (in != out) {
        Draft& d = add_draft(FindingKind::kNumelMismatch, key, type, what);
        // Who is wrong shows only when most ranks send as much as they receive.
        if (uneven.size() < even.size()) d.finding.culprit_ranks = uneven;
        d.finding.detail = fmt::format(
            "{}: the ranks send {} elements in all but receive {}: the split sizes disagree{}",
            what, in, out,
            uneven.size() < even.size()
                ? fmt::format(" ({} receive a different count than they send)",
                              ranks_phrase(uneven))
                : "");
        return;
      }
    }

    check_states(key, type, issued, (flags & kSymmetric) != 0);
  }

  // ---- a tie broken by each side's own history -----------------------------------------------

  // A loop's ops repeat: a side of a tie whose op is what its own recent ops predict kept its
  // pattern; the side that broke its own repetition (skipped or added a call) is the culprit.
  // Patterns (own_history.h) in the last kMaxHistory ops with consecutive sequence numbers (lost
  // records end the history).
  static constexpr size_t kMaxHistory = 256;

  // What a pattern compares: each entry's op, call site, scope, shapes and dtypes.
  std::vector<int64_t> signature(const Issued& x, const CollOp& op) const {
    std::vector<int64_t> sig;
    for (uint32_t i = 0; i < op.count; ++i) {
      const DumpEntry& e = x.dump->entries[x.rg->entries[op.first + i]];
      sig.insert(sig.end(), {e.type, e.caller, e.scope});
      for (const PoolSpan span : {e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes}) {
        const std::span<const int64_t> v = x.dump->span(span);
        sig.push_back(static_cast<int64_t>(v.size()));
        sig.insert(sig.end(), v.begin(), v.end());
      }
    }
    return sig;
  }

  // "all_reduce 136960 x Float", "coalesced 3 ops"; with `caller`, " at train.py:88" too.
  std::string short_phrase(const Issued& x, const CollOp& op, bool caller) const {
    if (op.count > 1) return fmt::format("coalesced {} ops", op.count - 1);
    const DumpEntry& e = x.dump->entries[x.rg->entries[op.first]];
    const bool in = e.input_sizes.size > 0;
    const std::span<const int64_t> sizes = x.dump->span(in ? e.input_sizes : e.output_sizes);
    const std::span<const int64_t> dtypes = x.dump->span(in ? e.input_dtypes : e.output_dtypes);
    std::string out(m_.type_name(e));
    if (!sizes.empty()) out += fmt::format(" {}", first_numel(sizes));
    if (!dtypes.empty()) out += fmt::format(" x {}", m_.symbols[dtypes[0]]);
    if (caller && e.caller != 0) out += fmt::format(" at {}", m_.symbols[e.caller]);
    return out;
  }

  enum class Pattern { kUnclear, kKept, kDeparted };

  // One rank's verdict on its op `x` against the repetition of its ops before it in the group.
  struct OwnPattern {
    Pattern verdict = Pattern::kUnclear;
    size_t period = 0;
    std::vector<const CollOp*> cycle;  // The last period's ops, oldest first.
    const CollOp* predicted = nullptr;
  };

  OwnPattern own_pattern(const Issued& x) const {
    OwnPattern out;
    const auto at = static_cast<size_t>(x.op - x.rg->ops.data());
    size_t start = at;
    while (start > 0 && at - start < kMaxHistory &&
           x.rg->ops[start - 1].seq == x.rg->ops[start].seq - 1) {
      --start;
    }
    const size_t n = at - start;
    std::vector<std::vector<int64_t>> h;
    h.reserve(n);
    for (size_t i = start; i < at; ++i) h.push_back(signature(x, x.rg->ops[i]));
    const std::optional<size_t> p =
        tail_period(n, [&](size_t i, size_t j) { return h[i] == h[j]; });
    if (!p) return out;
    out.period = *p;
    for (size_t i = at - *p; i < at; ++i) out.cycle.push_back(&x.rg->ops[i]);
    out.predicted = &x.rg->ops[at - *p];
    out.verdict = signature(x, *x.op) == h[n - *p] ? Pattern::kKept : Pattern::kDeparted;
    return out;
  }

  // A tie broken: the class that departed from its own pattern, and why.
  struct Tie {
    size_t departed = 0;
    std::string why;
  };

  // Exactly one class departed from its ranks' own patterns while every other class kept its
  // own; nullopt when the histories do not say so clearly.
  std::optional<Tie> break_tie_by_history(const OpKey& key, const std::vector<Issued>& issued,
                                          const std::vector<std::vector<size_t>>& classes) const {
    std::optional<size_t> departed;
    std::vector<OwnPattern> first(classes.size());
    for (size_t c = 0; c < classes.size(); ++c) {
      Pattern side = Pattern::kUnclear;
      for (size_t k = 0; k < classes[c].size(); ++k) {
        OwnPattern own = own_pattern(issued[classes[c][k]]);
        if (own.verdict == Pattern::kUnclear || (k > 0 && own.verdict != side)) return std::nullopt;
        side = own.verdict;
        if (k == 0) first[c] = std::move(own);
      }
      if (side == Pattern::kDeparted) {
        if (departed) return std::nullopt;
        departed = c;
      }
    }
    if (!departed) return std::nullopt;
    const size_t c = *departed;
    const Issued& x = issued[classes[c].front()];
    const OwnPattern& own = first[c];
    // Name call sites only where the ops would otherwise read alike.
    const bool callers = short_phrase(x, *x.op, false) == short_phrase(x, *own.predicted, false);
    std::vector<std::string> cycle;
    for (size_t i = 0; i < own.cycle.size() && i < 6; ++i) {
      cycle.push_back(short_phrase(x, *own.cycle[i], callers));
    }
    if (own.cycle.size() > 6) cycle.push_back("...");
    std::vector<int> keepers;
    for (size_t k = 0; k < classes.size(); ++k) {
      if (k == c) continue;
      for (const size_t i : classes[k]) keepers.push_back(issued[i].rank);
    }
    std::sort(keepers.begin(), keepers.end());
    std::vector<int> culprits;
    for (const size_t i : classes[c]) culprits.push_back(issued[i].rank);
    const bool one = culprits.size() == 1;
    return Tie{
        c, fmt::format("{} departed from {} own pattern: {} ops on {} repeat every {} ({}), "
                       "and at #{} {} called {} where {} history predicts {}; {} kept {} own",
                       ranks_phrase(culprits), one ? "its" : "their", one ? "its" : "their",
                       m_.groups[key.group].name, own.period, fmt::join(cycle, ", "), key.seq,
                       one ? "it" : "they", short_phrase(x, *x.op, callers), one ? "its" : "their",
                       short_phrase(x, *own.predicted, callers), ranks_phrase(keepers),
                       keepers.size() == 1 ? "its" : "their")};
  }

  // Majority signature: classes of ranks with equal ops, largest first (usually all agree).
  // Adds a mismatch finding per odd class, or one for all when no class is a majority; returns
  // whether the ranks disagreed.
  bool check_signatures(const OpKey& key, std::string_view type,
                        const std::vector<Issued>& issued) {
    size_t agree = 1;
    while (agree < issued.size() && !compare(issued.front(), issued[agree])) ++agree;
    if (agree == issued.size()) return false;
    std::vector<std::vector<size_t>> classes(1);
    for (size_t i = 0; i < agree; ++i) classes.front().push_back(i);
    for (size_t i = agree; i < issued.size(); ++i) {
      auto it = std::find_if(classes.begin(), classes.end(), [&](const std::vector<size_t>& c) {
        return !compare(issued[c.front()], issued[i]);
      });
      if (it == classes.end()) {
        classes.push_back({i});
      } else {
        it->push_back(i);
      }
    }
    std::vector<std::vector<int>> ranks;
    std::stable_sort(classes.begin(), classes.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (const std::vector<size_t>& c : classes) {
      std::vector<int>& r = ranks.emplace_back();
      for (const size_t i : c) r.push_back(issued[i].rank);
    }
    auto diff = [&](size_t a, size_t b) {
      return *compare(issued[classes[a].front()], issued[classes[b].front()]);
    };
    const std::string what = fmt::format("{} #{}", type, key.seq);
    // A group too small for a majority (a tp pair): the class that did what the sibling groups
    // of its mesh dim did at this seq is right.
    size_t siblings = 0;
    if (classes[0].size() <= classes[1].size()) {
      if (const auto right = class_of_siblings(key, issued, classes, siblings)) {
        std::swap(classes[0], classes[*right]);
        std::swap(ranks[0], ranks[*right]);
      } else {
        siblings = 0;
      }
    }
    if (siblings == 0 && classes[0].size() <= classes[1].size()) {
      if (const std::optional<Tie> tie = break_tie_by_history(key, issued, classes)) {
        const size_t c = tie->departed;
        const size_t kept = c == 0 ? 1 : 0;
        const Difference dk = diff(c, kept);
        Draft& d = add_draft(dk.kind, key, type, what);
        d.finding.culprit_ranks = ranks[c];
        std::vector<int> keepers;
        d.classes = {ranks[c]};
        for (size_t k = 0; k < ranks.size(); ++k) {
          if (k == c) continue;
          keepers.insert(keepers.end(), ranks[k].begin(), ranks[k].end());
          d.classes.push_back(ranks[k]);
        }
        std::sort(keepers.begin(), keepers.end());
        d.finding.detail =
            fmt::format("{}: {} {} while {} {} (no majority; {})", what, ranks_phrase(ranks[c]),
                        dk.culprit, ranks_phrase(keepers), dk.majority, tie->why);
        return true;
      }
    }
    if (siblings > 0 || classes[0].size() > classes[1].size()) {
      for (size_t c = 1; c < classes.size(); ++c) {
        const Difference d01 = diff(c, 0);
        Draft& d = add_draft(d01.kind, key, type, what);
        d.finding.culprit_ranks = ranks[c];
        const std::string agree =
            siblings > 0 ? fmt::format("as did all {} other {} group{} of dim {}", siblings,
                                       m_.groups[key.group].name, siblings == 1 ? "" : "s",
                                       *m_.groups[key.group].mesh_dim)
                         : fmt::format("{} of {} agree", classes[0].size(), issued.size());
        d.finding.detail = fmt::format("{}: {} {} while {} {} ({})", what, ranks_phrase(ranks[c]),
                                       d01.culprit, ranks_phrase(ranks[0]), d01.majority, agree);
        d.classes = {ranks[c], ranks[0]};
      }
      return true;
    }
    // No majority: everyone who disagrees is a suspect.
    Draft& d = add_draft(diff(1, 0).kind, key, type, what);
    std::vector<std::string> parts;
    for (size_t c = 0; c < classes.size(); ++c) {
      d.finding.culprit_ranks.insert(d.finding.culprit_ranks.end(), ranks[c].begin(),
                                     ranks[c].end());
      parts.push_back(
          fmt::format("{} {}", ranks_phrase(ranks[c]), diff(c, c == 0 ? 1 : 0).culprit));
    }
    std::sort(d.finding.culprit_ranks.begin(), d.finding.culprit_ranks.end());
    d.finding.detail = fmt::format("{}: no majority: {}", what, fmt::join(parts, "; "));
    d.classes = std::move(ranks);
    return true;
  }

  // PyTorch's own-size rules: all_reduce's input and output are the same size, all_gather's
  // output is the input times the group size, reduce_scatter's input the output times it (or,
  // in list form, one tensor per member). The ranks agree here, so all of them called it so.
  bool check_own_sizes(const OpKey& key, std::string_view type, const std::vector<Issued>& issued) {
    const Issued& x = issued.front();
    if (x.op->count != 1) return false;
    const DumpEntry& e = x.last();
    const std::optional<OpKind> kind = m_.type(e).kind;
    const std::span<const int64_t> in = x.dump->span(e.input_sizes);
    const std::span<const int64_t> out = x.dump->span(e.output_sizes);
    if (!kind || in.empty() || out.empty()) return false;
    // Both [] (one shape of no dims each): meshrt's record of an op of no elements, which fits.
    if (in.size() == 1 && in[0] == 0 && out.size() == 1 && out[0] == 0) return false;
    const auto k = static_cast<int64_t>(m_.groups[key.group].ranks.size());
    const int64_t in_numel = first_numel(in), out_numel = first_numel(out);
    auto shapes = [](std::span<const int64_t> pool) {
      size_t n = 0;
      for (size_t i = 0; i < pool.size(); i += static_cast<size_t>(pool[i]) + 1) ++n;
      return static_cast<int64_t>(n);
    };
    auto times = [](int64_t a, int64_t b) {
      int64_t r = 0;
      return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
    };
    std::string rule;
    if (*kind == OpKind::kAllReduce && in_numel != out_numel) {
      rule = "all_reduce needs its output the size of its input";
    } else if (*kind == OpKind::kAllGather && shapes(out) != k && out_numel != times(in_numel, k)) {
      rule = fmt::format("all_gather needs an output {} times its input (the group's size)", k);
    } else if (*kind == OpKind::kReduceScatter && shapes(in) != k &&
               in_numel != times(out_numel, k)) {
      rule = fmt::format("reduce_scatter needs an input {} times its output (the group's size)", k);
    }
    if (rule.empty()) return false;
    const std::string what = fmt::format("{} #{}", type, key.seq);
    Draft& d = add_draft(FindingKind::kSizeMismatch, key, type, what);
    for (const Issued& i : issued) d.finding.culprit_ranks.push_back(i.rank);
    d.finding.detail = fmt::format("{}: {} passed input {} and output {}: {}", what,
                                   ranks_phrase(d.finding.culprit_ranks), format_shapes(in),
                                   format_shapes(out), rule);
    return true;
  }

  // The one class of `issued` whose op every sibling group (same name and mesh dim, other
  // ranks) issued at key.seq, all its members alike; nullopt when there is none or several.
  // `siblings` is set to the number of sibling groups that issued it.
  std::optional<size_t> class_of_siblings(const OpKey& key, const std::vector<Issued>& issued,
                                          const std::vector<std::vector<size_t>>& classes,
                                          size_t& siblings) const {
    const Group& g = m_.groups[key.group];
    if (!g.mesh_dim) return std::nullopt;
    std::vector<size_t> votes(classes.size(), 0);
    siblings = 0;
    for (uint32_t si = 0; si < m_.groups.size(); ++si) {
      const Group& sg = m_.groups[si];
      if (si == key.group || sg.name != g.name || sg.mesh_dim != g.mesh_dim) continue;
      std::vector<bool> agrees(classes.size(), true);
      bool any = false;
      for (size_t m = 0; m < sg.ranks.size(); ++m) {
        if (sg.member_dump[m] < 0 || sg.member_slot[m] < 0) continue;
        const RankGroup& rg = m_.states[sg.member_dump[m]].groups[sg.member_slot[m]];
        const CollOp* op = rg.find(key.seq);
        if (op == nullptr) continue;
        const Issued x{sg.ranks[m], &m_.dumps[sg.member_dump[m]], &rg, op};
        any = true;
        for (size_t c = 0; c < classes.size(); ++c) {
          if (compare(issued[classes[c].front()], x)) agrees[c] = false;
        }
      }
      if (!any) continue;
      ++siblings;
      for (size_t c = 0; c < classes.size(); ++c) votes[c] += agrees[c] ? 1 : 0;
    }
    std::optional<size_t> right;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (siblings == 0 || votes[c] != siblings) continue;
      if (right) return std::nullopt;
      right = c;
    }
    return right;
  }

  // Members whose records of one op are in different states. PyTorch's analyzer reports any
  // difference (COLLECTIVE_STATE_MISMATCH) and blames whoever differs from the first rank; dumps
  // are taken at different moments, so here only the ranks furthest behind are blamed: the
  // others are in the op (or done) and wait on them.
  void check_states(const OpKey& key, std::string_view type, const std::vector<Issued>& issued,
                    bool symmetric) {
    std::map<EntryState, std::vector<int>> by_state;
    // Scheduled on a rank whose dump shows ops starting: that rank never started it.
    std::vector<int> never_started;
    for (const Issued& x : issued) {
      const EntryState state = x.last().state;
      by_state[state].push_back(x.rank);
      if (state == EntryState::kScheduled && x.dump->records_starts) {
        never_started.push_back(x.rank);
      }
    }
    if (by_state.size() < 2) return;
    const auto completed = by_state.find(EntryState::kCompleted);
    const std::string what = fmt::format("{} #{}", type, key.seq);
    if (symmetric && completed != by_state.end()) {
      // Completing a symmetric op takes every member, so the others were in it when they
      // dumped (or their records say nothing of starts). A member that never started it is
      // what a correct transport cannot produce.
      if (never_started.empty()) return;
      Draft& d = add_draft(FindingKind::kStateMismatch, key, type, what);
      d.finding.culprit_ranks = never_started;
      d.follow = never_started;
      d.finding.detail = fmt::format(
          "{}: {} completed it but {} never started it (its record is still scheduled, and "
          "its dump shows ops starting): a symmetric collective completes only when every "
          "member takes part, so this cannot happen with a correct transport; {} is where it "
          "stopped, and the transport or the recorder completed the op without {}",
          what, ranks_phrase(completed->second), ranks_phrase(never_started),
          ranks_phrase(never_started), never_started.size() == 1 ? "it" : "them");
      return;
    }
    const auto& [lowest, behind] = *by_state.begin();  // EntryState orders by progress.
    Draft& d = add_draft(FindingKind::kStateMismatch, key, type, what);
    d.finding.culprit_ranks = behind;
    d.follow = behind;
    std::vector<std::string> parts;
    for (auto it = by_state.rbegin(); it != by_state.rend(); ++it) {
      parts.push_back(fmt::format("{} {}", ranks_phrase(it->second), entry_state_name(it->first)));
    }
    std::string why;
    if (lowest == EntryState::kScheduled && never_started == behind) {
      why = fmt::format("{} never started it: {} stream never got to it", ranks_phrase(behind),
                        behind.size() == 1 ? "its" : "their");
    } else if (lowest == EntryState::kScheduled) {
      why = fmt::format("{} {} not started it (or {} dump records no starts: it may be running)",
                        ranks_phrase(behind), behind.size() == 1 ? "has" : "have",
                        behind.size() == 1 ? "its" : "their");
    } else {
      why =
          fmt::format("{} {} still in it", ranks_phrase(behind), behind.size() == 1 ? "is" : "are");
    }
    d.finding.detail = fmt::format("{} is {}: {}", what, fmt::join(parts, ", "), why);
  }

  // ---- p2p ----------------------------------------------------------------------------------

  void match_p2p() {
    std::vector<OpKey> keys;
    for (const auto& [key, ch] : m_.channels) keys.push_back(key);
    std::sort(keys.begin(), keys.end(), [](const OpKey& a, const OpKey& b) {
      return std::tie(a.group, a.src, a.dst) < std::tie(b.group, b.src, b.dst);
    });
    for (const OpKey& key : keys) {
      Channel& ch = m_.channels[key];
      auto by_seq = [](const ChannelOp& a, const ChannelOp& b) { return a.seq < b.seq; };
      std::sort(ch.sends.begin(), ch.sends.end(), by_seq);
      std::sort(ch.recvs.begin(), ch.recvs.end(), by_seq);
      // Derived numbers of a wrapped ring start at an unknown offset; an any-source recv could
      // have taken any send.
      if (ch.relative || any_source_.contains({key.group, key.dst})) continue;
      size_t s = 0, r = 0;
      while (s < ch.sends.size() || r < ch.recvs.size()) {
        ++m_.checked;
        if (s < ch.sends.size() && r < ch.recvs.size() && ch.sends[s].seq == ch.recvs[r].seq) {
          check_pair(key, ch.sends[s++], ch.recvs[r++]);
        } else if (r >= ch.recvs.size() ||
                   (s < ch.sends.size() && ch.sends[s].seq < ch.recvs[r].seq)) {
          lone_p2p(key, ch.sends[s++], ch.recvs, key.dst, true);
        } else {
          lone_p2p(key, ch.recvs[r++], ch.sends, key.src, false);
        }
      }
    }
  }

  void check_pair(const OpKey& channel, const ChannelOp& send, const ChannelOp& recv) {
    const RankDump& sd = m_.dumps[send.dump];
    const RankDump& rd = m_.dumps[recv.dump];
    const DumpEntry& se = sd.entries[send.entry];
    const DumpEntry& re = rd.entries[recv.entry];
    const OpKey key{channel.group, channel.src, channel.dst, send.seq};
    std::optional<FindingKind> kind;
    std::string detail;
    if (!same(sd.span(se.input_sizes), rd.span(re.output_sizes))) {
      kind = FindingKind::kSizeMismatch;
      detail = fmt::format("rank {} sends {} but rank {} receives into {}", channel.src,
                           format_shapes(sd.span(se.input_sizes)), channel.dst,
                           format_shapes(rd.span(re.output_sizes)));
    } else if (se.input_dtypes.size > 0 && re.output_dtypes.size > 0 &&
               !same(sd.span(se.input_dtypes), rd.span(re.output_dtypes))) {
      kind = FindingKind::kDtypeMismatch;
      detail = fmt::format("rank {} sends {} but rank {} receives {}", channel.src,
                           m_.symbols[sd.span(se.input_dtypes)[0]], channel.dst,
                           m_.symbols[rd.span(re.output_dtypes)[0]]);
    }
    if (!kind) return;
    const std::string_view send_name = op_kind_name(OpKind::kSend);
    Draft& d = add_draft(*kind, key, send_name,
                         fmt::format("{} #{} from rank {} to rank {}", send_name, send.seq,
                                     channel.src, channel.dst));
    // One sender, one receiver: nothing tells which side is wrong.
    d.finding.culprit_ranks = {std::min(channel.src, channel.dst),
                               std::max(channel.src, channel.dst)};
    d.finding.detail = fmt::format("{}: {}", d.what, detail);
    d.classes = {{channel.src}, {channel.dst}};
  }

  // A send without its recv (or the reverse): not joined by the peer, unless the peer's records
  // were lost.
  void lone_p2p(const OpKey& channel, const ChannelOp& op, const std::vector<ChannelOp>& others,
                int peer, bool is_send) {
    const DumpEntry& e = m_.dumps[op.dump].entries[op.entry];
    // A completed recv proves its send was issued.
    if (!is_send && e.state == EntryState::kCompleted) return;
    const RankDump* pd = m_.dump_of(peer);
    if (pd == nullptr) return;
    if (!others.empty() && op.seq <= others.back().seq) return;  // Lost records.
    if (others.empty() && pd->wrapped()) {
      const int64_t oldest_ns = pd->entries.empty() ? 0 : pd->entries.front().time_created_ns;
      if (e.time_created_ns <= 0 || oldest_ns <= 0 || e.time_created_ns < oldest_ns) return;
    }
    const OpKey key{channel.group, channel.src, channel.dst, op.seq};
    const int issuer = m_.dumps[op.dump].rank;
    const std::string_view type = op_kind_name(is_send ? OpKind::kSend : OpKind::kRecv);
    Draft& d = add_draft(FindingKind::kNotJoined, key, type, op_phrase(key, type, issuer));
    d.finding.missing_ranks = {peer};
    d.issuers = {issuer};
    d.fresh_channel = others.empty() && !pd->wrapped();
  }

  // ---- missing dumps ------------------------------------------------------------------------

  // How ranks without a dump ended, as the launcher told (rank_notes), else what is likely.
  std::string fate(const std::vector<int>& missing) const {
    std::vector<std::string> known;
    for (const int r : missing) {
      const auto it = options_.rank_notes.find(r);
      if (it == options_.rank_notes.end()) {
        known.clear();
        break;
      }
      known.push_back(missing.size() == 1 ? it->second : fmt::format("rank {} {}", r, it->second));
    }
    if (!known.empty()) return fmt::format("{}", fmt::join(known, "; "));
    return missing.size() == 1 ? "it may have crashed or exited before dumping"
                               : "they may have crashed or exited before dumping";
  }

  void add_missing_dump_finding() {
    const std::vector<int>& missing = m_.missing_dumps;
    if (missing.empty()) return;
    // Report it against the largest group that has such a member (usually the world).
    const Group* best = nullptr;
    for (const Group& g : m_.groups) {
      const bool has =
          std::any_of(g.member_dump.begin(), g.member_dump.end(), [](int32_t d) { return d < 0; });
      if (has && (best == nullptr || g.ranks.size() > best->ranks.size())) best = &g;
    }
    // Where it was last seen: the oldest op its peers issued with it and never finished is the
    // one it died in (or left), as the survivors' own errors say.
    const Pending* last = nullptr;
    size_t last_dump = 0;
    for (size_t di = 0; di < m_.dumps.size(); ++di) {
      for (const Pending& p : m_.states[di].pending) {
        const Group& g = m_.groups[p.key.group];
        const bool with_missing = std::any_of(missing.begin(), missing.end(), [&](int r) {
          return std::binary_search(g.ranks.begin(), g.ranks.end(), r);
        });
        if (!with_missing) continue;
        const int64_t ns = m_.dumps[di].entries[p.entry].time_created_ns;
        if (last == nullptr || ns < m_.dumps[last_dump].entries[last->entry].time_created_ns) {
          last = &p;
          last_dump = di;
        }
        break;  // Oldest first: this dump's later pending ops follow from it.
      }
    }
    std::string seen, op;
    if (last != nullptr) {
      std::vector<int> waiting;
      for (size_t di = 0; di < m_.dumps.size(); ++di) {
        for (const Pending& p : m_.states[di].pending) {
          if (p.key == last->key) waiting.push_back(m_.dumps[di].rank);
        }
      }
      std::sort(waiting.begin(), waiting.end());
      best = &m_.groups[last->key.group];
      const RankDump& dump = m_.dumps[last_dump];
      op = std::string(m_.type_name(dump.entries[last->entry]));
      seen = fmt::format(", last seen in {} {}", op_phrase(last->key, op, dump.rank),
                         m_.where(last->key.group, fmt::format("{} entered it and never finished",
                                                               ranks_phrase(waiting))));
    }
    Draft& d = m_.drafts.emplace_back();
    d.finding = Finding{
        .kind = FindingKind::kMissingDump,
        .group = best != nullptr ? best->name : "",
        .group_ranks = best != nullptr ? best->ranks : std::vector<int>{},
        .mesh_dim = best != nullptr ? best->mesh_dim : std::nullopt,
        .seq = last != nullptr ? std::optional<int64_t>(last->key.seq) : std::nullopt,
        .op = op,
        .culprit_ranks = missing,
        .missing_ranks = missing,
        .detail = fmt::format(
            "no dump from {}: {}{}; ops involving {} were judged from the other ranks' records "
            "only",
            ranks_phrase(missing), fate(missing), seen, missing.size() == 1 ? "it" : "them"),
        .root = true,
        .divergence = std::nullopt};
    d.key = OpKey{.group = UINT32_MAX};
  }

  Matching& m_;
  const AnalyzeOptions& options_;
  std::unordered_map<std::string, uint32_t> symbol_ids_;
  std::set<std::pair<uint32_t, int>> any_source_;  // (group, rank) with any-source recvs.
  bool sizes_logged_ = true;  // all_to_all sizes are in dumps after version 2.3.
};

}  // namespace

const CollOp* RankGroup::find(int64_t seq) const {
  if (ops.empty() || seq < ops.front().seq || seq > ops.back().seq) return nullptr;
  // Seqs are consecutive unless records were lost: try the direct index first.
  const auto guess = static_cast<size_t>(seq - ops.front().seq);
  if (guess < ops.size() && ops[guess].seq == seq) return &ops[guess];
  const auto it = std::lower_bound(ops.begin(), ops.end(), seq,
                                   [](const CollOp& op, int64_t s) { return op.seq < s; });
  return it != ops.end() && it->seq == seq ? &*it : nullptr;
}

size_t OpKeyHash::operator()(const OpKey& k) const {
  uint64_t h = k.group;
  h = h * 0x9E3779B97F4A7C15ULL ^ static_cast<uint32_t>(k.src);
  h = h * 0x9E3779B97F4A7C15ULL ^ static_cast<uint32_t>(k.dst);
  h = h * 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(k.seq);
  return static_cast<size_t>(h ^ (h >> 29));
}

const RankDump* Matching::dump_of(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(dump_of_rank.size()) || dump_of_rank[rank] < 0) {
    return nullptr;
  }
  return &dumps[dump_of_rank[rank]];
}

std::string Matching::where(uint32_t group, std::string_view note) const {
  const Group& g = groups[group];
  if (g.mesh_dim) {
    return fmt::format("on dim {} (group {} {}; {})", *g.mesh_dim, g.name, format_ranks(g.ranks),
                       note);
  }
  return fmt::format("in group {} {} ({})", g.name, format_ranks(g.ranks), note);
}

Matching match(std::vector<RankDump> dumps, const AnalyzeOptions& options) {
  Matching m;
  m.dumps = std::move(dumps);
  Matcher(m, options).run();
  return m;
}

std::string op_phrase(const OpKey& key, std::string_view type, int as_rank) {
  if (key.src < 0) return fmt::format("{} #{}", type, key.seq);
  if (as_rank == key.src) return p2p_op_text(op_kind_name(OpKind::kSend), key.seq, key.dst);
  return p2p_op_text(op_kind_name(OpKind::kRecv), key.seq, key.src);
}

}  // namespace meshrt::trace::analysis
