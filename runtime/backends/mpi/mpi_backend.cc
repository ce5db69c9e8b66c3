#include "runtime/backends/mpi/mpi_backend.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <utility>
#include <vector>

#include "runtime/backends/mpi/mpi_types.h"
#include "runtime/backends/mpi/mpi_world.h"
#include "runtime/collectives/average.h"
#include "runtime/error.h"
#include "runtime/watchdog.h"
#include "trace/env.h"

namespace meshrt {
namespace {

// MPI counts and displacements are ints: larger ops would need derived datatypes.
int to_count(size_t n) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw Error(ErrorCode::kNotSupported, {},
                fmt::format("{} elements exceed MPI's int count limit ({})", n, INT_MAX));
  }
  return static_cast<int>(n);
}

// The tag of MPI_Comm_create_group, equal on the members of one group and different between
// groups that overlapping ranks may create in different orders.
int create_group_tag(const std::string& key) {
  return static_cast<int>(std::hash<std::string>{}(key) % 32000) + 1;
}

// Sets what every meshrt MPI communicator has: errors returned (never fatal), and its name.
void configure_comm(MPI_Comm comm, const std::string& name) {
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  std::string shown = name.substr(0, MPI_MAX_OBJECT_NAME - 1);
  MPI_Comm_set_name(comm, shown.c_str());
}

// Keeps an abandoned collective's buffers for the rest of the process: MPI may still write into
// them. They stay reachable from this static list (moving the vectors keeps their storage), so
// that LeakSanitizer sees memory kept on purpose, not a leak.
void keep_forever(std::vector<std::vector<int>> ints, std::vector<char> scratch) {
  static std::mutex mu;
  static auto* kept =
      new std::vector<std::pair<std::vector<std::vector<int>>, std::vector<char>>>();
  std::lock_guard<std::mutex> lock(mu);
  kept->emplace_back(std::move(ints), std::move(scratch));
}

// One launched op: its requests and what must happen when they complete (a copy out of scratch
// space, avg's division, checking received sizes). Blocking ops are finished at launch.
class MpiPendingOp final : public PendingOp {
 public:
  explicit MpiPendingOp(const char* call) : call_(call) {}

  ~MpiPendingOp() override {
    if (!abandoned_) return;
    // The communicator is aborted, and no MPI call can cancel a collective.
    keep_forever(std::move(ints_), std::move(scratch_));
    keep_forever({}, std::move(packed_));
    (void)fold_.release();  // MPI may still call its datatype's fold.  NOLINT: kept on purpose.
  }

  // A new request slot for the non-blocking call.
  MPI_Request* add_request() {
    requests_.push_back(MPI_REQUEST_NULL);
    return &requests_.back();
  }
  void reserve_requests(size_t n) { requests_.reserve(n); }
  // The request just added receives `count` elements of `type` from `peer`: checked at the end.
  void expect_recv(int count, MPI_Datatype type, int peer) {
    recvs_.push_back({requests_.size() - 1, count, type, peer});
  }
  // An int array that lives as long as the op (alltoallv's counts and displacements).
  int* ints(size_t n) { return ints_.emplace_back(n).data(); }
  // Scratch space for an input that MPI needs laid out otherwise (`bytes`, as long as the op).
  void* packed(size_t bytes) {
    packed_.resize(bytes);
    return packed_.data();
  }
  // Scratch space whose first `bytes` are copied to `dst` when the op completes.
  void* scratch_copied_to(void* dst, size_t bytes) {
    scratch_.resize(bytes);
    copy_to_ = dst;
    return scratch_.data();
  }
  // avg: divide `out` by `divisor` once the sum is in.
  void divide_after(const BufferView& out, size_t divisor) {
    divide_ = out;
    divisor_ = divisor;
  }
  // A custom reduction's datatype and op, for as long as the op runs.
  const MpiCustomFold& fold_by(std::shared_ptr<const Reducer> reducer) {
    fold_ = std::make_unique<MpiCustomFold>(std::move(reducer));
    return *fold_;
  }
  const char* call() const { return call_; }
  void set_call(const char* call) { call_ = call; }

