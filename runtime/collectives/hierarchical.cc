#include "runtime/collectives/hierarchical.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>

#include "runtime/collectives/average.h"
#include "runtime/collectives/slot_collectives.h"
#include "runtime/error.h"
#include "runtime/reduce_op.h"

namespace meshrt {
namespace {

// Up to this size a power-of-two set of leaders swaps whole buffers (recursive doubling: log2 H
// messages); above it they take the ring, which moves 2(H-1)/H of the buffer and folds each block
// on one leader only.
constexpr size_t kLeadersRingMinBytes = size_t{64} << 10;

using Clock = std::chrono::steady_clock;

// Copies blocks of `block_bytes` between group order and host order.
void permute(const HostLayout& layout, const char* from, char* to, size_t block_bytes,
             bool to_host_order) {
  for (int h = 0; h < layout.hosts(); ++h) {
    for (size_t i = 0; i < layout.ranks[h].size(); ++i) {
      const size_t group = static_cast<size_t>(layout.ranks[h][i]) * block_bytes;
      const size_t host = (layout.first_block[h] + i) * block_bytes;
      std::memcpy(to + (to_host_order ? host : group), from + (to_host_order ? group : host),
                  block_bytes);
    }
  }
}

// The hosts' blocks of `per_rank` elements per rank, laid out host by host, for the leaders.
Blocks leaders_blocks(const HostLayout& layout, size_t per_rank, HierarchicalScratch& scratch) {
  scratch.block_offsets.resize(layout.ranks.size());
  scratch.block_counts.resize(layout.ranks.size());
  for (size_t h = 0; h < layout.ranks.size(); ++h) {
    scratch.block_offsets[h] = layout.first_block[h] * per_rank;
    scratch.block_counts[h] = layout.ranks[h].size() * per_rank;
  }
  return {scratch.block_offsets, scratch.block_counts};
}

char* bytes_of(const BufferView& b) { return static_cast<char*>(b.data); }

// A local step: `op` run through this host's slots (a host with one rank has none to run).
void local_step(const Op& op, const HostTransports& t, const SlotStamp& stamp,
                Clock::time_point deadline) {
  if (t.local) run_through_slots(op, *t.local, stamp, deadline);
}

Op sub_op(OpKind kind, BufferView input, BufferView output, int root = 0) {
  Op op;
  op.kind = kind;
  op.input = input;
  op.output = output;
  op.root = root;
  return op;
}

// A sub-op that folds as `parent` does, except that avg sums: the division comes once, at the
// end, by the whole group's size.
Op folding_sub_op(OpKind kind, BufferView input, BufferView output, const Op& parent) {
  Op op = sub_op(kind, input, output);
  op.reduce_op = parent.reduce_op == ReduceOp::kAvg ? ReduceOp::kSum : parent.reduce_op;
  op.reducer = parent.reducer;
  return op;
}

// all_reduce among a channel's ranks of `data`, in place, folding as `parent` does.
void all_reduce_pairs(const BufferView& data, const Op& parent, PairChannel& pairs, uint64_t tag,
                      Clock::time_point deadline, HierarchicalScratch& scratch) {
  if (std::has_single_bit(static_cast<unsigned>(pairs.size())) &&
      data.bytes() < kLeadersRingMinBytes) {
    all_reduce_recursive_doubling(folding_sub_op(OpKind::kAllReduce, data, data, parent), pairs,
                                  tag, deadline, scratch.pairs);
  } else {
    all_reduce_ring_in_place(bytes_of(data), data.count, reduction_of(parent), pairs, tag, deadline,
                             scratch.pairs);
  }
}

// all_reduce of op.input into `out`: reduce to the leader, all_reduce among leaders, broadcast.
void all_reduce(const Op& op, BufferView out, const HostTransports& t, const SlotStamp& stamp,
                uint64_t tag, Clock::time_point deadline, HierarchicalScratch& scratch) {
  if (t.local) {
    local_step(folding_sub_op(OpKind::kReduce, op.input, out, op), t, stamp, deadline);
  } else if (out.data != op.input.data && out.count != 0) {
    std::memcpy(out.data, op.input.data, out.bytes());
  }
  if (t.leaders) all_reduce_pairs(out, op, *t.leaders, tag, deadline, scratch);
  local_step(sub_op(OpKind::kBroadcast, out, out), t, stamp, deadline);
  average_elements(op, out.data, out.count, static_cast<int>(t.layout->host_of.size()));
}

// The striped all_reduce: part i of the output (elements [i P, (i+1) P), P = ceil(count / L)) is
// reduced within the host onto local rank i, all_reduced along rail i, then all-gathered within
// the host. Each exchange carries the next `piece` elements of every part, side by side.
void all_reduce_striped(const Op& op, const HostTransports& t, const SlotStamp& stamp, uint64_t tag,
                        Clock::time_point deadline, HierarchicalScratch& scratch) {
  SlotExchange& slots = *t.local;
  const size_t parts = static_cast<size_t>(slots.size());
  const size_t me = static_cast<size_t>(slots.rank());
  const size_t count = op.output.count;
  const size_t element_bytes = op.output.element_bytes();
  const Reduction reduce = reduction_of(op);
  const size_t part = (count + parts - 1) / parts;
  auto part_count = [&](size_t j) { return std::min(part, count - std::min(count, j * part)); };
  const size_t piece = slots.slot_bytes() / element_bytes / parts;
  const char* in = static_cast<const char*>(op.input.data);
  char* out = bytes_of(op.output);
  // Reduce-scatter: each rank folds piece `me` of every slot into its part, in local rank order.
  for (size_t done = 0; done < part; done += piece) {
    char* slot = slots.my_slot();
    for (size_t j = 0; j < parts; ++j) {
      const size_t k = std::min(piece, part_count(j) - std::min(part_count(j), done));
      if (k != 0) {
        std::memcpy(slot + j * piece * element_bytes, in + (j * part + done) * element_bytes,
                    k * element_bytes);
      }
    }
    slots.exchange(stamp, deadline);
    const size_t k = std::min(piece, part_count(me) - std::min(part_count(me), done));
    if (k == 0) continue;
    char* target = out + (me * part + done) * element_bytes;
    const size_t offset = me * piece * element_bytes;
    reduce(target, slots.slot(0) + offset, slots.slot(1) + offset, k);
    for (size_t q = 2; q < parts; ++q) {
      reduce(target, target, slots.slot(static_cast<int>(q)) + offset, k);
    }
  }
  all_reduce_pairs(op.output.slice(me * part, part_count(me)), op, *t.rail, tag, deadline, scratch);
  // All-gather: each rank publishes the next piece of its part and copies the others'.
  for (size_t done = 0; done < part; done += piece) {
    const size_t mine = std::min(piece, part_count(me) - std::min(part_count(me), done));
    if (mine != 0) {
      std::memcpy(slots.my_slot(), out + (me * part + done) * element_bytes, mine * element_bytes);
    }
    slots.exchange(stamp, deadline);
    for (size_t j = 0; j < parts; ++j) {
      const size_t k = std::min(piece, part_count(j) - std::min(part_count(j), done));
      if (j != me && k != 0) {
        std::memcpy(out + (j * part + done) * element_bytes, slots.slot(static_cast<int>(j)),
                    k * element_bytes);
      }
    }
  }
  average_elements(op, op.output.data, count, static_cast<int>(t.layout->host_of.size()));
}

void broadcast(const Op& op, const HostTransports& t, const SlotStamp& stamp, uint64_t tag,
               Clock::time_point deadline) {
  const HostLayout& layout = *t.layout;
  const int root_host = layout.host_of[op.root];
  const bool on_root_host = layout.host_of[t.rank] == root_host;
  if (on_root_host) {
    local_step(sub_op(OpKind::kBroadcast, op.output, op.output, layout.local_rank_of[op.root]), t,
               stamp, deadline);
  }
  if (t.leaders) {
    broadcast_tree(bytes_of(op.output), op.output.bytes(), root_host, *t.leaders, tag, deadline);
  }
  if (!on_root_host)
    local_step(sub_op(OpKind::kBroadcast, op.output, op.output), t, stamp, deadline);
}

void all_gather(const Op& op, const HostTransports& t, const SlotStamp& stamp, uint64_t tag,
                Clock::time_point deadline, HierarchicalScratch& scratch) {
  const HostLayout& layout = *t.layout;
  const size_t count = op.input.count;
  const size_t block_bytes = op.input.bytes();
  const int host = layout.host_of[t.rank];
  // The leader gathers its host's blocks where the host order puts them, then the leaders swap
  // whole hosts' blocks; in group order that is the output itself.
  char* by_host = bytes_of(op.output);
  if (!layout.host_order_is_group_order && t.leaders) {
    scratch.by_host.resize(op.output.bytes());
    by_host = scratch.by_host.data();
  }
  const BufferView host_blocks = op.input.retarget(by_host + layout.first_block[host] * block_bytes,
                                                   layout.ranks[host].size() * count);
  if (t.local) {
    local_step(sub_op(OpKind::kGather, op.input, host_blocks), t, stamp, deadline);
  } else if (block_bytes != 0) {
    std::memmove(host_blocks.data, op.input.data, block_bytes);
  }
  if (t.leaders) {
    all_gather_ring_in_place(by_host, op.input.element_bytes(),
                             leaders_blocks(layout, count, scratch), *t.leaders, tag, deadline);
    if (!layout.host_order_is_group_order) {
      permute(layout, by_host, bytes_of(op.output), block_bytes, false);
    }
  }
  local_step(sub_op(OpKind::kBroadcast, op.output, op.output), t, stamp, deadline);
}

void reduce_scatter(const Op& op, const HostTransports& t, const SlotStamp& stamp, uint64_t tag,
                    Clock::time_point deadline, HierarchicalScratch& scratch) {
  const HostLayout& layout = *t.layout;
  const size_t count = op.output.count;
  const size_t block_bytes = op.output.bytes();
  const int host = layout.host_of[t.rank];
  // The leader folds its host's inputs in group order, puts them in host order, and the leaders
  // reduce-scatter whole hosts' blocks.
  char* by_host = nullptr;
  char* folded = nullptr;
  if (t.leaders) {
    scratch.by_host.resize(op.input.bytes());
    by_host = scratch.by_host.data();
    folded = by_host;
    if (!layout.host_order_is_group_order) {
      scratch.result.resize(op.input.bytes());
      folded = scratch.result.data();
    }
  }
  const BufferView folded_view = op.input.retarget(folded, op.input.count);
  if (t.local) {
    local_step(folding_sub_op(OpKind::kReduce, op.input, folded_view, op), t, stamp, deadline);
  } else if (op.input.count != 0) {
    std::memcpy(folded, op.input.data, op.input.bytes());
  }
  if (t.leaders) {
    if (!layout.host_order_is_group_order) permute(layout, folded, by_host, block_bytes, true);
    reduce_scatter_ring_in_place(by_host, reduction_of(op), leaders_blocks(layout, count, scratch),
                                 *t.leaders, tag, deadline, scratch.pairs);
  }
  // The leader holds its host's blocks, reduced over every host: it scatters them.
  const size_t first = layout.first_block[host] * block_bytes;
  if (t.local) {
    const BufferView host_blocks = op.output.retarget(
        by_host == nullptr ? nullptr : by_host + first, layout.ranks[host].size() * count);
    local_step(sub_op(OpKind::kScatter, host_blocks, op.output), t, stamp, deadline);
  } else if (block_bytes != 0) {
    std::memcpy(op.output.data, by_host + first, block_bytes);
  }
  average_elements(op, op.output.data, count, static_cast<int>(layout.host_of.size()));
}

}  // namespace

HostLayout HostLayout::from_host_ids(std::span<const uint64_t> host_ids) {
  HostLayout layout;
  std::map<uint64_t, int> host_by_id;
  for (size_t q = 0; q < host_ids.size(); ++q) {
    int h = layout.hosts();
    if (host_ids[q] != 0) {
      const auto [it, fresh] = host_by_id.emplace(host_ids[q], h);
      h = it->second;
    }
    if (h == layout.hosts()) layout.ranks.emplace_back();
    layout.host_of.push_back(h);
    layout.local_rank_of.push_back(static_cast<int>(layout.ranks[h].size()));
    layout.ranks[h].push_back(static_cast<int>(q));
  }
  size_t next = 0;
  for (const auto& ranks : layout.ranks) {
    layout.first_block.push_back(next);
    for (const int q : ranks) {
      layout.host_order_is_group_order &= q == static_cast<int>(next++);
    }
  }
  return layout;
}

bool HostLayout::worth_a_hierarchy() const { return hosts() > 1 && host_of.size() > ranks.size(); }

bool HostLayout::uniform() const {
  for (const auto& r : ranks) {
    if (r.size() != ranks[0].size()) return false;
  }
  return true;
}

bool runs_hierarchically(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduce:
    case OpKind::kBroadcast:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kBarrier:
      return true;
    default:
      return false;
  }
}

