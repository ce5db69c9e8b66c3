#include "runtime/validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "runtime/error.h"

namespace meshrt {
namespace {

// The most bytes one buffer may span: pointer differences within it must fit a ptrdiff_t.
constexpr size_t kMaxBufferBytes = std::numeric_limits<std::ptrdiff_t>::max();

class Checker {
 public:
  Checker(const Op& op, const trace::CommInfo& comm, bool accepts_cuda)
      : op_(op), comm_(comm), accepts_cuda_(accepts_cuda) {}

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(ErrorCode::kInvalidArgument,
                {comm_.global_rank, comm_.name, std::string(op_kind_name(op_.kind)), -1},
                fmt::format(f, std::forward<Args>(args)...));
  }

  // Every later size computation (bytes(), block offsets, trace records) relies on these: the
  // dtype is known and count x its size fits, so nothing downstream can wrap.
  void buffer(const BufferView& b, std::string_view what) const {
    const size_t size = b.element_bytes();
    if (dtype_size_bytes(b.dtype) == 0)
      fail("{} has unknown dtype {}", what, static_cast<int>(b.dtype));
    if (b.record_bytes != 0) records(b, what);
    if (b.count > kMaxBufferBytes / size) {
      fail("{} has {} elements of {}: more than {} bytes", what, b.count, dtype_name(b.dtype),
           kMaxBufferBytes);
    }
    if (b.data == nullptr && b.count > 0) fail("{} is null but has {} elements", what, b.count);
    if (!b.shape.empty()) shape(b, what);
    if (b.device.kind == Device::Kind::kCuda && !accepts_cuda_) {
      fail("{} is on cuda:{} but backend '{}' takes CPU buffers only", what, b.device.index,
           comm_.backend);
    }
  }

  // Opaque records mean something only to the Reducer that folds them.
  void records(const BufferView& b, std::string_view what) const {
    if (b.dtype != DType::kU8) {
      fail("{} holds {}-byte records but has dtype {}: records are viewed as u8 (records())", what,
           b.record_bytes, dtype_name(b.dtype));
    }
    if (!op_.reducer && op_.kind != OpKind::kAllGatherV) {
      fail(
          "{} holds {}-byte records, which only a custom reducer folds (and all_gather_v "
          "moves): pass its Reducer, or view the data as u8 bytes",
          what, b.record_bytes);
    }
  }

  void shape(const BufferView& b, std::string_view what) const {
    if (b.shape.ndim() > Shape::kMaxDims) {
      fail("{} has a shape of {} dims: a shape has at most {}", what, b.shape.ndim(),
           Shape::kMaxDims);
    }
    int64_t numel = 1;
    for (size_t i = 0; i < b.shape.ndim(); ++i) {
      if (b.shape[i] < 0)
        fail("{} has shape dim {} of size {}: sizes must not be negative", what, i, b.shape[i]);
      if (__builtin_mul_overflow(numel, b.shape[i], &numel)) {
        fail("{} has a shape whose element count overflows int64", what);
      }
    }
    if (numel != static_cast<int64_t>(b.count)) {
      fail("{} has shape of {} elements but count {}", what, numel, b.count);
    }
  }

  void same_dtype(const BufferView& in, const BufferView& out) const {
    if (in.dtype != out.dtype) {
      fail("input dtype {} differs from output dtype {}", dtype_name(in.dtype),
           dtype_name(out.dtype));
    }
    if (in.record_bytes != out.record_bytes) {
      fail("input has {}-byte records but output has {}-byte records", in.record_bytes,
           out.record_bytes);
    }
  }

  void rank_in_range(int r, std::string_view what) const {
    const int n = static_cast<int>(comm_.global_ranks.size());
    if (r < 0 || r >= n) fail("{} {} is out of range [0, {})", what, r, n);
  }

  void peer(int p) const {
    rank_in_range(p, "peer");
    if (p == comm_.rank) fail("peer {} is this rank itself: send/recv to self is not supported", p);
  }

  void reduce_op(const BufferView& b) const {
    const DType dtype = b.dtype;
    if (reduce_op_name(op_.reduce_op) == "unknown") {
      fail("unknown reduce op {}", static_cast<int>(op_.reduce_op));
    }
    if ((op_.reduce_op == ReduceOp::kCustom) != (op_.reducer != nullptr)) {
      fail("reduce op {} with {}: a Reducer goes with ReduceOp::kCustom only",
           reduce_op_name(op_.reduce_op), op_.reducer ? "a Reducer" : "no Reducer");
    }
    if (op_.reducer) return custom_reducer(*op_.reducer, b);
    if (op_.reduce_op == ReduceOp::kAvg && !is_floating(dtype)) {
      fail("reduce op avg on integer dtype {} would truncate: use sum and divide",
           dtype_name(dtype));
    }
  }

