// The collectives layer's one selection table (runtime/collectives/algorithm_table.h): what it
// picks for each op, group size and transport, and MESHRT_ALGO's overrides and refusals. The
// algorithms themselves run in real processes in gloo_test (every collective x dtype through the
// slots, the ring and recursive doubling, and each forced by MESHRT_ALGO).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/collectives/algorithm_table.h"
#include "runtime/collectives/hierarchical.h"
#include "runtime/error.h"

namespace meshrt {
namespace {

constexpr size_t kSlot = 256 << 10;

Op op_of(OpKind kind, size_t count, DType dtype = DType::kF32) {
  Op op;
  op.kind = kind;
  op.input.count = count;
  op.input.dtype = dtype;
  op.output = op.input;
  return op;
}

GroupShape group(int size, size_t slot_bytes) { return {size, slot_bytes, 256 << 10}; }

TEST(AlgorithmTable, OneHostGoesThroughTheSlots) {
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduce, OpKind::kBroadcast, OpKind::kAllGather,
                      OpKind::kReduceScatter, OpKind::kAllToAll, OpKind::kGather, OpKind::kScatter,
                      OpKind::kBarrier}) {
    EXPECT_EQ(select_algorithm(op_of(kind, 64), group(4, kSlot)), Algorithm::kSlots)
        << op_kind_name(kind);
  }
  // Folds read every slot: above 16 ranks only ops of one chunk fold there.
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, kSlot / 4), group(32, kSlot)),
            Algorithm::kSlots);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, kSlot / 4 + 1), group(32, kSlot)),
            Algorithm::kLibrary);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllGather, 1 << 20), group(32, kSlot)),
            Algorithm::kSlots);
}

TEST(AlgorithmTable, WithoutSlotsPairsAndTheLibrary) {
  const GroupShape two = group(2, 0);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 2), two), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, (256 << 10) / 4 + 1), two),
            Algorithm::kLibrary);  // Above MESHRT_GLOO_ONESHOT_MAX_BYTES.
  // Above 2 ranks only once the ring's blocks hold data; never on 3 ranks.
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 7), group(4, 0)), Algorithm::kLibrary);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 8), group(4, 0)),
            Algorithm::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 64), group(3, 0)), Algorithm::kLibrary);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kReduceScatter, 64), group(3, 0)), Algorithm::kRing);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kBroadcast, 64), group(3, 0)), Algorithm::kLibrary);
}

TEST(AlgorithmTable, P2PAndUnevenAllToAllAndNothingToMove) {
  const GroupShape g = group(4, kSlot);
  // p2p goes through the mailboxes beside the slots, or over Gloo's pairs without them.
  for (OpKind kind : {OpKind::kSend, OpKind::kRecv, OpKind::kBatchP2P}) {
    EXPECT_EQ(select_algorithm(op_of(kind, 1 << 20), g), Algorithm::kMailbox);
    EXPECT_EQ(select_algorithm(op_of(kind, 4), group(4, 0)), Algorithm::kLibrary);
    EXPECT_EQ(select_algorithm(op_of(kind, 4), g, parse_algorithm_overrides("library")),
              Algorithm::kLibrary);
  }
  EXPECT_EQ(select_algorithm(op_of(OpKind::kSend, 4), group(4, 0),
                             parse_algorithm_overrides("send=mailbox")),
            Algorithm::kLibrary);
  EXPECT_THROW(parse_algorithm_overrides("all_reduce=mailbox"), Error);
  Op uneven = op_of(OpKind::kAllToAll, 6);
  uneven.input_splits = {1, 2, 3, 0};
  uneven.output_splits = {1, 2, 3, 0};
  EXPECT_EQ(select_algorithm(uneven, g), Algorithm::kSlots);
  // Its splits travel first, 16 bytes per rank: a slot too small for them leaves it to Gloo.
  EXPECT_EQ(select_algorithm(uneven, group(4, 64)), Algorithm::kSlots);
  EXPECT_EQ(select_algorithm(uneven, group(9, 128)), Algorithm::kLibrary);
  EXPECT_EQ(select_algorithm(uneven, group(4, 0)), Algorithm::kLibrary);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllGather, 0), g), Algorithm::kNone);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kCoalesced, 0), g), Algorithm::kNone);
}

