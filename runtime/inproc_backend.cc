#include "runtime/inproc_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "runtime/error.h"
#include "runtime/init.h"
#include "runtime/logging.h"

namespace meshrt {
namespace {

using Clock = std::chrono::steady_clock;

// A send waiting for its receive: receives copy straight out of the sender's buffer.
struct PendingSend {
  const void* data;
  size_t bytes;
  int src;
  bool done = false;
  std::string error;  // Set by the receiver on a size mismatch.
};

// State shared by the ranks of one in-process group.
class Group {
 public:
  explicit Group(int size) : size_(size), slots_(size), arrived_(size, false) {}

  int size() const { return size_; }

  // Publishes this rank's op for the current collective.
  void post(int rank, const Op* op) { slots_[rank] = op; }
  const Op& slot(int rank) const { return *slots_[rank]; }

  // Blocks until all ranks arrived or the deadline passed. A rank that times out breaks the group,
  // so the others fail at once instead of each waiting out its own timeout.
  void arrive_and_wait(int rank, Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    check_broken();
    const uint64_t gen = generation_;
    arrived_[rank] = true;
    if (++arrived_count_ == size_) {
      arrived_count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), false);
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_until(lock, deadline, [&] { return generation_ != gen || !broken_.empty(); })) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r) {
        if (!arrived_[r]) missing.push_back(r);
      }
      broken_ =
          fmt::format("rank {} timed out waiting for ranks [{}]", rank, fmt::join(missing, ", "));
      cv_.notify_all();
      throw Error(
          ErrorCode::kTimeout, {},
          fmt::format("timed out waiting for group ranks [{}] to join", fmt::join(missing, ", ")));
    }
    if (generation_ == gen) check_broken();
  }

  void break_group(std::string reason) {
    std::lock_guard lock(mu_);
    if (broken_.empty()) broken_ = std::move(reason);
    cv_.notify_all();
  }

  // Point-to-point: a send parks in its channel until a receive takes it.
  void post_send(int src, int dst, int tag, PendingSend* send) {
    std::lock_guard lock(mu_);
    check_broken();
    channels_[{src, dst, tag}].push_back(send);
    cv_.notify_all();
  }

  void wait_send(int dst, int tag, PendingSend* send, Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return send->done || !broken_.empty(); })) {
      auto& q = channels_[{send->src, dst, tag}];
      std::erase(q, send);
      throw Error(ErrorCode::kTimeout, {},
                  fmt::format("send to rank {} (tag {}) was not received in time", dst, tag));
    }
    if (!send->done) {
      std::erase(channels_[{send->src, dst, tag}], send);
      check_broken();
    }
    if (!send->error.empty()) throw Error(ErrorCode::kInvalidArgument, {}, send->error);
  }

  void receive(int src, int dst, int tag, void* data, size_t bytes, Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    auto& q = channels_[{src, dst, tag}];
    if (!cv_.wait_until(lock, deadline, [&] { return !q.empty() || !broken_.empty(); })) {
      throw Error(ErrorCode::kTimeout, {},
                  fmt::format("no send from rank {} (tag {}) arrived in time", src, tag));
    }
    if (q.empty()) check_broken();
    PendingSend* send = q.front();
    q.pop_front();
    if (send->bytes != bytes) {
      send->error = fmt::format("send of {} bytes to rank {} matched a recv of {} bytes",
                                send->bytes, dst, bytes);
      send->done = true;
      cv_.notify_all();
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("recv of {} bytes matched a send of {} bytes from rank {}", bytes,
                              send->bytes, src));
    }
    // Copy under the lock: the sender's buffer stays valid until it sees done.
    std::memcpy(data, send->data, bytes);
    send->done = true;
    cv_.notify_all();
  }

  // The child group for `key`, created by the first member to ask; forgotten after all took it.
  std::shared_ptr<Group> child(const std::string& key, int child_size) {
    std::lock_guard lock(mu_);
    auto& entry = children_[key];
    if (!entry.group) entry.group = std::make_shared<Group>(child_size);
    auto group = entry.group;
    if (++entry.taken == child_size) children_.erase(key);
    return group;
  }

 private:
  void check_broken() const {
    if (!broken_.empty()) throw Error(ErrorCode::kPeerFailure, {}, "group failed: " + broken_);
  }

  struct ChildEntry {
    std::shared_ptr<Group> group;
    int taken = 0;
  };

  const int size_;
  std::vector<const Op*> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> arrived_;
  int arrived_count_ = 0;
  uint64_t generation_ = 0;
  std::string broken_;
  std::map<std::tuple<int, int, int>, std::deque<PendingSend*>> channels_;
  std::map<std::string, ChildEntry> children_;
};

// [begin, end) of block `i` when `n` elements are cut into `parts` nearly equal blocks.
std::pair<size_t, size_t> block(size_t n, int parts, int i) {
  return {n * i / parts, n * (i + 1) / parts};
}