  void custom_reducer(const Reducer& r, const BufferView& b) const {
    if (accepts_cuda_) {
      fail(
          "reducer '{}' is a CPU function: backend '{}' folds on the device, with its own ops "
          "only",
          r.name(), comm_.backend);
    }
    if (r.dtype() && (b.dtype != *r.dtype() || b.record_bytes != 0)) {
      fail("reducer '{}' folds {} but the buffer holds {}", r.name(), dtype_name(*r.dtype()),
           b.record_bytes != 0 ? fmt::format("{}-byte records", b.record_bytes)
                               : std::string(dtype_name(b.dtype)));
    }
    if (!r.dtype() && b.element_bytes() != r.element_bytes()) {
      fail(
          "reducer '{}' folds {}-byte records but the buffer's elements have {} bytes (view "
          "them with records(data, count, {}))",
          r.name(), r.element_bytes(), b.element_bytes(), r.element_bytes());
    }
  }

  void count_multiple(size_t big, size_t small, std::string_view big_name,
                      std::string_view small_name) const {
    const size_t n = comm_.global_ranks.size();
    if (big != times_group_size(small, small_name)) {
      fail("{} has {} elements but must have {} ({} of {} elements x group size {})", big_name, big,
           small * n, small_name, small, n);
    }
  }

  // count x the group size, failing when it would wrap.
  size_t times_group_size(size_t count, std::string_view what) const {
    const size_t n = comm_.global_ranks.size();
    size_t total = 0;
    if (__builtin_mul_overflow(count, n, &total)) {
      fail("{} of {} elements x group size {} overflows", what, count, n);
    }
    return total;
  }

  void no_overlap(const BufferView& a, const BufferView& b) const {
    const char* a0 = static_cast<const char*>(a.data);
    const char* b0 = static_cast<const char*>(b.data);
    if (a.bytes() == 0 || b.bytes() == 0) return;
    if (a0 < b0 + b.bytes() && b0 < a0 + a.bytes()) {
      fail(
          "input and output overlap (in place means the input is exactly this rank's block of "
          "the output, or for reduce_scatter the output is this rank's block of the input)");
    }
  }

  // Where block rank() of `whole` starts, in blocks of `block` elements.
  const void* block_of(const BufferView& whole, size_t block) const {
    return static_cast<const char*>(whole.data) +
           static_cast<size_t>(comm_.rank) * block * whole.element_bytes();
  }

  void splits(const std::vector<size_t>& s, size_t count, std::string_view what) const {
    const size_t n = comm_.global_ranks.size();
    if (s.size() != n) fail("{} has {} entries but the group has {} ranks", what, s.size(), n);
    size_t sum = 0;
    for (size_t x : s) {
      if (__builtin_add_overflow(sum, x, &sum)) fail("{} add up to more than 2^64 elements", what);
    }
    if (sum != count) fail("{} add up to {} elements but the buffer has {}", what, sum, count);
  }

  // The v-collectives' blocks: one per rank, inside `whole`, none overlapping another, and this
  // rank's of `mine` elements.
  void blocks(const BufferView& whole, size_t mine, std::string_view mine_name) const {
    const size_t n = comm_.global_ranks.size();
    const std::vector<size_t>& counts = op_.block_counts;
    const std::vector<size_t>& offsets = op_.block_offsets;
    if (counts.size() != n || offsets.size() != n) {
      fail("counts have {} entries and offsets {}, but the group has {} ranks", counts.size(),
           offsets.size(), n);
    }
    for (size_t q = 0; q < n; ++q) {
      size_t end = 0;
      if (__builtin_add_overflow(offsets[q], counts[q], &end) || end > whole.count) {
        fail("block {} ({} elements at offset {}) ends past the {} elements of the {}", q,
             counts[q], offsets[q], whole.count,
             op_.kind == OpKind::kAllGatherV ? "output" : "input");
      }
    }
    std::vector<size_t> order(n);
    for (size_t q = 0; q < n; ++q) order[q] = q;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
    size_t end = 0, last = n;  // The furthest end of a non-empty block so far, and its block.
    for (const size_t q : order) {
      if (counts[q] == 0) continue;
      if (last != n && offsets[q] < end) fail("blocks {} and {} overlap", last, q);
      end = offsets[q] + counts[q];
      last = q;
    }
    const size_t r = static_cast<size_t>(comm_.rank);
    if (mine != counts[r]) {
      fail("{} has {} elements but this rank's block (counts[{}]) has {}", mine_name, mine, r,
           counts[r]);
    }
  }

