#include "trace/analyze/analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace meshrt::trace {
namespace {

// The meshrt_dump_version this analyzer reads.
constexpr int64_t kMeshrtDumpVersion = 1;

// ---------------------------------------------------------------------------------------------
// Op types

enum TypeFlag : uint16_t {
  kSymmetric = 1 << 0,        // Completing it on one rank needs every member.
  kClosing = 1 << 1,          // Closes a coalesced group.
  kAllToAll = 1 << 2,         // Sizes are per-rank splits: only the totals must agree.
  kSkipInputSizes = 1 << 3,   // Input shapes legitimately differ across ranks.
  kSkipOutputSizes = 1 << 4,  // Output shapes legitimately differ across ranks.
  kSkipInputDtypes = 1 << 5,  // As PyTorch's analyzer (rule 7).
  kSkipOutputDtypes = 1 << 6,
  kSend = 1 << 7,
  kRecv = 1 << 8,
};

uint16_t type_flags(std::string_view type) {
  static const std::unordered_map<std::string_view, uint16_t> kFlags = {
      {"all_reduce", kSymmetric},
      {"allreduce_coalesced", kSymmetric},
      {"all_reduce_barrier", kSymmetric},
      {"barrier", kSymmetric},
      {"all_gather", kSymmetric},
      {"_all_gather_base", kSymmetric},
      {"all_gather_into_tensor_coalesced", kSymmetric},
      {"reduce_scatter", kSymmetric},
      {"_reduce_scatter_base", kSymmetric},
      {"reduce_scatter_tensor_coalesced", kSymmetric},
      {"all_to_all", kSymmetric | kAllToAll | kSkipInputSizes | kSkipOutputSizes},
      {"all_to_all_single", kSymmetric | kAllToAll | kSkipInputSizes | kSkipOutputSizes},
      {"ALLGATHER_coalesced", kSymmetric | kClosing},
      {"REDUCE_SCATTER_coalesced", kSymmetric | kClosing},
      {"ALLREDUCE_coalesced", kSymmetric | kClosing},
      {"coalesced", kClosing},
      {"scatter", kSkipInputSizes | kSkipInputDtypes},
      {"gather", kSkipOutputSizes | kSkipOutputDtypes},
      {"broadcast", kSkipInputDtypes},
      {"_broadcast_oop", kSkipInputDtypes},
      {"send", kSend},
      {"recv", kRecv},
  };
  const auto it = kFlags.find(type);
  return it == kFlags.end() ? 0 : it->second;
}

// ---------------------------------------------------------------------------------------------
// Formatting helpers

// "[4, 5, 6, 7]"; long lists shorten: "[0-511, 513-1023]", strided "[6, 14, 22, ..., 254]".
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

// "rank 6" or "ranks [5, 6]".
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

int64_t first_numel(std::span<const int64_t> pool) {
  if (pool.empty()) return 0;
  int64_t numel = 1;
  const auto ndim = static_cast<size_t>(pool[0]);
  for (size_t d = 1; d <= ndim && d < pool.size(); ++d) numel *= pool[d];
  return numel;
}

bool same(std::span<const int64_t> a, std::span<const int64_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// ---------------------------------------------------------------------------------------------
// Indexes

// A group across all dumps: name plus member set, as torchfrtrace identifies groups.
struct Group {
  std::string name;
  std::vector<int> ranks;  // Sorted.
  std::optional<std::string> mesh_dim;
  std::vector<int32_t> member_dump;  // Per member: index into dumps_, or -1 without a dump.
  std::vector<int32_t> member_slot;  // Per member: the group's index in that dump, or -1.
};

// One collective op of one rank: one entry, or the members and closing entry of a coalesced
// group (entries of one group with one sequence number).
struct CollOp {
  int64_t seq = 0;
  uint32_t first = 0;  // Into RankGroup::entries.
  uint32_t count = 0;
};

// One rank's collective ops in one group, in order.
struct RankGroup {
  uint32_t group = 0;             // Global group.
  std::vector<uint32_t> entries;  // Entry indices of the non-p2p entries, in order.
  std::vector<CollOp> ops;        // Seqs rise.

  const CollOp* find(int64_t seq) const {
    if (ops.empty() || seq < ops.front().seq || seq > ops.back().seq) return nullptr;
    // Seqs are consecutive unless records were lost: try the direct index first.
    const auto guess = static_cast<size_t>(seq - ops.front().seq);
    if (guess < ops.size() && ops[guess].seq == seq) return &ops[guess];
    const auto it = std::lower_bound(ops.begin(), ops.end(), seq,
                                     [](const CollOp& op, int64_t s) { return op.seq < s; });
    return it != ops.end() && it->seq == seq ? &*it : nullptr;
  }
};

// An op: a collective (src = dst = -1) or one op on the p2p channel src -> dst.
struct OpKey {
  uint32_t group = 0;
  int32_t src = -1;
  int32_t dst = -1;
  int64_t seq = 0;
  bool operator==(const OpKey&) const = default;
};

struct OpKeyHash {
  size_t operator()(const OpKey& k) const {
    uint64_t h = k.group;
    h = h * 0x9E3779B97F4A7C15ULL ^ static_cast<uint32_t>(k.src);
    h = h * 0x9E3779B97F4A7C15ULL ^ static_cast<uint32_t>(k.dst);
    h = h * 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(k.seq);
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// An op a rank issued that has not completed.
struct Pending {
  uint32_t entry = 0;  // Its first entry.
  OpKey key;
};

struct RankState {
  std::vector<RankGroup> groups;       // Indexed like the dump's groups.
  std::vector<uint32_t> global_group;  // The dump's group index -> global group.
  std::vector<Pending> pending;        // Oldest first.
};

// One op on a p2p channel.
struct ChannelOp {
  int64_t seq = 0;
  uint32_t dump = 0;
  uint32_t entry = 0;
};

struct Channel {
  std::vector<ChannelOp> sends;  // At src.
  std::vector<ChannelOp> recvs;  // At dst.
  bool relative = false;         // Derived sequence numbers of a wrapped ring: cannot be aligned.
};

// A finding while it is being worked out.
struct Draft {
  Finding finding;
  OpKey key;
  std::vector<int> issuers;  // not_joined: the ranks that did issue the op.
  std::vector<int> follow;   // Ranks whose waits explain this finding.
  std::string what;          // The op as a phrase: "all_reduce #42", "send #3 to rank 2".
  int cause = -1;            // The finding this one follows from.
  bool shifted = false;      // Follows from an earlier mismatch in the same group.
  bool cycle = false;        // Part of a cycle of waits (a deadlock).
};

class Analysis {
 public:
  Analysis(std::vector<RankDump> dumps, const AnalyzeOptions& options)
      : dumps_(std::move(dumps)), options_(options) {}

  Report run() {
    check_versions(dumps_);
    // PyTorch's analyzer: dumps up to 2.3 did not log all_to_all sizes.
    const std::string& v = dumps_.front().version;
    const int major = std::stoi(v), minor = std::stoi(v.substr(v.find('.') + 1));
    sizes_logged_ = major > 2 || (major == 2 && minor > 3);
    std::sort(dumps_.begin(), dumps_.end(),
              [](const RankDump& a, const RankDump& b) { return a.rank < b.rank; });
    intern_symbols();
    intern_groups();
    check_missing_dumps();
    index_ranks();
    match_collectives();
    match_p2p();
    add_missing_dump_finding();
    find_causes();
    return report();
  }

 private:
  // ---- interning ----------------------------------------------------------------------------

  uint32_t intern(const std::string& s) {
    const auto [it, added] = symbol_ids_.emplace(s, static_cast<uint32_t>(symbols_.size()));
    if (added) {
      symbols_.push_back(s);
      flags_.push_back(type_flags(s));
    }
    return it->second;
  }

  // Dumps number their strings independently; give every string one id across dumps so that
  // ops compare by integer.
  void intern_symbols() {
    for (RankDump& d : dumps_) {
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
    for (const RankDump& d : dumps_) {
      max_rank = std::max({max_rank, d.rank, static_cast<int>(d.world_size.value_or(0)) - 1});
    }
    std::map<std::pair<std::string, std::vector<int>>, uint32_t> ids;
    states_.resize(dumps_.size());
    for (size_t di = 0; di < dumps_.size(); ++di) {
      const RankDump& d = dumps_[di];
      for (const DumpGroup& g : d.groups) {
        std::vector<int> ranks = g.ranks;
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        for (const int r : ranks) max_rank = std::max(max_rank, r);
        const auto [it, added] =
            ids.emplace(std::pair{g.name, ranks}, static_cast<uint32_t>(groups_.size()));
        if (added) {
          groups_.push_back(Group{.name = g.name,
                                  .ranks = std::move(ranks),
                                  .mesh_dim = g.mesh_dim,
                                  .member_dump = {},
                                  .member_slot = {}});
        }
        states_[di].global_group.push_back(it->second);
      }
    }
    dump_of_rank_.assign(static_cast<size_t>(max_rank) + 1, -1);
    for (size_t di = 0; di < dumps_.size(); ++di) dump_of_rank_[dumps_[di].rank] = di;
    for (Group& g : groups_) {
      g.member_dump.assign(g.ranks.size(), -1);
      g.member_slot.assign(g.ranks.size(), -1);
      for (size_t i = 0; i < g.ranks.size(); ++i) g.member_dump[i] = dump_of_rank_[g.ranks[i]];
    }
    for (size_t di = 0; di < dumps_.size(); ++di) {
      const auto& gg = states_[di].global_group;
      for (size_t slot = 0; slot < gg.size(); ++slot) {
        Group& g = groups_[gg[slot]];
        // A dump may list groups its rank is not in; only members' records are matched.
        const auto pos = std::lower_bound(g.ranks.begin(), g.ranks.end(), dumps_[di].rank);
        if (pos != g.ranks.end() && *pos == dumps_[di].rank) {
          g.member_slot[pos - g.ranks.begin()] = static_cast<int32_t>(slot);
        }
      }
    }
  }

  void check_missing_dumps() {
    std::set<int> known;
    for (const Group& g : groups_) known.insert(g.ranks.begin(), g.ranks.end());
    int64_t world_size = 0;
    for (const RankDump& d : dumps_) world_size = std::max(world_size, d.world_size.value_or(0));
    for (int r = 0; r < world_size; ++r) known.insert(r);
    for (const int r : known) {
      if (dump_of_rank_[r] < 0) missing_dumps_.push_back(r);
    }
    if (!missing_dumps_.empty() && !options_.allow_incomplete_ranks) {
      throw InputError(
          fmt::format("missing dump files from {} (members of the dumped groups); pass "
                      "--allow-incomplete-ranks to analyze without them",
                      ranks_phrase(missing_dumps_)));
    }
  }

  // ---- per-rank indexes ---------------------------------------------------------------------

  bool closing(const DumpEntry& e) const { return (flags_[e.type] & kClosing) != 0; }
  bool p2p_op(const DumpEntry& e) const { return (flags_[e.type] & (kSend | kRecv)) != 0; }

  void index_ranks() {
    for (size_t di = 0; di < dumps_.size(); ++di) {
      RankDump& d = dumps_[di];
      RankState& st = states_[di];
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
          const DumpEntry& last = d.entries[rg.entries[op.first + op.count - 1]];
          if (last.state != EntryState::kCompleted) {
            st.pending.push_back({rg.entries[op.first], OpKey{.group = rg.group, .seq = op.seq}});
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
          if (p2p_op(prev) && prev.p2p_seq == e.p2p_seq) e.is_p2p = true;
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
    RankDump& d = dumps_[di];
    RankState& st = states_[di];
    std::unordered_map<uint64_t, int64_t> derived;  // (group, direction, peer) -> count
    for (uint32_t i = 0; i < d.entries.size(); ++i) {
      DumpEntry& e = d.entries[i];
      if (!e.is_p2p || !p2p_op(e)) continue;
      const uint32_t g = st.global_group[e.group];
      const bool send = (flags_[e.type] & kSend) != 0;
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
      Channel& ch = channels_[OpKey{.group = g, .src = src, .dst = dst, .seq = 0}];
      (send ? ch.sends : ch.recvs).push_back({e.channel_seq, static_cast<uint32_t>(di), i});
      ch.relative |= relative;
      if (e.state != EntryState::kCompleted) {
        st.pending.push_back({i, OpKey{.group = g, .src = src, .dst = dst, .seq = e.channel_seq}});
      }
    }
  }

  // ---- describing ops -----------------------------------------------------------------------

  // "on dim dp (group mesh0/dp [2, 6]; <note>)" or "in group world [0-7] (<note>)".
  std::string where(uint32_t group, std::string_view note) const {
    const Group& g = groups_[group];
    if (g.mesh_dim) {
      return fmt::format("on dim {} (group {} {}; {})", *g.mesh_dim, g.name, format_ranks(g.ranks),
                         note);
    }
    return fmt::format("in group {} {} ({})", g.name, format_ranks(g.ranks), note);
  }

  std::string_view type_name(const DumpEntry& e) const { return symbols_[e.type]; }

  // The op as one rank sees it: "all_gather #17", "send #3 to rank 2", "recv #3 from rank 1".
  std::string op_phrase(const OpKey& key, std::string_view type, int as_rank) const {
    if (key.src < 0) return fmt::format("{} #{}", type, key.seq);
    if (as_rank == key.src) return fmt::format("send #{} to rank {}", key.seq, key.dst);
    return fmt::format("recv #{} from rank {}", key.seq, key.src);
  }

  Draft& add_draft(FindingKind kind, const OpKey& key, std::string op, std::string what) {
    const Group& g = groups_[key.group];
    Draft& d = drafts_.emplace_back();
    d.finding = Finding{.kind = kind,
                        .group = g.name,
                        .group_ranks = g.ranks,
                        .mesh_dim = g.mesh_dim,
                        .seq = key.seq,
                        .op = std::move(op),
                        .culprit_ranks = {},
                        .missing_ranks = {},
                        .detail = {},
                        .root = true};
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
    if (x.op->count == 1) return flags_[x.last().type];
    // A coalesced group is symmetric when all its members are.
    bool symmetric = true;
    uint16_t other = 0;
    for (uint32_t i = 0; i + 1 < x.op->count; ++i) {
      const uint16_t f = flags_[x.entry(i).type];
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
        return n == 0 ? fmt::format("called {}", type_name(x.last()))
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
                          fmt::format("called {}{}", type_name(ea), member()),
                          fmt::format("called {}", type_name(eb))};
      }
      const uint16_t flags = flags_[ea.type];
      const bool in_differs = (flags & kSkipInputSizes) == 0 &&
                              !same(a.dump->span(ea.input_sizes), b.dump->span(eb.input_sizes));
      const bool out_differs = (flags & kSkipOutputSizes) == 0 &&
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
      auto dtypes_differ = [&](PoolSpan x, PoolSpan y, uint16_t skip) {
        return (flags & skip) == 0 && x.size > 0 && y.size > 0 &&
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
    for (const int64_t id : x.dump->span(e.input_dtypes)) in.push_back(symbols_[id]);
    for (const int64_t id : x.dump->span(e.output_dtypes)) out.push_back(symbols_[id]);
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
    for (uint32_t gi = 0; gi < groups_.size(); ++gi) {
      const Group& g = groups_[gi];
      std::vector<const RankGroup*> rgs(g.ranks.size(), nullptr);
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (size_t m = 0; m < g.ranks.size(); ++m) {
        if (g.member_dump[m] < 0 || g.member_slot[m] < 0) continue;
        const RankGroup& rg = states_[g.member_dump[m]].groups[g.member_slot[m]];
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
          const RankDump& d = dumps_[g.member_dump[m]];
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
        ++checked_;
        int64_t issued_ns = INT64_MAX;
        for (const Issued& x : issued) issued_ns = std::min(issued_ns, x.entry(0).time_created_ns);
        for (const int m : maybe_missing) {
          const RankDump& d = dumps_[g.member_dump[m]];
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
    // Completing a symmetric collective takes every member: whoever has no record of it lost
    // the record or dumped before getting there, and it is no cause of a hang.
    if (!missing.empty() && !((flags & kSymmetric) != 0 && any_completed)) {
      const std::string type(type_name(issued.front().last()));
      Draft& d = add_draft(FindingKind::kNotJoined, key, type, fmt::format("{} #{}", type, seq));
      d.finding.missing_ranks = missing;
      for (const Issued& x : issued) d.issuers.push_back(x.rank);
    }

    // Majority signature: classes of ranks with equal ops, largest first. Usually all agree.
    size_t agree = 1;
    while (agree < issued.size() && !compare(issued.front(), issued[agree])) ++agree;
    std::vector<std::vector<size_t>> classes;
    if (agree < issued.size()) classes.emplace_back();
    for (size_t i = 0; i < agree && !classes.empty(); ++i) classes.front().push_back(i);
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
    auto ranks_of = [&](const std::vector<size_t>& c) {
      std::vector<int> r;
      for (const size_t i : c) r.push_back(issued[i].rank);
      return r;
    };
    const std::string type(type_name(issued.front().last()));
    if (classes.size() > 1) {
      std::stable_sort(classes.begin(), classes.end(),
                       [](const auto& a, const auto& b) { return a.size() > b.size(); });
      const std::vector<size_t>& majority = classes.front();
      const std::vector<int> majority_ranks = ranks_of(majority);
      if (majority.size() > classes[1].size()) {
        for (size_t c = 1; c < classes.size(); ++c) {
          const Difference diff = *compare(issued[classes[c].front()], issued[majority.front()]);
          const std::vector<int> odd = ranks_of(classes[c]);
          Draft& d = add_draft(diff.kind, key, type, fmt::format("{} #{}", type, seq));
          d.finding.culprit_ranks = odd;
          d.finding.detail =
              fmt::format("{} #{}: {} {} while {} {} ({} of {} agree)", type, seq,
                          ranks_phrase(odd), diff.culprit, ranks_phrase(majority_ranks),
                          diff.majority, majority.size(), issued.size());
        }
      } else {
        // No majority: everyone who disagrees is a suspect.
        const Difference diff = *compare(issued[classes[1].front()], issued[majority.front()]);
        Draft& d = add_draft(diff.kind, key, type, fmt::format("{} #{}", type, seq));
        std::vector<std::string> parts;
        for (size_t c = 0; c < classes.size(); ++c) {
          const std::vector<int> r = ranks_of(classes[c]);
          d.finding.culprit_ranks.insert(d.finding.culprit_ranks.end(), r.begin(), r.end());
          const size_t other = c == 0 ? 1 : 0;
          parts.push_back(fmt::format(
              "{} {}", ranks_phrase(r),
              compare(issued[classes[c].front()], issued[classes[other].front()])->culprit));
        }
        std::sort(d.finding.culprit_ranks.begin(), d.finding.culprit_ranks.end());
        d.finding.detail =
            fmt::format("{} #{}: no majority: {}", type, seq, fmt::join(parts, "; "));
      }
      return;
    }

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
        Draft& d =
            add_draft(FindingKind::kNumelMismatch, key, type, fmt::format("{} #{}", type, seq));
        // Who is wrong shows only when most ranks send as much as they receive.
        if (uneven.size() < even.size()) d.finding.culprit_ranks = uneven;
        d.finding.detail = fmt::format(
            "{} #{}: the ranks send {} elements in all but receive {}: the split sizes disagree{}",
            type, seq, in, out,
            uneven.size() < even.size()
                ? fmt::format(" ({} receive a different count than they send)",
                              ranks_phrase(uneven))
                : "");
        return;
      }
    }

    // States: a symmetric op completed anywhere is complete everywhere, whatever the others'
    // dumps caught.
    if ((flags & kSymmetric) != 0 && any_completed) return;
    if (std::all_of(issued.begin(), issued.end(), [&](const Issued& x) {
          return x.last().state == issued.front().last().state;
        })) {
      return;
    }
    std::map<EntryState, std::vector<int>> by_state;
    for (const Issued& x : issued) by_state[x.last().state].push_back(x.rank);
    if (by_state.size() < 2) return;
    std::vector<std::pair<EntryState, std::vector<int>>> states(by_state.begin(), by_state.end());
    std::stable_sort(states.begin(), states.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    Draft& d = add_draft(FindingKind::kStateMismatch, key, type, fmt::format("{} #{}", type, seq));
    const bool strict = states[0].second.size() > states[1].second.size();
    std::vector<std::string> parts;
    for (size_t i = strict ? 1 : 0; i < states.size(); ++i) {
      d.finding.culprit_ranks.insert(d.finding.culprit_ranks.end(), states[i].second.begin(),
                                     states[i].second.end());
    }
    std::sort(d.finding.culprit_ranks.begin(), d.finding.culprit_ranks.end());
    for (const auto& [state, ranks] : states) {
      parts.push_back(fmt::format("{} {}", ranks_phrase(ranks), entry_state_name(state)));
    }
    d.finding.detail = fmt::format("{} #{} is {}", type, seq, fmt::join(parts, ", "));
    d.follow = d.finding.culprit_ranks;
  }

  // ---- p2p ----------------------------------------------------------------------------------

  void match_p2p() {
    std::vector<OpKey> keys;
    for (const auto& [key, ch] : channels_) keys.push_back(key);
    std::sort(keys.begin(), keys.end(), [](const OpKey& a, const OpKey& b) {
      return std::tie(a.group, a.src, a.dst) < std::tie(b.group, b.src, b.dst);
    });
    for (const OpKey& key : keys) {
      Channel& ch = channels_[key];
      // Derived numbers of a wrapped ring start at an unknown offset; an any-source recv could
      // have taken any send.
      if (ch.relative || any_source_.contains({key.group, key.dst})) continue;
      auto by_seq = [](const ChannelOp& a, const ChannelOp& b) { return a.seq < b.seq; };
      std::sort(ch.sends.begin(), ch.sends.end(), by_seq);
      std::sort(ch.recvs.begin(), ch.recvs.end(), by_seq);
      size_t s = 0, r = 0;
      while (s < ch.sends.size() || r < ch.recvs.size()) {
        ++checked_;
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
    const RankDump& sd = dumps_[send.dump];
    const RankDump& rd = dumps_[recv.dump];
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
                           symbols_[sd.span(se.input_dtypes)[0]], channel.dst,
                           symbols_[rd.span(re.output_dtypes)[0]]);
    }
    if (!kind) return;
    Draft& d = add_draft(
        *kind, key, "send",
        fmt::format("send #{} from rank {} to rank {}", send.seq, channel.src, channel.dst));
    // One sender, one receiver: nothing tells which side is wrong.
    d.finding.culprit_ranks = {std::min(channel.src, channel.dst),
                               std::max(channel.src, channel.dst)};
    d.finding.detail = fmt::format("send #{} from rank {} to rank {}: {}", send.seq, channel.src,
                                   channel.dst, detail);
  }

  // A send without its recv (or the reverse): not joined by the peer, unless the peer's records
  // were lost.
  void lone_p2p(const OpKey& channel, const ChannelOp& op, const std::vector<ChannelOp>& others,
                int peer, bool is_send) {
    const DumpEntry& e = dumps_[op.dump].entries[op.entry];
    // A completed recv proves its send was issued.
    if (!is_send && e.state == EntryState::kCompleted) return;
    const int32_t peer_dump =
        peer < static_cast<int>(dump_of_rank_.size()) ? dump_of_rank_[peer] : -1;
    if (peer_dump < 0) return;
    const RankDump& pd = dumps_[peer_dump];
    if (!others.empty() && op.seq <= others.back().seq) return;  // Lost records.
    if (others.empty() && pd.wrapped()) {
      const int64_t oldest_ns = pd.entries.empty() ? 0 : pd.entries.front().time_created_ns;
      if (e.time_created_ns <= 0 || oldest_ns <= 0 || e.time_created_ns < oldest_ns) return;
    }
    const OpKey key{channel.group, channel.src, channel.dst, op.seq};
    const int issuer = dumps_[op.dump].rank;
    Draft& d = add_draft(FindingKind::kNotJoined, key, is_send ? "send" : "recv",
                         op_phrase(key, is_send ? "send" : "recv", issuer));
    d.finding.missing_ranks = {peer};
    d.issuers = {issuer};
  }

  // ---- missing dumps ------------------------------------------------------------------------

  void add_missing_dump_finding() {
    if (missing_dumps_.empty()) return;
    // Report it against the largest group that has such a member (usually the world).
    const Group* best = nullptr;
    for (const Group& g : groups_) {
      const bool has =
          std::any_of(g.member_dump.begin(), g.member_dump.end(), [](int32_t d) { return d < 0; });
      if (has && (best == nullptr || g.ranks.size() > best->ranks.size())) best = &g;
    }
    Finding f{.kind = FindingKind::kMissingDump,
              .group = best != nullptr ? best->name : "",
              .group_ranks = best != nullptr ? best->ranks : std::vector<int>{},
              .mesh_dim = best != nullptr ? best->mesh_dim : std::nullopt,
              .seq = std::nullopt,
              .op = "",
              .culprit_ranks = missing_dumps_,
              .missing_ranks = missing_dumps_,
              .detail = fmt::format(
                  "no dump from {}: {} may have crashed or exited before dumping; ops involving "
                  "{} were judged from the other ranks' records only",
                  ranks_phrase(missing_dumps_), missing_dumps_.size() == 1 ? "it" : "they",
                  missing_dumps_.size() == 1 ? "it" : "them"),
              .root = true};
    Draft& d = drafts_.emplace_back();
    d.finding = std::move(f);
    d.key = OpKey{.group = UINT32_MAX};
  }

  // ---- causes -------------------------------------------------------------------------------

  // The op a rank waits in, preferring one that has a finding of its own (the wait to follow).
  const Pending* blocked_in(int rank, const OpKey& except, int* finding) const {
    *finding = -1;
    const int32_t di = dump_of_rank_[rank];
    if (di < 0) return nullptr;
    const Pending* first = nullptr;
    for (const Pending& p : states_[di].pending) {
      if (p.key == except) continue;
      if (first == nullptr) first = &p;
      if (const auto it = finding_of_.find(p.key); it != finding_of_.end()) {
        *finding = it->second;
        return &p;
      }
    }
    return first;
  }

  // Where a rank waits: "is blocked in all_gather #17 on dim dp (group mesh0/dp [2, 6];
  // started; at train.cc:88 in MLP / forward), which rank 2 did not join"; `plural` for several
  // ranks in the same op.
  std::string wait_phrase(int rank, const Pending& p, int target, bool plural) const {
    const DumpEntry& e = dumps_[dump_of_rank_[rank]].entries[p.entry];
    std::string note(entry_state_name(e.state));
    if (e.caller != 0) note += fmt::format("; at {}", symbols_[e.caller]);
    if (e.scope != 0) note += fmt::format(" in {}", symbols_[e.scope]);
    std::string s = fmt::format("{} blocked in {} {}", plural ? "are" : "is",
                                op_phrase(p.key, type_name(e), rank), where(p.key.group, note));
    if (target >= 0) {
      const Finding& t = drafts_[target].finding;
      if (t.kind == FindingKind::kNotJoined) {
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
    const int32_t di = dump_of_rank_[rank];
    const RankDump& d = dumps_[di];
    std::string last = "no record in this group";
    for (size_t i = d.entries.size(); i-- > 0;) {
      const DumpEntry& e = d.entries[i];
      if (states_[di].global_group[e.group] != group) continue;
      const std::string op =
          p2p_op(e) && e.peer >= 0
              ? fmt::format("{} #{} {} rank {}", type_name(e), e.channel_seq,
                            (flags_[e.type] & kSend) != 0 ? "to" : "from", e.peer)
              : fmt::format("{} #{}", type_name(e), e.is_p2p ? e.p2p_seq : e.collective_seq);
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

  void find_causes() {
    for (size_t i = 0; i < drafts_.size(); ++i) {
      if (drafts_[i].key.group != UINT32_MAX)
        finding_of_.emplace(drafts_[i].key, static_cast<int>(i));
    }
    // not_joined: who is to blame, and whose waits to follow.
    for (Draft& d : drafts_) {
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
      }
    }
    // Follow waits: a finding whose ranks all wait in ops with findings of their own is a
    // consequence of those.
    std::vector<int> next(drafts_.size(), -1);
    for (size_t i = 0; i < drafts_.size(); ++i) {
      const Draft& d = drafts_[i];
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
    std::vector<int> mark(drafts_.size(), 0);  // 0 new, 1 on the current path, 2 done
    for (size_t start = 0; start < drafts_.size(); ++start) {
      std::vector<int> path;
      int i = static_cast<int>(start);
      while (i >= 0 && mark[i] == 0) {
        mark[i] = 1;
        path.push_back(i);
        i = next[i];
      }
      if (i >= 0 && mark[i] == 1) {
        for (auto it = std::find(path.begin(), path.end(), i); it != path.end(); ++it) {
          drafts_[*it].cycle = true;
          next[*it] = -1;
        }
      }
      for (const int p : path) mark[p] = 2;
    }
    for (size_t i = 0; i < drafts_.size(); ++i) {
      drafts_[i].cause = next[i];
      drafts_[i].finding.root = next[i] < 0;
    }
    mark_shifted();
    for (Draft& d : drafts_) write_detail(d);
  }

  // A rank that skipped or added a collective shifts its sequence numbers in that group: every
  // later op there looks mismatched. Only the first mismatch is the cause.
  void mark_shifted() {
    std::vector<size_t> order(drafts_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const OpKey& x = drafts_[a].key;
      const OpKey& y = drafts_[b].key;
      return std::tie(x.group, x.src, x.dst, x.seq) < std::tie(y.group, y.src, y.dst, y.seq);
    });
    std::unordered_map<uint32_t, size_t> first_mismatch;  // group -> draft
    for (const size_t i : order) {
      Draft& d = drafts_[i];
      if (d.key.src >= 0 || d.key.group == UINT32_MAX) continue;
      const auto it = first_mismatch.find(d.key.group);
      if (it != first_mismatch.end()) {
        const auto& first = drafts_[it->second].finding.culprit_ranks;
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
      if (d.key.src >= 0) {
        f.detail =
            fmt::format("{} did not post the {} matching rank {}'s {} (p2p channel {}->{}); {}",
                        ranks_phrase(f.missing_ranks), f.op == "send" ? "recv" : "send",
                        d.issuers.front(), d.what, d.key.src, d.key.dst, doing_now);
      } else if (f.culprit_ranks != f.missing_ranks) {
        f.detail = fmt::format("{} issued {} that {} never called; {}", ranks_phrase(d.issuers),
                               d.what, ranks_phrase(f.missing_ranks), doing_now);
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
          drafts_[d.cause].key.seq);
    }
  }

  // ---- report -------------------------------------------------------------------------------

  Report report() {
    Report out;
    for (const RankDump& d : dumps_) out.ranks.push_back(d.rank);
    out.collectives_checked = checked_;
    std::vector<size_t> order(drafts_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Roots first, missing dumps first among them, then by group and op.
    auto key = [&](size_t i) {
      const Finding& f = drafts_[i].finding;
      return std::tuple<bool, bool, const std::string&, const std::vector<int>&, int64_t, int32_t,
                        int32_t, FindingKind>(!f.root, f.kind != FindingKind::kMissingDump, f.group,
                                              f.group_ranks, f.seq.value_or(-1), drafts_[i].key.src,
                                              drafts_[i].key.dst, f.kind);
    };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
    for (const size_t i : order) out.findings.push_back(std::move(drafts_[i].finding));
    return out;
  }

  std::vector<RankDump> dumps_;
  AnalyzeOptions options_;
  std::vector<std::string> symbols_;
  std::vector<uint16_t> flags_;
  std::unordered_map<std::string, uint32_t> symbol_ids_;
  std::vector<Group> groups_;
  std::vector<RankState> states_;
  std::vector<int32_t> dump_of_rank_;  // Global rank -> index into dumps_, or -1.
  std::vector<int> missing_dumps_;
  std::unordered_map<OpKey, Channel, OpKeyHash> channels_;
  std::set<std::pair<uint32_t, int>> any_source_;  // (group, rank) with any-source recvs.
  std::vector<Draft> drafts_;
  std::unordered_map<OpKey, int, OpKeyHash> finding_of_;
  int64_t checked_ = 0;
  bool sizes_logged_ = true;  // all_to_all sizes are in dumps after version 2.3.
};

}  // namespace

std::string_view finding_kind_name(FindingKind kind) {
  switch (kind) {
    case FindingKind::kNotJoined:
      return "not_joined";
    case FindingKind::kTypeMismatch:
      return "type_mismatch";
    case FindingKind::kSizeMismatch:
      return "size_mismatch";
    case FindingKind::kDtypeMismatch:
      return "dtype_mismatch";
    case FindingKind::kStateMismatch:
      return "state_mismatch";
    case FindingKind::kNumelMismatch:
      return "numel_mismatch";
    case FindingKind::kMissingDump:
      return "missing_dump";
  }
  return "";
}

void check_versions(const std::vector<RankDump>& dumps) {
  std::map<std::string, std::vector<int>> by_version;
  for (const RankDump& d : dumps) {
    const std::string& v = d.version;
    const size_t dot = v.find('.');
    auto digits = [](std::string_view s) {
      return !s.empty() &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dot == std::string::npos || !digits(std::string_view(v).substr(0, dot)) ||
        !digits(std::string_view(v).substr(dot + 1))) {
      throw InputError(fmt::format("'{}': version '{}' is not '<major>.<minor>'", d.path, v));
    }
    if (d.meshrt_dump_version && *d.meshrt_dump_version > kMeshrtDumpVersion) {
      throw InputError(fmt::format(
          "'{}': meshrt_dump_version {} is newer than this meshtrace reads ({}); use a newer "
          "meshtrace",
          d.path, *d.meshrt_dump_version, kMeshrtDumpVersion));
    }
    const std::string key =
        d.meshrt_dump_version
            ? fmt::format("version {} (meshrt_dump_version {})", v, *d.meshrt_dump_version)
            : fmt::format("version {} (no meshrt_dump_version)", v);
    by_version[key].push_back(d.rank);
  }
  if (by_version.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [key, ranks] : by_version) {
      parts.push_back(fmt::format("{} from {}", key, ranks_phrase(ranks)));
    }
    throw InputError(fmt::format(
        "the dumps have different versions: {}; they cannot be matched (dumps of one run all "
        "have the same)",
        fmt::join(parts, ", ")));
  }
}

Report analyze(std::vector<RankDump> dumps, const AnalyzeOptions& options) {
  if (dumps.empty()) throw InputError("no dumps to analyze");
  return Analysis(std::move(dumps), options).run();
}

Report analyze_directory(const std::filesystem::path& dir, const AnalyzeOptions& options) {
  return analyze(read_dumps(find_dump_files(dir, options.prefix), options.threads), options);
}

std::string format_text(const Report& report) {
  size_t roots = 0;
  for (const Finding& f : report.findings) roots += f.root ? 1 : 0;
  std::string out = fmt::format("meshtrace: {} ranks {}, {} ops checked", report.ranks.size(),
                                format_ranks(report.ranks), report.collectives_checked);
  if (report.findings.empty()) return out + ": no problem found\n";
  out += fmt::format(", {} finding{} ({} root cause{})\n", report.findings.size(),
                     report.findings.size() == 1 ? "" : "s", roots, roots == 1 ? "" : "s");
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
    }
  }
  return out;
}

std::string format_json(const Report& report) {
  nlohmann::ordered_json out;
  out["ranks"] = report.ranks;
  out["collectives_checked"] = report.collectives_checked;
  out["findings"] = nlohmann::ordered_json::array();
  for (const Finding& f : report.findings) {
    nlohmann::ordered_json j;
    j["kind"] = finding_kind_name(f.kind);
    j["group"] = f.group;
    j["group_ranks"] = f.group_ranks;
    j["mesh_dim"] = f.mesh_dim ? nlohmann::ordered_json(*f.mesh_dim) : nullptr;
    j["seq"] = f.seq ? nlohmann::ordered_json(*f.seq) : nullptr;
    j["op"] = f.op.empty() ? nullptr : nlohmann::ordered_json(f.op);
    j["culprit_ranks"] = f.culprit_ranks;
    j["missing_ranks"] = f.missing_ranks;
    j["detail"] = f.detail;
    j["root"] = f.root;
    out["findings"].push_back(std::move(j));
  }
  return out.dump() + "\n";
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
    for (const DumpEntry& e : d.entries) {
      const DumpGroup& g = d.groups[e.group];
      if (!options.pg_filters.empty() &&
          std::none_of(options.pg_filters.begin(), options.pg_filters.end(),
                       [&](const std::string& f) { return f == g.name || f == g.desc; })) {
        continue;
      }
      // A recv's buffer is its output; everything else shows its input.
      const bool recv = d.symbols[e.type] == "recv";
      std::vector<std::string_view> parts = {g.name};
      const std::string seq =
          fmt::format("{}#{}", e.is_p2p ? "p2p" : "", e.is_p2p ? e.p2p_seq : e.collective_seq);
      std::string op(d.symbols[e.type]);
      if (e.peer >= 0) op += fmt::format("{}{}", recv ? "<-" : "->", e.peer);
      const std::string shapes = format_shapes(d.span(recv ? e.output_sizes : e.input_sizes));
      std::vector<std::string_view> dtype_names;
      for (const int64_t id : d.span(recv ? e.output_dtypes : e.input_dtypes)) {
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