char* at(const BufferView& b, size_t element) {
  return static_cast<char*>(b.data) + element * dtype_size_bytes(b.dtype);
}

class InprocBackend : public Backend {
 public:
  InprocBackend(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  std::string_view name() const override { return "inproc"; }
  std::string version() const override { return "meshrt-inproc-1"; }

  void run(const Op& op) override {
    const auto deadline = Clock::now() + op.timeout;
    switch (op.kind) {
      case OpKind::kSend:
        return p2p_batch({P2POp{P2POp::Dir::kSend, op.input, op.root, op.tag}}, deadline);
      case OpKind::kRecv:
        return p2p_batch({P2POp{P2POp::Dir::kRecv, op.input, op.root, op.tag}}, deadline);
      case OpKind::kBatchP2P:
        return p2p_batch(op.p2p, deadline);
      default:
        break;
    }
    group_->post(rank_, &op);
    group_->arrive_and_wait(rank_, deadline);
    // Between the two barriers every rank reads the others' posted ops; each output region is
    // written by exactly one rank, so no locks are needed.
    check_match(op);
    collective(op);
    group_->arrive_and_wait(rank_, deadline);
  }

  std::unique_ptr<Backend> split(const SplitSpec& spec) override {
    return std::make_unique<InprocBackend>(
        group_->child(spec.store_key, static_cast<int>(spec.parent_ranks.size())), spec.rank);
  }

  void abort() noexcept override {
    group_->break_group(fmt::format("rank {} aborted the communicator", rank_));
  }

 private:
  // What must agree across ranks for an op to be safe: kind, root, dtype, reduce op and the
  // element count that sizes every rank's buffers.
  static std::tuple<OpKind, int, DType, ReduceOp, size_t> signature(const Op& op) {
    const bool reduces = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce ||
                         op.kind == OpKind::kReduceScatter;
    const bool per_output = op.kind == OpKind::kReduceScatter || op.kind == OpKind::kScatter;
    size_t count = per_output ? op.output.count : op.input.count;
    if (op.kind == OpKind::kBarrier || !op.input_splits.empty()) count = 0;
    const DType dtype =
        per_output ? op.output.dtype : (op.kind == OpKind::kBarrier ? DType::kF32 : op.input.dtype);
    return {op.kind, op.root, dtype, reduces ? op.reduce_op : ReduceOp::kSum, count};
  }

  // Ranks that called different collectives all fail with the same message, before any copy
  // that could run past a buffer.
  void check_match(const Op&) const {
    const auto first = signature(group_->slot(0));
    for (int r = 1; r < group_->size(); ++r) {
      const auto other = signature(group_->slot(r));
      if (other == first) continue;
      auto describe = [](const auto& s) {
        return fmt::format("{}(root {}, {}, {}, {} elements)", op_kind_name(std::get<0>(s)),
                           std::get<1>(s), dtype_name(std::get<2>(s)),
                           reduce_op_name(std::get<3>(s)), std::get<4>(s));
      };
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("collective mismatch: rank 0 called {} but rank {} called {}",
                              describe(first), r, describe(other)));
    }
  }

  // Reduces block [b, e) of every rank's input (at `offset` elements in each) into `scratch_`.
  const char* reduce_block(const Op& op, size_t offset, size_t len) {
    const size_t es = dtype_size_bytes(op.input.dtype);
    scratch_.resize(len * es);
    if (len == 0) return scratch_.data();
    std::memcpy(scratch_.data(), at(group_->slot(0).input, offset), len * es);
    for (int q = 1; q < group_->size(); ++q) {
      reduce_elements(op.input.dtype, op.reduce_op, scratch_.data(), scratch_.data(),
                      at(group_->slot(q).input, offset), len);
    }
    if (op.reduce_op == ReduceOp::kAvg) {
      divide_elements(op.input.dtype, scratch_.data(), len, group_->size());
    }
    return scratch_.data();
  }

