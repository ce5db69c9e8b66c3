#include "runtime/backends/gloo/gloo_signature.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "runtime/reduce_op.h"

namespace meshrt {
namespace {

// The buffer whose count every rank must agree on: the block, where the ops have one.
const BufferView& agreed_buffer(const Op& op) {
  return op.kind == OpKind::kReduceScatter || op.kind == OpKind::kScatter ||
                 op.kind == OpKind::kAllGatherV
             ? op.output
             : op.input;
}

bool rooted(OpKind k) {
  return k == OpKind::kBroadcast || k == OpKind::kReduce || k == OpKind::kGather ||
         k == OpKind::kScatter;
}
bool reduces(OpKind k) {
  return k == OpKind::kAllReduce || k == OpKind::kReduce || k == OpKind::kReduceScatter ||
         k == OpKind::kReduceScatterV;
}
bool has_blocks(OpKind k) { return k == OpKind::kAllGatherV || k == OpKind::kReduceScatterV; }
bool uneven(const Op& op) { return op.kind == OpKind::kAllToAll && !op.input_splits.empty(); }

// A multiply-xorshift mix of the words (splitmix64's constants): the same on every rank for the
// same arguments, a few ns per op and no allocation, as it runs on every op.
uint32_t mix(std::initializer_list<uint64_t> words) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t w : words) {
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return static_cast<uint32_t>(h >> 32);
}

std::string element_name(const BufferView& b) {
  return b.record_bytes != 0 ? fmt::format("{}-byte records", b.record_bytes)
                             : std::string(dtype_name(b.dtype));
}

std::string_view reduction_name(const Op& op) {
  return op.reducer ? op.reducer->name() : reduce_op_name(op.reduce_op);
}

// Ranks that fold by different reducers (same sizes) disagree in the tag too.
uint64_t reduction_word(const Op& op) {
  return op.reducer ? std::hash<std::string_view>{}(op.reducer->name())
                    : static_cast<uint64_t>(op.reduce_op);
}

}  // namespace

std::string gloo_signature(const Op& op) {
  std::string s(op_kind_name(op.kind));
  if (op.kind == OpKind::kBarrier) return s;
  const BufferView& b = agreed_buffer(op);
  if (uneven(op)) {
    s += fmt::format(" with splits of {}", dtype_name(b.dtype));  // Counts travel first.
  } else {
    s += fmt::format(" of {} x {} ({} bytes)", b.count, element_name(b), b.bytes());
  }
  if (rooted(op.kind)) s += fmt::format(", root {}", op.root);
  if (reduces(op.kind)) s += fmt::format(", {}", reduction_name(op));
  if (has_blocks(op.kind)) {
    s += fmt::format(", blocks of [{}] at [{}]", fmt::join(op.block_counts, ", "),
                     fmt::join(op.block_offsets, ", "));
  }
  return s;
}

uint32_t gloo_tag(const Op& op) {
  const uint32_t seq = static_cast<uint32_t>(op.collective_seq) & 0xffffu;
  const BufferView& b = agreed_buffer(op);
  const uint32_t h =
      mix({static_cast<uint64_t>(op.kind), uneven(op) ? ~uint64_t{0} : b.count,
           static_cast<uint64_t>(b.dtype), rooted(op.kind) ? static_cast<uint64_t>(op.root) : 0,
           reduces(op.kind) ? reduction_word(op) : 0, b.record_bytes, blocks_hash(op)});
  return seq | (h << 16);
}

std::string group_ranks_phrase(std::span<const int> group_ranks,
                               std::span<const int> global_ranks) {
  std::vector<int> global;
  bool same = true;
  for (const int r : group_ranks) {
    const int g = r >= 0 && r < static_cast<int>(global_ranks.size()) ? global_ranks[r] : r;
    global.push_back(g);
    same = same && g == r;
  }
  const bool one = group_ranks.size() == 1;
  const std::string mine =
      one ? std::to_string(group_ranks[0]) : fmt::format("[{}]", fmt::join(group_ranks, ", "));
  if (same) return fmt::format("rank{} {}", one ? "" : "s", mine);
  return fmt::format(
      "group rank{0} {1} (global rank{0} {2})", one ? "" : "s", mine,
      one ? std::to_string(global[0]) : fmt::format("[{}]", fmt::join(global, ", ")));
}

Error gloo_diagnose(const Op& op, int rank, int size, Store& store, std::chrono::milliseconds wait,
                    Error failure, std::span<const int> global_ranks) {
  const std::string mine = gloo_signature(op);
  const auto key = [&](int r) { return fmt::format("signature/{}/{}", op.collective_seq, r); };
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // In order of their first rank.
  try {
    store.set(key(rank), std::span<const char>(mine.data(), mine.size()));
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (int r = 0; r < size; ++r) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      const auto value = store.get(key(r), std::max(left, std::chrono::milliseconds(1)));
      const std::string signature(value.begin(), value.end());
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == signature; });
      if (it == groups.end()) it = groups.insert(groups.end(), {signature, {}});
      it->second.push_back(r);
    }
  } catch (const std::exception&) {
    return failure;  // A peer that never says is dead or hung: the failure stands.
  }
  if (groups.size() == 1) return failure;
  std::vector<std::string> parts;
  for (const auto& [signature, ranks] : groups) {
    parts.push_back(
        fmt::format("{} passed {}", group_ranks_phrase(ranks, global_ranks), signature));
  }
  return Error(ErrorCode::kInvalidArgument, {},
               fmt::format("ranks passed different arguments to one collective: {} (so their "
                           "messages never matched: {})",
                           fmt::join(parts, "; "), failure.detail()));
}

}  // namespace meshrt
