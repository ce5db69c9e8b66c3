#include "runtime/collectives/slot_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/collectives/average.h"
#include "runtime/error.h"
#include "runtime/reduce_op.h"

namespace meshrt {
namespace {

char* byte_at(const BufferView& b, size_t element) {
  return static_cast<char*>(b.data) + element * b.element_bytes();
}

// How `op` goes through the slots: in exchanges of `k` elements of each of `parts` blocks of
// `count` elements that a rank writes, side by side, from `source`.
struct SlotShape {
  const BufferView* source;  // What a contributing rank writes.
  size_t element_bytes;      // Of the blocks, equal on every rank (not so scatter's input).
  size_t count;              // Elements per block.
  size_t parts;              // Blocks a rank writes per exchange: 1, or n (one per rank).
  bool contributes;          // Whether this rank writes (broadcast, scatter: only the root).
};

SlotShape slot_shape(const Op& op, int rank, int size) {
  const size_t n = static_cast<size_t>(size);
  const bool root = rank == op.root;
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduce:
    case OpKind::kAllGather:
    case OpKind::kGather:
      return {&op.input, op.input.element_bytes(), op.input.count, 1, true};
    case OpKind::kBroadcast:
      return {&op.output, op.output.element_bytes(), op.output.count, 1, root};
    case OpKind::kReduceScatter:
      return {&op.input, op.input.element_bytes(), op.output.count, n, true};
    case OpKind::kScatter:
      return {&op.input, op.output.element_bytes(), op.output.count, n, root};
    case OpKind::kAllToAll:
      return {&op.input, op.input.element_bytes(), op.input.count / n, n, true};
    default:  // kBarrier
      return {&op.output, op.output.element_bytes(), 0, 1, true};
  }
}

// Elements [first, first + k) (`bytes`) of each block of `count` are in the slots (block j of
// rank q at offset j x bytes of slot q): place them in the output.
void consume_chunk(const Op& op, const SlotExchange& slots, size_t count, size_t first, size_t k,
                   size_t bytes) {
  const int n = slots.size();
  const size_t rank = static_cast<size_t>(slots.rank());
  const bool root = slots.rank() == op.root;
  auto fold = [&](size_t offset) {  // Reduces the slots' bytes at `offset` into the output.
    char* out = byte_at(op.output, first);
    const Reduction reduce = reduction_of(op);
    reduce(out, slots.slot(0) + offset, slots.slot(1) + offset, k);
    for (int q = 2; q < n; ++q) reduce(out, out, slots.slot(q) + offset, k);
  };
  // Block q of the output gets the slot bytes of rank q at `offset`.
  auto gather_at = [&](size_t offset) {
    for (int q = 0; q < n; ++q) {
      std::memcpy(byte_at(op.output, static_cast<size_t>(q) * count + first),
                  slots.slot(q) + offset, bytes);
    }
  };
  switch (op.kind) {
    case OpKind::kAllReduce:
      return fold(0);
    case OpKind::kReduce:
      if (root) fold(0);
      return;
    case OpKind::kReduceScatter:
      return fold(rank * bytes);
    case OpKind::kBroadcast:
      if (!root) std::memcpy(byte_at(op.output, first), slots.slot(op.root), bytes);
      return;
    case OpKind::kScatter:
      std::memcpy(byte_at(op.output, first), slots.slot(op.root) + rank * bytes, bytes);
      return;
    case OpKind::kAllGather:
      return gather_at(0);
    case OpKind::kGather:
      if (root) gather_at(0);
      return;
    case OpKind::kAllToAll:
      return gather_at(rank * bytes);
    default:
      return;
  }
}

// Uneven all_to_all. The first exchange carries every rank's input and output splits, so every
// rank sees the whole matrix: all check it alike (a mismatch fails every rank before any data
// moves, and they stay in step) and derive the same number of rounds. In each round rank q's slot
// holds n pieces of `piece` elements side by side, piece j the next part of what q sends to j.
void all_to_all_uneven(const Op& op, SlotExchange& slots, const SlotStamp& stamp,
                       std::chrono::steady_clock::time_point deadline) {
  const int n = slots.size();
  const int me = slots.rank();
  auto* mine = reinterpret_cast<uint64_t*>(slots.my_slot());  // Slots are cache-line aligned.
  for (int j = 0; j < n; ++j) {
    mine[j] = op.input_splits[j];
    mine[n + j] = op.output_splits[j];
  }
  slots.exchange(stamp, deadline);
  uint64_t most = 0;  // The largest piece any rank sends to any rank.
  for (int from = 0; from < n; ++from) {
    const auto* row = reinterpret_cast<const uint64_t*>(slots.slot(from));
    for (int to = 0; to < n; ++to) {
      const uint64_t expects = reinterpret_cast<const uint64_t*>(slots.slot(to))[n + from];
      if (row[to] != expects) {
        throw Error(ErrorCode::kInvalidArgument, {},
                    fmt::format("all_to_all split mismatch: rank {} sends {} elements to rank {}, "
                                "which expects {}",
                                from, row[to], to, expects));
      }
      most = std::max(most, row[to]);
    }
  }
  const size_t element_bytes = op.input.element_bytes();
  const size_t piece = slots.slot_bytes() / static_cast<size_t>(n) / element_bytes;
  for (uint64_t done = 0; done < most; done += piece) {
    char* slot = slots.my_slot();
    size_t offset = 0;  // Of the block for rank j in the input.
    for (int j = 0; j < n; ++j) {
      const size_t count = op.input_splits[j];
      if (count > done) {
        std::memcpy(slot + j * piece * element_bytes, byte_at(op.input, offset + done),
                    std::min<size_t>(piece, count - done) * element_bytes);
      }
      offset += count;
    }
    slots.exchange(stamp, deadline);
    offset = 0;  // Of the block from rank q in the output.
    for (int q = 0; q < n; ++q) {
      const size_t count = op.output_splits[q];
      if (count > done) {
        std::memcpy(byte_at(op.output, offset + done),
                    slots.slot(q) + static_cast<size_t>(me) * piece * element_bytes,
                    std::min<size_t>(piece, count - done) * element_bytes);
      }
      offset += count;
    }
  }
}

// The next at most `piece` elements, from `done` on, of a block of `count`.
size_t next_piece(size_t count, size_t done, size_t piece) {
  return std::min(piece, count - std::min(count, done));
}

// all_gather_v: in each exchange every rank's slot holds the next piece of its block, and every
// rank copies each piece to its block's place in the output. The blocks' counts are equal on
// every rank, so all take the same number of exchanges.
void all_gather_v(const Op& op, SlotExchange& slots, const SlotStamp& stamp,
                  std::chrono::steady_clock::time_point deadline) {
  const size_t es = op.output.element_bytes();
  const size_t piece = slots.slot_bytes() / es;
  const size_t me = static_cast<size_t>(slots.rank());
  const size_t most = *std::max_element(op.block_counts.begin(), op.block_counts.end());
  size_t done = 0;
  do {
    const size_t mine = next_piece(op.block_counts[me], done, piece);
    if (mine != 0) std::memcpy(slots.my_slot(), byte_at(op.input, done), mine * es);
    slots.exchange(stamp, deadline);
    for (size_t q = 0; q < op.block_counts.size(); ++q) {
      const size_t k = next_piece(op.block_counts[q], done, piece);
      if (k != 0) {
        std::memcpy(byte_at(op.output, op.block_offsets[q] + done), slots.slot(static_cast<int>(q)),
                    k * es);
      }
    }
    done += piece;
  } while (done < most);
}

// reduce_scatter_v: in each exchange a rank's slot holds the next piece of each of its blocks,
// side by side, and every rank folds the pieces of its own block, in rank order.
void reduce_scatter_v(const Op& op, SlotExchange& slots, const SlotStamp& stamp,
                      std::chrono::steady_clock::time_point deadline) {
  const int n = slots.size();
  const size_t es = op.input.element_bytes();
  const size_t piece = slots.slot_bytes() / es / static_cast<size_t>(n);
  const size_t me = static_cast<size_t>(slots.rank());
  const size_t most = *std::max_element(op.block_counts.begin(), op.block_counts.end());
  const Reduction reduce = reduction_of(op);
  size_t done = 0;
  do {
    char* slot = slots.my_slot();
    for (size_t j = 0; j < op.block_counts.size(); ++j) {
      const size_t k = next_piece(op.block_counts[j], done, piece);
      if (k != 0) {
        std::memcpy(slot + j * piece * es, byte_at(op.input, op.block_offsets[j] + done), k * es);
      }
    }
    slots.exchange(stamp, deadline);
    const size_t k = next_piece(op.block_counts[me], done, piece);
    if (k != 0) {
      char* out = byte_at(op.output, done);
      const size_t at = me * piece * es;
      if (n == 1) {
        std::memcpy(out, slots.slot(0) + at, k * es);
      } else {
        reduce(out, slots.slot(0) + at, slots.slot(1) + at, k);
        for (int q = 2; q < n; ++q) reduce(out, out, slots.slot(q) + at, k);
      }
    }
    done += piece;
  } while (done < most);
  finish_average(op, slots.rank(), n);
}

}  // namespace

