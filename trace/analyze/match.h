// Matching, the analyzer's first step: every rank's records grouped per (group name + member
// set, seq) and per p2p channel (src, dst, p2p_channel_seq) rather than aligned by record id, so
// that wrapped rings and gaps are told apart from ranks that never got there; categories (type,
// size, dtype, state, all_to_all totals) decided by majority. It leaves draft findings, which
// explain.h blames and explains.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_reader.h"
#include "trace/analyze/op_types.h"

namespace meshrt::trace::analysis {

// A group across all dumps: name plus member set, as torchfrtrace identifies groups.
struct Group {
  std::string name;
  std::vector<int> ranks;  // Sorted.
  std::optional<std::string> mesh_dim;
  std::vector<int32_t> member_dump;  // Per member: index into the dumps, or -1 without a dump.
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

  // The op numbered `seq`, or nullptr when the rank has no record of it.
  const CollOp* find(int64_t seq) const;
  // The index in the dump's entries of `op`'s first entry.
  uint32_t first_entry(const CollOp& op) const { return entries[op.first]; }
  // The index in the dump's entries of `op`'s last entry (the closing one of a coalesced group).
  uint32_t last_entry(const CollOp& op) const { return entries[op.first + op.count - 1]; }
};

// An op: a collective (src = dst = -1) or one op on the p2p channel src -> dst.
struct OpKey {
  uint32_t group = 0;
  int32_t src = -1;
  int32_t dst = -1;
  int64_t seq = 0;
  bool operator==(const OpKey&) const = default;
};

// Hashes an OpKey for the maps below.
struct OpKeyHash {
  size_t operator()(const OpKey& k) const;
};

// An op a rank issued that has not completed.
struct Pending {
  uint32_t entry = 0;  // Its first entry.
  OpKey key;
};

// One rank's indexes.
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

// The ops of one p2p channel (one group, one direction), each side sorted by seq.
struct Channel {
  std::vector<ChannelOp> sends;  // At src.
  std::vector<ChannelOp> recvs;  // At dst.
  bool relative = false;         // Derived sequence numbers of a wrapped ring: cannot be aligned.
};

// A finding while it is being worked out.
struct Draft {
  Finding finding;
  OpKey key;                 // group UINT32_MAX: the missing-dump finding, tied to no op.
  std::vector<int> issuers;  // not_joined: the ranks that did issue the op.
  std::vector<int> follow;   // Ranks whose waits explain this finding.
  std::string what;          // The op as a phrase: "all_reduce #42", "send #3 to rank 2".
  // Mismatches: the ranks of each way the op was called, the culprits' first.
  std::vector<std::vector<int>> classes;
  int cause = -1;        // The finding this one follows from.
  bool shifted = false;  // Follows from an earlier mismatch in the same group.
  bool cycle = false;    // Part of a cycle of waits (a deadlock).
  // A lone p2p op on a channel where the peer never posted the opposite op (with its records
  // intact): the issuer likely named the wrong peer.
  bool fresh_channel = false;
  // The fresh-channel op blamed on its issuer (the wrong peer): a cycle of waits was traced to
  // it, or another rank's p2p op waits on its issuer while its peer waits on nothing.
  bool wrong_peer = false;
  // not_joined: the evidence that the missing rank skipped the op and went on (see
  // explain.cc); empty when it did not.
  std::string went_on;
};

// What matching learned of a job, for explain.h.
struct Matching {
  std::vector<RankDump> dumps;       // By rank; string ids point into `symbols`.
  std::vector<std::string> symbols;  // Job-wide; symbols[0] is "".
  std::vector<OpType> types;         // Per symbol.
  std::vector<Group> groups;
  std::vector<RankState> states;      // Per dump.
  std::vector<int32_t> dump_of_rank;  // Global rank -> index into dumps, or -1.
  std::vector<int> missing_dumps;     // Members of dumped groups without a dump.
  std::unordered_map<OpKey, Channel, OpKeyHash> channels;  // Keyed with seq 0.
  std::vector<Draft> drafts;
  int64_t checked = 0;  // Collectives and p2p channel ops examined.

  // The entry's op type, and its name as the dump spells it.
  const OpType& type(const DumpEntry& e) const { return types[e.type]; }
  std::string_view type_name(const DumpEntry& e) const { return symbols[e.type]; }
  // The dump of global rank `rank`, or nullptr.
  const RankDump* dump_of(int rank) const;
  // "on dim dp (group mesh0/dp [2, 6]; <note>)" or "in group world [0-7] (<note>)".
  std::string where(uint32_t group, std::string_view note) const;
};

// Matches the dumps (sorted by rank here). Throws InputError on members without a dump unless
// options.allow_incomplete_ranks.
Matching match(std::vector<RankDump> dumps, const AnalyzeOptions& options);

// The op as one rank sees it: "all_gather #17", "send #3 to rank 2", "recv #3 from rank 1".
std::string op_phrase(const OpKey& key, std::string_view type, int as_rank);

}  // namespace meshrt::trace::analysis