  // The blocking path: the data is in place; finish now.
  void complete_now() {
    finish();
    done_ = true;
  }
  // Empties the op for reuse by the next blocking launch (its scratch keeps its capacity).
  void reset() {
    requests_.clear();
    recvs_.clear();
    ints_.clear();
    scratch_.clear();
    copy_to_ = nullptr;
    divisor_ = 0;
    fold_.reset();
    done_ = false;
  }

  PollResult poll() override {
    if (done_) return {PollResult::State::kDone};
    int flag = 0;
    statuses_.resize(recvs_.empty() ? 0 : requests_.size());
    const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                               recvs_.empty() ? MPI_STATUSES_IGNORE : statuses_.data());
    if (rc != MPI_SUCCESS) {
      int code = rc;
      if (rc == MPI_ERR_IN_STATUS) {
        for (const MPI_Status& s : statuses_) {
          if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) {
            code = s.MPI_ERROR;
            break;
          }
        }
      }
      throw_mpi_error(code, call_, {});
    }
    if (!flag) return {PollResult::State::kStarted};
    for (const Recv& r : recvs_) {
      int got = 0;
      MPI_Get_count(&statuses_[r.index], r.type, &got);
      if (got != r.count) {
        throw Error(ErrorCode::kInvalidArgument, {},
                    fmt::format("received {} elements from rank {} into a buffer of {}: the "
                                "ranks disagree on the message size",
                                got, r.peer, r.count));
      }
    }
    finish();
    done_ = true;
    return {PollResult::State::kDone};
  }

  void abandon() noexcept override { abandoned_ = true; }

 private:
  struct Recv {
    size_t index;
    int count;
    MPI_Datatype type;
    int peer;
  };

  void finish() {
    if (copy_to_ != nullptr && !scratch_.empty()) {
      std::memcpy(copy_to_, scratch_.data(), scratch_.size());
    }
    if (divisor_ > 1) divide_elements(divide_.dtype, divide_.data, divide_.count, divisor_);
    if (fold_) {
      std::optional<std::string> failure = fold_->failure();
      fold_.reset();
      if (failure) throw Error(ErrorCode::kInvalidArgument, {}, *failure);
    }
  }

  const char* call_;
  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;
  std::vector<Recv> recvs_;
  std::vector<std::vector<int>> ints_;
  std::vector<char> scratch_;
  std::vector<char> packed_;
  std::unique_ptr<MpiCustomFold> fold_;
  void* copy_to_ = nullptr;
  BufferView divide_;
  size_t divisor_ = 0;
  bool done_ = false;
  bool abandoned_ = false;
};

class MpiBackend final : public Backend {
 public:
  MpiBackend(MPI_Comm comm, int global_rank, size_t blocking_max)
      : comm_(comm), global_rank_(global_rank), blocking_max_(blocking_max) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    tag_ub_ = found && ub != nullptr ? *ub : 32767;
  }

  ~MpiBackend() override {
    // An aborted communicator may have collectives pending on comm_: freeing it is erroneous.
    if (aborted_.load()) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  std::string_view name() const override { return "mpi"; }
  std::string version() const override { return mpi_library_version(); }
  ExecutionModel execution_model() const override { return ExecutionModel::kLaunch; }

  std::unique_ptr<PendingOp> launch(const Op& op) override;
  std::unique_ptr<Backend> split(const SplitSpec& spec) override;
  // Survivors of a dead rank cannot agree on a new MPI communicator without ULFM
  // (MPIX_Comm_revoke / MPIX_Comm_shrink), which MPI itself has not adopted.
  void check_can_shrink() const override {
    throw Error(ErrorCode::kNotSupported, {},
                fmt::format("MPI cannot shrink around a failed rank without ULFM's "
                            "MPIX_Comm_shrink, which {} does not offer to meshrt; shrink in "
                            "default mode (every rank alive, a split), or run the job on Gloo",
                            version()));
  }
  void abort() noexcept override { aborted_.store(true); }

 private:
  bool blocking(const Op& op);
  void check_tag(int tag) const {
    if (tag < 0 || tag > tag_ub_) {
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("tag {} is outside MPI's range [0, {}]", tag, tag_ub_));
    }
  }

  MPI_Comm comm_;
  int global_rank_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  size_t blocking_max_;
  // Whether the watchdog's policy allows the blocking path; read at the first op (the
  // communicator has read the environment by then). Only launch() touches it, one at a time.
  int policy_allows_blocking_ = -1;
  std::unique_ptr<MpiPendingOp> spare_;  // The blocking path's op object, reused (launch() only).
  std::atomic<bool> aborted_{false};
};

