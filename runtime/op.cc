#include "runtime/op.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <thread>

#include "trace/op_stack.h"
#include "trace/scope.h"

namespace meshrt {

uint64_t message_bytes(const Op& op, int group_size, int rank) {
  const uint64_t n = static_cast<uint64_t>(group_size);
  const bool is_root = op.root == rank;
  switch (trace::op_info(op.kind).size) {
    case trace::SizeRule::kNone:
      return 0;
    case trace::SizeRule::kInput:
      return op.input.bytes();
    case trace::SizeRule::kOutput:
      return op.output.bytes();
    case trace::SizeRule::kLargerBuffer:
      return std::max(op.input.bytes(), op.output.bytes());
    case trace::SizeRule::kRootOutput:
      return is_root ? op.output.bytes() : op.input.bytes() * n;
    case trace::SizeRule::kRootInput:
      return is_root ? op.input.bytes() : op.output.bytes() * n;
    case trace::SizeRule::kLargerDirection: {
      uint64_t sent = 0, received = 0;
      for (const P2POp& p : op.p2p)
        (p.dir == P2POp::Dir::kSend ? sent : received) += p.buffer.bytes();
      return std::max(sent, received);
    }
  }
  return 0;
}

namespace {

trace::Dims dims_of(const BufferView& b) {
  trace::Dims d;
  if (b.shape.ndim() == 0) {
    d.ndim = b.count > 0 ? 1 : 0;
    d.size[0] = static_cast<int64_t>(b.count);
    return d;
  }
  d.ndim = static_cast<uint8_t>(std::min(b.shape.ndim(), trace::Dims::kMax));
  for (size_t i = 0; i < d.ndim; ++i) d.size[i] = b.shape[i];
  return d;
}

}  // namespace

void fill_record(const Op& op, const std::shared_ptr<const trace::CommInfo>& comm,
                 const CallSite& caller, trace::OpRecord& rec) {
  const trace::OpKindInfo& info = trace::op_info(op.kind);
  const int group_size = static_cast<int>(comm->global_ranks.size());
  const int rank = comm->rank;
  rec.comm = comm;
  rec.kind = op.kind;
  rec.op = info.name;
  rec.is_p2p = info.p2p;
  if (info.size != trace::SizeRule::kNone) {
    const BufferView& b = op.kind == OpKind::kBatchP2P ? op.p2p.front().buffer : op.input;
    // A scatter's non-root ranks pass no input: their output has the dtype.
    rec.dtype = b.record_bytes != 0
                    ? "opaque"
                    : dtype_name(op.kind == OpKind::kScatter && op.root != rank ? op.output.dtype
                                                                                : b.dtype);
  }
  if (info.reduces) rec.reduce_op = op.reducer ? op.reducer->name() : reduce_op_name(op.reduce_op);
  rec.algorithm = algorithm_name(op.algorithm);
  rec.input_count = op.input.count;
  rec.output_count = op.output.count;
  rec.input_shape = dims_of(op.input);
  rec.output_shape = dims_of(op.output);
  rec.bytes = message_bytes(op, group_size, rank);
  rec.root_or_peer = op.root;
  rec.timeout_ms = op.timeout.count();
  rec.scope = trace::current_scope();
  rec.setup = trace::in_setup_ops();
  // Hashed once per thread: std::hash of a thread id is a byte hash, per op it showed in profiles.
  // Initial-exec: no __tls_get_addr call per op (see trace/scope.cc).
  [[gnu::tls_model("initial-exec")]] thread_local const uint64_t thread_hash =
      std::hash<std::thread::id>{}(std::this_thread::get_id());
  rec.thread_id = thread_hash;
  rec.caller_file = caller.file;
  rec.caller_line = caller.line;
  rec.stack = trace::capture_op_stack();
}

uint64_t blocks_hash(const Op& op) {
  uint64_t h = 0;
  for (size_t q = 0; q < op.block_counts.size(); ++q) {
    h = (h * 1000003) ^ op.block_counts[q];
    h = (h * 1000003) ^ op.block_offsets[q];
  }
  return h;
}

Reduction reduction_of(const Op& op) {
  if (op.reducer) {
    return {op.input.dtype, ReduceOp::kCustom, op.reducer.get(), op.reducer->element_bytes()};
  }
  return builtin_reduction(op.input.dtype, op.reduce_op);
}

trace::OpRecord make_record(const Op& op, std::shared_ptr<const trace::CommInfo> comm,
                            const CallSite& caller) {
  trace::OpRecord rec;
  fill_record(op, comm, caller, rec);
  return rec;
}

}  // namespace meshrt