  void collective(const Op& op) {
    const int n = group_->size();
    const size_t es =
        dtype_size_bytes(op.kind == OpKind::kScatter ? op.output.dtype : op.input.dtype);
    switch (op.kind) {
      case OpKind::kBarrier:
        return;
      case OpKind::kAllReduce:
      case OpKind::kReduce: {
        const auto [b, e] = block(op.input.count, n, rank_);
        const char* result = reduce_block(op, b, e - b);
        for (int q = 0; q < n; ++q) {
          if (op.kind == OpKind::kReduce && q != op.root) continue;
          std::memcpy(at(group_->slot(q).output, b), result, (e - b) * es);
        }
        return;
      }
      case OpKind::kReduceScatter: {
        const char* result = reduce_block(op, rank_ * op.output.count, op.output.count);
        std::memcpy(op.output.data, result, op.output.count * es);
        return;
      }
      case OpKind::kBroadcast:
        if (rank_ != op.root) {
          std::memcpy(op.output.data, group_->slot(op.root).input.data, op.output.bytes());
        }
        return;
      case OpKind::kAllGather:
        for (int q = 0; q < n; ++q) {
          char* dst = at(group_->slot(q).output, rank_ * op.input.count);
          if (dst != op.input.data) std::memmove(dst, op.input.data, op.input.bytes());
        }
        return;
      case OpKind::kGather:
        if (rank_ == op.root) {
          for (int q = 0; q < n; ++q) {
            const BufferView& in = group_->slot(q).input;
            std::memcpy(at(op.output, q * op.input.count), in.data, in.bytes());
          }
        }
        return;
      case OpKind::kScatter:
        std::memcpy(op.output.data, at(group_->slot(op.root).input, rank_ * op.output.count),
                    op.output.bytes());
        return;
      case OpKind::kAllToAll: {
        size_t out_offset = 0;
        for (int q = 0; q < n; ++q) {
          const Op& peer = group_->slot(q);
          size_t in_offset = 0, len = 0;
          if (peer.input_splits.empty()) {
            len = peer.input.count / n;
            in_offset = len * rank_;
          } else {
            for (int j = 0; j < rank_; ++j) in_offset += peer.input_splits[j];
            len = peer.input_splits[rank_];
          }
          const size_t expected =
              op.output_splits.empty() ? op.output.count / n : op.output_splits[q];
          if (len != expected) {
            throw Error(ErrorCode::kInvalidArgument, {},
                        fmt::format("all_to_all split mismatch: rank {} sends {} elements to rank "
                                    "{}, which expects {}",
                                    q, len, rank_, expected));
          }
          std::memcpy(at(op.output, out_offset), at(peer.input, in_offset), len * es);
          out_offset += len;
        }
        return;
      }
      default:
        throw Error(ErrorCode::kInternal, {}, "not a collective");
    }
  }

  void p2p_batch(const std::vector<P2POp>& ops, Clock::time_point deadline) {
    // Post every send first so that receives in the same batch can never deadlock against them.
    std::vector<PendingSend> sends;
    sends.reserve(ops.size());
    size_t posted = 0;
    try {
      for (const P2POp& p : ops) {
        if (p.dir != P2POp::Dir::kSend) continue;
        sends.push_back({p.buffer.data, p.buffer.bytes(), rank_, false, {}});
        group_->post_send(rank_, p.peer, p.tag, &sends.back());
        ++posted;
      }
      for (const P2POp& p : ops) {
        if (p.dir == P2POp::Dir::kRecv) {
          group_->receive(p.peer, rank_, p.tag, p.buffer.data, p.buffer.bytes(), deadline);
        }
      }
    } catch (...) {
      // Unpost what no receiver took: the buffers die with this frame.
      size_t i = 0;
      for (const P2POp& p : ops) {
        if (p.dir != P2POp::Dir::kSend || i >= posted) continue;
        try {
          group_->wait_send(p.peer, p.tag, &sends[i], Clock::now());
        } catch (...) {
        }
        ++i;
      }
      throw;
    }
    size_t i = 0;
    for (const P2POp& p : ops) {
      if (p.dir == P2POp::Dir::kSend) group_->wait_send(p.peer, p.tag, &sends[i++], deadline);
    }
  }

  std::shared_ptr<Group> group_;
  const int rank_;
  std::vector<char> scratch_;  // Reused across ops: no allocation per op once warm.
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_inproc_world(int world_size,
                                                             InprocOptions options) {
  if (world_size < 1) {
    throw Error(ErrorCode::kInvalidArgument, {}, fmt::format("world size {} < 1", world_size));
  }
  auto group = std::make_shared<Group>(world_size);
  std::vector<int> ranks(world_size);
  for (int r = 0; r < world_size; ++r) ranks[r] = r;
  std::vector<std::shared_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) {
    trace::CommInfo info;
    info.store_key = options.name;
    info.name = options.name;
    info.description = "default_pg";
    info.global_ranks = ranks;
    info.rank = r;
    info.global_rank = r;
    info.timeout_ms = options.timeout.count();
    comms.push_back(std::make_shared<Communicator>(
        std::move(info), std::make_unique<InprocBackend>(group, r), nullptr));
  }
  return comms;
}

void run_inproc(int world_size, const std::function<void(Communicator& world)>& fn,
                InprocOptions options) {
  auto world = make_inproc_world(world_size, options);
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      set_log_thread_rank(r);
      set_thread_default_world(world[r]);
      try {
        fn(*world[r]);
      } catch (...) {
        errors[r] = std::current_exception();
        // Fail the peers fast rather than let them wait out their timeouts.
        world[r]->abort();
      }
      set_thread_default_world(nullptr);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace meshrt