bool MpiBackend::blocking(const Op& op) {
  if (blocking_max_ == 0) return false;
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kBarrier:
      break;
    case OpKind::kAllToAll:
      if (!op.input_splits.empty()) return false;  // Sizes differ per rank.
      break;
    default:
      return false;
  }
  if (std::max(op.input.bytes(), op.output.bytes()) > blocking_max_) return false;
  if (policy_allows_blocking_ < 0) {
    policy_allows_blocking_ = Watchdog::instance().policy() == TimeoutPolicy::kAbort ? 1 : 0;
  }
  return policy_allows_blocking_ == 1;
}

std::unique_ptr<PendingOp> MpiBackend::launch(const Op& op) {
  const bool block = blocking(op);
  if (block && op.kind == OpKind::kAllReduce && op.reduce_op != ReduceOp::kAvg && !op.reducer) {
    // The latency-bound op of training loops: nothing to finish after the call, so no op object
    // (its bookkeeping was ~100 instructions per op, docs/performance.md).
    const BufferView& out = op.output;
    const int rc = MPI_Allreduce(op.input.data == out.data ? MPI_IN_PLACE : op.input.data, out.data,
                                 to_count(out.count), mpi_datatype(out.dtype),
                                 mpi_reduce_op(out.dtype, op.reduce_op), comm_);
    if (rc != MPI_SUCCESS) throw_mpi_error(rc, "MPI_Allreduce", {global_rank_, "", "", -1});
    return nullptr;
  }
  std::unique_ptr<MpiPendingOp> p = spare_ ? std::move(spare_) : std::make_unique<MpiPendingOp>("");
  // Before the first request: a later reallocation would move the request MPI writes to.
  if (op.kind == OpKind::kBatchP2P) p->reserve_requests(op.p2p.size());
  MPI_Request* req = block ? nullptr : p->add_request();
  int rc = MPI_SUCCESS;
  // Picks the blocking or the non-blocking MPI function; both take the same arguments.
#define MESHRT_MPI_CALL(blocking_fn, nonblocking_fn, ...) \
  do {                                                    \
    if (block) {                                          \
      p->set_call(#blocking_fn);                          \
      rc = blocking_fn(__VA_ARGS__);                      \
    } else {                                              \
      p->set_call(#nonblocking_fn);                       \
      rc = nonblocking_fn(__VA_ARGS__, req);              \
    }                                                     \
  } while (0)
  const BufferView& in = op.input;
  const BufferView& out = op.output;
  const size_t es = out.element_bytes();
  // A Reducer folds its own datatype; built-in ops fold MPI's types or meshrt's kernels.
  MPI_Datatype fold_type = MPI_DATATYPE_NULL;
  MPI_Op fold_op = MPI_OP_NULL;
  if (op.reducer) {
    fold_type = p->fold_by(op.reducer).datatype();
    fold_op = MpiCustomFold::op();
  } else if (op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce ||
             op.kind == OpKind::kReduceScatter || op.kind == OpKind::kReduceScatterV) {
    fold_type = mpi_datatype(in.dtype);
    fold_op = mpi_reduce_op(in.dtype, op.reduce_op);
  }
  switch (op.kind) {
    case OpKind::kAllReduce: {
      const void* send = in.data == out.data ? MPI_IN_PLACE : in.data;
      MESHRT_MPI_CALL(MPI_Allreduce, MPI_Iallreduce, send, out.data, to_count(out.count), fold_type,
                      fold_op, comm_);
      break;
    }
    case OpKind::kBroadcast:
      MESHRT_MPI_CALL(MPI_Bcast, MPI_Ibcast, out.data, to_count(out.count), mpi_datatype(out.dtype),
                      op.root, comm_);
      break;
    case OpKind::kReduce: {
      const bool root = rank_ == op.root;
      const void* send = root && in.data == out.data ? MPI_IN_PLACE : in.data;
      MESHRT_MPI_CALL(MPI_Reduce, MPI_Ireduce, send, root ? out.data : nullptr, to_count(in.count),
                      fold_type, fold_op, op.root, comm_);
      break;
    }
    case OpKind::kAllGather: {
      const int c = to_count(in.count);
      const bool in_place = in.data == static_cast<char*>(out.data) + rank_ * in.count * es;
      MESHRT_MPI_CALL(MPI_Allgather, MPI_Iallgather, in_place ? MPI_IN_PLACE : in.data, c,
                      mpi_datatype(in.dtype), out.data, c, mpi_datatype(out.dtype), comm_);
      break;
    }
    case OpKind::kReduceScatter: {
      const int c = to_count(out.count);
      // In place the output is this rank's block of the input, which MPI may not alias (its
      // MPI_IN_PLACE takes the whole input from the output and clobbers the other blocks).
      const bool in_place = out.data == static_cast<char*>(in.data) + rank_ * out.count * es;
      void* recv = in_place ? p->scratch_copied_to(out.data, out.bytes()) : out.data;
      MESHRT_MPI_CALL(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, in.data, recv, c,
                      fold_type, fold_op, comm_);
      break;
    }
    case OpKind::kAllGatherV: {
      // Counts and displacements in one MPI type's elements: the dtype's, or bytes of records.
      const size_t unit = out.record_bytes != 0 ? out.record_bytes : 1;
      const MPI_Datatype t = out.record_bytes != 0 ? MPI_BYTE : mpi_datatype(out.dtype);
      int* counts = p->ints(size_);
      int* displs = p->ints(size_);
      for (int q = 0; q < size_; ++q) {
        counts[q] = to_count(op.block_counts[q] * unit);
        displs[q] = to_count(op.block_offsets[q] * unit);
      }
      const bool in_place = in.data == static_cast<char*>(out.data) + op.block_offsets[rank_] * es;
      MESHRT_MPI_CALL(MPI_Allgatherv, MPI_Iallgatherv, in_place ? MPI_IN_PLACE : in.data,
                      counts[rank_], t, out.data, counts, displs, t, comm_);
      break;
    }
    case OpKind::kReduceScatterV: {
      // MPI's blocks follow one another in rank order: other layouts are packed so first.
      int* counts = p->ints(size_);
      bool repack = false;
      size_t total = 0;
      for (int q = 0; q < size_; ++q) {
        counts[q] = to_count(op.block_counts[q]);
        repack |= op.block_offsets[q] != total;
        total += op.block_counts[q];
      }
      const void* send = in.data;
      if (repack) {
        char* to = static_cast<char*>(p->packed(total * es));
        send = to;
        for (int q = 0; q < size_; ++q) {
          if (op.block_counts[q] == 0) continue;
          std::memcpy(to, static_cast<const char*>(in.data) + op.block_offsets[q] * es,
                      op.block_counts[q] * es);
          to += op.block_counts[q] * es;
        }
      }
      // In place (output = this rank's block of the input) MPI may not alias them.
      const bool in_place = out.data == static_cast<char*>(in.data) + op.block_offsets[rank_] * es;
      void* recv = in_place && !repack ? p->scratch_copied_to(out.data, out.bytes()) : out.data;
      MESHRT_MPI_CALL(MPI_Reduce_scatter, MPI_Ireduce_scatter, send, recv, counts, fold_type,
                      fold_op, comm_);
      break;
    }
    case OpKind::kAllToAll: {
      const MPI_Datatype t = mpi_datatype(in.dtype);
      if (op.input_splits.empty()) {
        const int c = to_count(in.count / size_);
        MESHRT_MPI_CALL(MPI_Alltoall, MPI_Ialltoall, in.data, c, t, out.data, c, t, comm_);
        break;
      }
      int* sc = p->ints(size_);
      int* sd = p->ints(size_);
      int* rc_ = p->ints(size_);
      int* rd = p->ints(size_);
      size_t s_off = 0, r_off = 0;
      for (int j = 0; j < size_; ++j) {
        sc[j] = to_count(op.input_splits[j]);
        sd[j] = to_count(s_off);
        rc_[j] = to_count(op.output_splits[j]);
        rd[j] = to_count(r_off);
        s_off += op.input_splits[j];
        r_off += op.output_splits[j];
      }
      p->set_call("MPI_Ialltoallv");
      rc = MPI_Ialltoallv(in.data, sc, sd, t, out.data, rc_, rd, t, comm_, req);
      break;
    }
    case OpKind::kGather: {
      const int c = to_count(in.count);
      const MPI_Datatype t = mpi_datatype(in.dtype);
      p->set_call("MPI_Igather");
      rc = MPI_Igather(in.data, c, t, rank_ == op.root ? out.data : nullptr, c, t, op.root, comm_,
                       req);
      break;
    }
    case OpKind::kScatter: {
      const int c = to_count(out.count);
      const MPI_Datatype t = mpi_datatype(out.dtype);
      p->set_call("MPI_Iscatter");
      rc = MPI_Iscatter(rank_ == op.root ? in.data : nullptr, c, t, out.data, c, t, op.root, comm_,
                        req);
      break;
    }
    case OpKind::kBarrier:
      if (block) {
        p->set_call("MPI_Barrier");
        rc = MPI_Barrier(comm_);
      } else {
        p->set_call("MPI_Ibarrier");
        rc = MPI_Ibarrier(comm_, req);
      }
      break;
    case OpKind::kSend:
      check_tag(op.tag);
      p->set_call("MPI_Isend");
      rc = MPI_Isend(in.data, to_count(in.count), mpi_datatype(in.dtype), op.root, op.tag, comm_,
                     req);
      break;
    case OpKind::kRecv: {
      check_tag(op.tag);
      const int c = to_count(out.count);
      p->set_call("MPI_Irecv");
      rc = MPI_Irecv(out.data, c, mpi_datatype(out.dtype), op.root, op.tag, comm_, req);
      p->expect_recv(c, mpi_datatype(out.dtype), op.root);
      break;
    }
    case OpKind::kBatchP2P: {
      for (size_t i = 0; i < op.p2p.size() && rc == MPI_SUCCESS; ++i) {
        const P2POp& m = op.p2p[i];
        check_tag(m.tag);
        MPI_Request* r = i == 0 ? req : p->add_request();
        const int c = to_count(m.buffer.count);
        const MPI_Datatype t = mpi_datatype(m.buffer.dtype);
        if (m.dir == P2POp::Dir::kSend) {
          p->set_call("MPI_Isend");
          rc = MPI_Isend(m.buffer.data, c, t, m.peer, m.tag, comm_, r);
        } else {
          p->set_call("MPI_Irecv");
          rc = MPI_Irecv(m.buffer.data, c, t, m.peer, m.tag, comm_, r);
          p->expect_recv(c, t, m.peer);
        }
      }
      break;
    }
    case OpKind::kCoalesced:
      // The communicator closes a coalescing block itself; it never reaches a backend.
      throw Error(ErrorCode::kInternal, {global_rank_, "", "coalesced", -1},
                  "a coalesced closing entry reached the MPI backend");
  }
#undef MESHRT_MPI_CALL
  if (rc != MPI_SUCCESS) throw_mpi_error(rc, p->call(), {global_rank_, "", "", -1});
  // MPI has no average: a sum, divided where a result lands (collectives/average.h's rule).
  if (op.reduce_op == ReduceOp::kAvg && holds_reduced_result(op, rank_)) {
    p->divide_after(out, size_);
  }
  if (!block) return p;
  // Finished inside the call: nothing for the communicator to poll. The op object is kept for
  // the next blocking launch (an allocation per small op showed in profiles).
  p->complete_now();
  p->reset();
  spare_ = std::move(p);
  return nullptr;
}

std::unique_ptr<Backend> MpiBackend::split(const SplitSpec& spec) {
  MPI_Group parent = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm child = MPI_COMM_NULL;
  MPI_Comm_group(comm_, &parent);
  int rc = MPI_Group_incl(parent, static_cast<int>(spec.parent_ranks.size()),
                          spec.parent_ranks.data(), &group);
  // Only the members call split(): MPI_Comm_create_group is collective over them alone, where
  // MPI_Comm_split would need every parent rank.
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_create_group(comm_, group, create_group_tag(spec.store_key), &child);
  }
  MPI_Group_free(&parent);
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (rc != MPI_SUCCESS) {
    throw_mpi_error(rc, "MPI_Comm_create_group", {global_rank_, spec.name, "split", -1});
  }
  configure_comm(child, spec.name.empty() ? spec.store_key : spec.name);
  return std::make_unique<MpiBackend>(child, global_rank_, blocking_max_);
}

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const GroupSpec& spec) {
  const int global_rank = spec.rank >= 0 && spec.rank < static_cast<int>(spec.global_ranks.size())
                              ? spec.global_ranks[spec.rank]
                              : -1;
  const ErrorContext context{global_rank, spec.name, "init", -1};
  size_t blocking_max = 65536;
  try {
    if (auto v = trace::env::get_int({"MESHRT_MPI_BLOCKING_MAX_BYTES"}, 0)) {
      blocking_max = static_cast<size_t>(*v);
    }
  } catch (const trace::env::EnvError& e) {
    throw Error(ErrorCode::kInvalidArgument, context, e.what());
  }
  ensure_mpi_initialized(global_rank);
  const int world_rank = mpi_world_rank();
  const int world_size = mpi_world_size();
  if (global_rank != world_rank) {
    throw Error(ErrorCode::kInvalidArgument, context,
                fmt::format("meshrt global rank {} is MPI_COMM_WORLD rank {}: the MPI backend "
                            "needs them equal (start every rank with mpirun/srun, or give "
                            "init() the MPI world rank)",
                            global_rank, world_rank));
  }
  for (int r : spec.global_ranks) {
    if (r < 0 || r >= world_size) {
      throw Error(ErrorCode::kInvalidArgument, context,
                  fmt::format("global rank {} is outside MPI_COMM_WORLD (size {})", r, world_size));
    }
  }
  std::vector<int> all(static_cast<size_t>(world_size));
  std::iota(all.begin(), all.end(), 0);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc;
  const char* call;
  if (spec.global_ranks == all) {
    call = "MPI_Comm_dup";
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  } else {
    call = "MPI_Comm_create_group";
    MPI_Group world = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    rc = MPI_Group_incl(world, static_cast<int>(spec.global_ranks.size()), spec.global_ranks.data(),
                        &group);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, create_group_tag(spec.store_key), &comm);
    }
    MPI_Group_free(&world);
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  }
  if (rc != MPI_SUCCESS) throw_mpi_error(rc, call, context);
  configure_comm(comm, spec.name);
  return std::make_unique<MpiBackend>(comm, global_rank, blocking_max);
}

}  // namespace meshrt