void run_hierarchical(const Op& op, const HostTransports& t, const SlotStamp& stamp, uint64_t tag,
                      Clock::time_point deadline, HierarchicalScratch& scratch) {
  switch (op.kind) {
    case OpKind::kAllReduce:
      // The layout and sizes are equal on every rank, so every rank takes the same branch.
      if (t.rail && t.local && op.output.bytes() >= t.stripe_min_bytes) {
        return all_reduce_striped(op, t, stamp, tag, deadline, scratch);
      }
      return all_reduce(op, op.output, t, stamp, tag, deadline, scratch);
    case OpKind::kReduce: {
      // An all_reduce whose result other ranks drop: the output of a non-root stays untouched.
      BufferView out = op.output;
      if (t.rank != op.root) {
        scratch.result.resize(op.output.bytes());
        out.data = scratch.result.data();
      }
      return all_reduce(op, out, t, stamp, tag, deadline, scratch);
    }
    case OpKind::kBroadcast:
      return broadcast(op, t, stamp, tag, deadline);
    case OpKind::kAllGather:
      return all_gather(op, t, stamp, tag, deadline, scratch);
    case OpKind::kReduceScatter:
      return reduce_scatter(op, t, stamp, tag, deadline, scratch);
    case OpKind::kBarrier: {
      const Op barrier = sub_op(OpKind::kBarrier, {}, {});
      local_step(barrier, t, stamp, deadline);
      if (t.leaders) barrier_dissemination(*t.leaders, tag, deadline);
      return local_step(barrier, t, stamp, deadline);
    }
    default:
      throw Error(ErrorCode::kInternal, {},
                  fmt::format("hierarchical: no {}", op_kind_name(op.kind)));
  }
}

}  // namespace meshrt