  // Whether `part` is this rank's block of `whole` (the v-collectives' in-place form).
  bool is_my_block(const BufferView& part, const BufferView& whole) const {
    return part.data ==
           static_cast<const char*>(whole.data) +
               op_.block_offsets[static_cast<size_t>(comm_.rank)] * whole.element_bytes();
  }

  void run() const {
    if (op_.timeout.count() <= 0) fail("timeout must be positive, got {} ms", op_.timeout.count());
    const bool is_root = op_.root == comm_.rank;
    switch (op_.kind) {
      case OpKind::kAllReduce:
        buffer(op_.input, "buffer");
        reduce_op(op_.input);
        return;
      case OpKind::kBroadcast:
        buffer(op_.input, "buffer");
        rank_in_range(op_.root, "root");
        return;
      case OpKind::kReduce:
        buffer(op_.input, "buffer");
        rank_in_range(op_.root, "root");
        reduce_op(op_.input);
        return;
      case OpKind::kAllGather:
        buffer(op_.input, "input");
        buffer(op_.output, "output");
        same_dtype(op_.input, op_.output);
        count_multiple(op_.output.count, op_.input.count, "output", "input");
        // In place means exactly this rank's block of the output; any other overlap corrupts.
        if (op_.input.data != block_of(op_.output, op_.input.count))
          no_overlap(op_.input, op_.output);
        return;
      case OpKind::kReduceScatter:
        buffer(op_.input, "input");
        buffer(op_.output, "output");
        same_dtype(op_.input, op_.output);
        reduce_op(op_.input);
        count_multiple(op_.input.count, op_.output.count, "input", "output");
        if (op_.output.data != block_of(op_.input, op_.output.count))
          no_overlap(op_.input, op_.output);
        return;
      case OpKind::kAllGatherV:
        buffer(op_.input, "input");
        buffer(op_.output, "output");
        same_dtype(op_.input, op_.output);
        blocks(op_.output, op_.input.count, "input");
        if (!is_my_block(op_.input, op_.output)) no_overlap(op_.input, op_.output);
        return;
      case OpKind::kReduceScatterV:
        buffer(op_.input, "input");
        buffer(op_.output, "output");
        same_dtype(op_.input, op_.output);
        reduce_op(op_.input);
        blocks(op_.input, op_.output.count, "output");
        if (!is_my_block(op_.output, op_.input)) no_overlap(op_.input, op_.output);
        return;
      case OpKind::kAllToAll: {
        buffer(op_.input, "input");
        buffer(op_.output, "output");
        same_dtype(op_.input, op_.output);
        no_overlap(op_.input, op_.output);
        if (op_.input_splits.empty() && op_.output_splits.empty()) {
          const size_t n = comm_.global_ranks.size();
          if (op_.input.count != op_.output.count) {
            fail("input has {} elements but output has {}: equal all_to_all needs the same count",
                 op_.input.count, op_.output.count);
          }
          if (op_.input.count % n != 0) {
            fail("{} elements are not divisible by group size {}", op_.input.count, n);
          }
        } else {
          splits(op_.input_splits, op_.input.count, "input splits");
          splits(op_.output_splits, op_.output.count, "output splits");
        }
        return;
      }
      case OpKind::kGather:
        rank_in_range(op_.root, "root");
        buffer(op_.input, "input");
        times_group_size(op_.input.count, "input");
        if (is_root) {
          buffer(op_.output, "output");
          same_dtype(op_.input, op_.output);
          no_overlap(op_.input, op_.output);
          count_multiple(op_.output.count, op_.input.count, "output", "input");
        }
        return;
      case OpKind::kScatter:
        rank_in_range(op_.root, "root");
        buffer(op_.output, "output");
        times_group_size(op_.output.count, "output");
        if (is_root) {
          buffer(op_.input, "input");
          same_dtype(op_.input, op_.output);
          no_overlap(op_.input, op_.output);
          count_multiple(op_.input.count, op_.output.count, "input", "output");
        }
        return;
      case OpKind::kBarrier:
        return;
      case OpKind::kSend:
      case OpKind::kRecv:
        buffer(op_.input, "buffer");
        peer(op_.root);
        return;
      case OpKind::kCoalesced:
        fail("a coalesced group's closing entry is made by end_coalescing(), not called");
      case OpKind::kBatchP2P:
        if (op_.p2p.empty()) fail("the batch is empty");
        for (const P2POp& p : op_.p2p) {
          buffer(p.buffer, p.dir == P2POp::Dir::kSend ? "send buffer" : "recv buffer");
          peer(p.peer);
        }
        return;
    }
  }

 private:
  const Op& op_;
  const trace::CommInfo& comm_;
  bool accepts_cuda_;
};

}  // namespace

void validate_op(const Op& op, const trace::CommInfo& comm, bool accepts_cuda) {
  Checker(op, comm, accepts_cuda).run();
}

}  // namespace meshrt