TEST(AlgorithmTable, AcrossHostsTheHierarchyRunsWhatItCan) {
  GroupShape hosts = group(4, 0);
  hosts.hierarchy = true;
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduce, OpKind::kBroadcast, OpKind::kAllGather,
                      OpKind::kReduceScatter, OpKind::kBarrier}) {
    EXPECT_EQ(select_algorithm(op_of(kind, 1 << 20), hosts), Algorithm::kHierarchical)
        << op_kind_name(kind);
  }
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllToAll, 64), hosts), Algorithm::kLibrary);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kGather, 64), hosts), Algorithm::kLibrary);
  // Forced away from it, where the forced one can run.
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 64), hosts,
                             parse_algorithm_overrides("all_reduce=library")),
            Algorithm::kLibrary);
  // Forced onto it without host transports: the table decides.
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllGather, 64), group(4, 0),
                             parse_algorithm_overrides("hierarchical")),
            Algorithm::kLibrary);
  EXPECT_THROW(parse_algorithm_overrides("all_to_all=hierarchical"), Error);
}

// Hosts are numbered by their lowest rank; an unknown host (0) shares with no one.
TEST(HostLayout, GroupsRanksByHostInOrderOfTheirLowestRank) {
  const std::vector<uint64_t> ids = {7, 9, 7, 0, 9, 0, 7};
  const HostLayout layout = HostLayout::from_host_ids(ids);
  EXPECT_EQ(layout.ranks, (std::vector<std::vector<int>>{{0, 2, 6}, {1, 4}, {3}, {5}}));
  EXPECT_EQ(layout.host_of, (std::vector<int>{0, 1, 0, 2, 1, 3, 0}));
  EXPECT_EQ(layout.local_rank_of, (std::vector<int>{0, 0, 1, 0, 1, 0, 2}));
  EXPECT_TRUE(layout.worth_a_hierarchy());
  EXPECT_FALSE(HostLayout::from_host_ids(std::vector<uint64_t>{1, 1, 1}).worth_a_hierarchy());
  EXPECT_FALSE(HostLayout::from_host_ids(std::vector<uint64_t>{1, 2, 0}).worth_a_hierarchy());
}

TEST(AlgorithmTable, OverridesWinWhereTheyCanRun) {
  const AlgorithmOverrides library = parse_algorithm_overrides("library");
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 2), group(2, kSlot), library),
            Algorithm::kLibrary);
  // Gloo has no reduce_scatter of its own: the table's choice stays.
  EXPECT_EQ(select_algorithm(op_of(OpKind::kReduceScatter, 2), group(2, kSlot), library),
            Algorithm::kSlots);

  const AlgorithmOverrides mixed =
      parse_algorithm_overrides("all_reduce=recursive_doubling,reduce_scatter=ring");
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 2), group(2, kSlot), mixed),
            Algorithm::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kReduceScatter, 2), group(2, kSlot), mixed),
            Algorithm::kRing);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kBroadcast, 2), group(2, kSlot), mixed),
            Algorithm::kSlots);
  // Recursive doubling needs a power-of-two group; slots need a segment.
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 2), group(3, kSlot), mixed),
            Algorithm::kSlots);
  EXPECT_EQ(select_algorithm(op_of(OpKind::kAllReduce, 2), group(2, 0),
                             parse_algorithm_overrides("all_reduce=slots")),
            Algorithm::kRecursiveDoubling);
}

TEST(AlgorithmTable, BadOverridesAreRefusedNamingThePart) {
  auto refusal = [](const std::string& text) {
    try {
      parse_algorithm_overrides(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal("broadcast=ring").find("'broadcast=ring': ring never runs broadcast"),
            std::string::npos)
      << refusal("broadcast=ring");
  EXPECT_EQ(refusal("all_reduce=ring,reduce=ring"), "accepted");
  EXPECT_NE(refusal("fast").find("'fast' is not an algorithm"), std::string::npos);
  EXPECT_NE(refusal("allreduce=slots").find("'allreduce' is not an op"), std::string::npos);
  EXPECT_NE(refusal("send=slots").find("slots never runs send"), std::string::npos);
  EXPECT_NE(refusal("none").find("'none' is not an algorithm"), std::string::npos);
  EXPECT_EQ(refusal(""), "accepted");
}

}  // namespace
}  // namespace meshrt
