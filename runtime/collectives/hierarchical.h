// Hierarchical collectives, for a group whose ranks span hosts with several ranks on some host (as
// NCCL's trees and Open MPI's han do): within each host through its slot exchange (shared memory),
// across hosts once per host between the hosts' first ranks (their leaders) over a pair channel,
// then within each host again. TCP then carries one copy of the data per host instead of one per
// rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/collectives/pair_channel.h"
#include "runtime/collectives/pair_collectives.h"
#include "runtime/collectives/slot_exchange.h"
#include "runtime/op.h"

namespace meshrt {

// Which group ranks share a host. Hosts are numbered in the order of their lowest group rank.
struct HostLayout {
  std::vector<int> host_of;             // By group rank: its host.
  std::vector<int> local_rank_of;       // By group rank: its place among its host's ranks.
  std::vector<std::vector<int>> ranks;  // By host: its group ranks, ascending; ranks[h][0] leads.
  // Laid out host by host (all_gather's and reduce_scatter's leaders), the index of each host's
  // first block; and whether that is group order (every host holds consecutive ranks).
  std::vector<size_t> first_block;
  bool host_order_is_group_order = true;

  // The layout of a group whose rank q reported `host_ids[q]`; 0 (an unknown host) shares with no
  // one.
  static HostLayout from_host_ids(std::span<const uint64_t> host_ids);
  int hosts() const { return static_cast<int>(ranks.size()); }
  // Whether the hierarchy saves anything: several hosts, and several ranks on at least one.
  bool worth_a_hierarchy() const;
  // Whether every host holds as many ranks: then local rank i of every host forms rail i.
  bool uniform() const;
};

// By default, from this size up, an all_reduce on uniform hosts stripes across rails: each rank of
// a host reduces 1/L of the buffer within the host, all_reduces it with its rail across hosts, and
// the host all-gathers the parts, so that every rank (not only the leader) drives TCP. Hosts
// simulated on one 2-core machine share its cores, where striping took up to 2-4x longer from 1 to
// 4 MiB and broke even at 16 MiB (docs/performance.md): real hosts, each with its own cores and
// NIC, should move it down once measured (MESHRT_GLOO_STRIPE_MIN_BYTES).
inline constexpr size_t kStripeMinBytes = size_t{16} << 20;

// One rank's transports into the hierarchy.
struct HostTransports {
  const HostLayout* layout = nullptr;
  int rank = 0;                    // This rank in the whole group.
  SlotExchange* local = nullptr;   // This host's ranks, by local rank; null when it has one.
  PairChannel* leaders = nullptr;  // The leaders, by host; null on every other rank.
  // This rank's rail: the ranks of its local rank on every host, by host (the leaders' rail is
  // `leaders`). Null unless the layout is uniform().
  PairChannel* rail = nullptr;
  // An all_reduce of at least this many bytes stripes across the rails (kStripeMinBytes).
  size_t stripe_min_bytes = 0;
};

// The op kinds run_hierarchical() runs; the others stay on the flat algorithms.
bool runs_hierarchically(OpKind kind);

// Buffers reused from op to op.
struct HierarchicalScratch {
  std::vector<char> by_host;  // The group's blocks in host order (all_gather, reduce_scatter).
  std::vector<char> result;   // A reduce's result on ranks other than the root.
  std::vector<size_t> block_offsets;  // The leaders' blocks (Blocks), by host.
  std::vector<size_t> block_counts;
  PairScratch pairs;
};

// Runs `op` (runs_hierarchically(op.kind)) for the group whose rank is `t.rank`. Local exchanges
// carry `stamp`, the leaders' messages `tag`. Results are bit-identical on every rank: each
// element is folded once, on one rank, in an order every rank shares. Throws the transports'
// Error.
void run_hierarchical(const Op& op, const HostTransports& t, const SlotStamp& stamp, uint64_t tag,
                      std::chrono::steady_clock::time_point deadline, HierarchicalScratch& scratch);

}  // namespace meshrt