void run_through_slots(const Op& op, SlotExchange& slots, const SlotStamp& stamp,
                       std::chrono::steady_clock::time_point deadline) {
  if (op.kind == OpKind::kAllToAll && !op.input_splits.empty()) {
    return all_to_all_uneven(op, slots, stamp, deadline);
  }
  if (op.kind == OpKind::kAllGatherV) return all_gather_v(op, slots, stamp, deadline);
  if (op.kind == OpKind::kReduceScatterV) return reduce_scatter_v(op, slots, stamp, deadline);
  const SlotShape shape = slot_shape(op, slots.rank(), slots.size());
  const size_t element_bytes = shape.element_bytes;
  // Elements per block per exchange: a slot holds at least 8 bytes per rank, so at least one of
  // each block of a dtype (a record may be larger).
  const size_t chunk = slots.slot_bytes() / element_bytes / shape.parts;
  if (chunk == 0) {
    throw Error(ErrorCode::kInvalidArgument, {},
                fmt::format("a record of {} bytes does not fit the shared-memory slot's {} bytes "
                            "per rank (MESHRT_GLOO_SHM_SLOT_BYTES)",
                            element_bytes, slots.slot_bytes() / shape.parts));
  }
  size_t done = 0;
  do {
    const size_t k = std::min(chunk, shape.count - done);
    const size_t bytes = k * element_bytes;
    if (shape.contributes && bytes != 0) {
      char* slot = slots.my_slot();
      for (size_t j = 0; j < shape.parts; ++j) {
        std::memcpy(slot + j * bytes, byte_at(*shape.source, j * shape.count + done), bytes);
      }
    }
    slots.exchange(stamp, deadline);
    if (bytes != 0) consume_chunk(op, slots, shape.count, done, k, bytes);
    done += k;
  } while (done < shape.count);
  finish_average(op, slots.rank(), slots.size());
}

}  // namespace meshrt
