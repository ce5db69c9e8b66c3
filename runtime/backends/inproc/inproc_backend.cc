#include "runtime/backends/inproc/inproc_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "runtime/backend_factory.h"
#include "runtime/collectives/average.h"
#include "runtime/collectives/futex.h"
#include "runtime/error.h"
#include "runtime/init.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"
#include "runtime/watchdog.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

using Clock = std::chrono::steady_clock;

// How long a rank spins at a barrier, then yields its core, before it sleeps.
constexpr std::chrono::nanoseconds kSpin = std::chrono::microseconds(50);
constexpr std::chrono::nanoseconds kYield = std::chrono::microseconds(50);
// The longest a rank sleeps before it checks its deadline.
constexpr std::chrono::milliseconds kSlice{20};

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
  // `global_ranks[i]` is the global rank of group rank i (for messages).
  explicit Group(std::vector<int> global_ranks)
      : size_(static_cast<int>(global_ranks.size())),
        global_ranks_(std::move(global_ranks)),
        slots_(size_),
        arrivals_(static_cast<size_t>(size_)),
        backoff_(static_cast<size_t>(size_)),
        spin_(size_ <= static_cast<int>(std::thread::hardware_concurrency())) {}

  int size() const { return size_; }

  // Publishes this rank's op for the current collective.
  void post(int rank, const Op* op) { slots_[rank] = op; }
  const Op& slot(int rank) const { return *slots_[rank]; }

  // Blocks until all ranks arrived or the deadline passed. A rank that times out breaks the group,
  // so the others fail at once instead of each waiting out its own timeout. Lock-free: the last
  // to arrive advances the generation; the others spin on it while every thread can have a core,
  // then sleep on it (a futex, woken only when someone sleeps), as std::barrier does.
  void arrive_and_wait(int rank, Clock::time_point deadline) {
    throw_if_broken();
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    arrivals_[rank].store(gen + 1, std::memory_order_relaxed);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size_)) {
      arrived_.store(0, std::memory_order_relaxed);
      // seq_cst store, then load of `sleepers_`; a sleeper does the opposite: one of the two sees
      // the other's write, so no sleeper is missed.
      generation_.store(gen + 1);
      if (sleepers_.load() != 0) futex_wake_all(generation_);
      return;
    }
    auto passed = [&] { return generation_.load(std::memory_order_acquire) != gen; };
    // Spin while every rank can have a core and spins have been catching the others (SpinBackoff);
    // then yield the core for a while to a rank that still has to arrive (4 threads on 2 cores:
    // 38-60 us per 8 B all_reduce when sleeping at once, 4x a std::barrier when yielding); then
    // sleep.
    if (spin_ && backoff_[rank].may_spin()) {
      const auto spin_end = Clock::now() + kSpin;
      bool hit = false;
      for (uint32_t i = 1; !hit; ++i) {
        cpu_relax();
        hit = passed();
        if (i % 64 == 0 && Clock::now() >= spin_end) break;
      }
      backoff_[rank].record(hit);
      if (hit) return;
    }
    for (const auto yield_end = Clock::now() + kYield; !passed() && Clock::now() < yield_end;) {
      std::this_thread::yield();
    }
    while (!passed() && !broken_flag_.load()) {
      const auto now = Clock::now();
      if (now >= deadline) {
        std::vector<int> missing;
        for (int r = 0; r < size_; ++r) {
          if (arrivals_[r].load(std::memory_order_relaxed) != gen + 1) {
            missing.push_back(global_ranks_[r]);
          }
        }
        const std::string who = fmt::format("[{}]", fmt::join(missing, ", "));
        break_group(
            fmt::format("rank {} timed out waiting for ranks {}", global_ranks_[rank], who));
        throw Error(ErrorCode::kTimeout, {},
                    fmt::format("timed out waiting for ranks {} to join", who));
      }
      sleepers_.fetch_add(1);
      if (generation_.load() == gen && !broken_flag_.load()) {
        futex_wait(generation_, gen, std::min<Clock::duration>(kSlice, deadline - now));
      }
      sleepers_.fetch_sub(1);
    }
    if (!passed()) throw_if_broken();
  }

  // Fails this group and every group split from it: their members would otherwise wait out
  // their timeouts for a rank that has given up. `failed_rank` (global), when given, is the rank
  // that gave up, which failed_ranks() then names.
  void break_group(const std::string& reason, int failed_rank = -1) {
    std::vector<std::shared_ptr<Group>> children;
    {
      std::lock_guard lock(mu_);
      if (failed_rank >= 0) failed_.insert(failed_rank);
      if (broken_.empty()) broken_ = reason;
      broken_flag_.store(true);  // After broken_: the flag promises the reason is there.
      futex_wake_all(generation_);
      cv_.notify_all();
      for (auto& weak : descendants_) {
        if (auto g = weak.lock()) children.push_back(std::move(g));
      }
    }
    for (auto& c : children) c->break_group(reason);
  }

  // Point-to-point: a send parks in its channel until a receive takes it.
  void post_send(int src, int dst, int tag, PendingSend* send) {
    std::lock_guard lock(mu_);
    check_broken_locked();
    channels_[{src, dst, tag}].push_back(send);
    cv_.notify_all();
  }

  void wait_send(int dst, int tag, PendingSend* send, Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return send->done || !broken_.empty(); })) {
      auto& q = channels_[{send->src, dst, tag}];
      std::erase(q, send);
      throw Error(ErrorCode::kTimeout, {},
                  fmt::format("send to rank {} (tag {}) was not received in time",
                              global_ranks_[dst], tag));
    }
    if (!send->done) {
      std::erase(channels_[{send->src, dst, tag}], send);
      check_broken_locked();
    }
    if (!send->error.empty()) throw Error(ErrorCode::kInvalidArgument, {}, send->error);
  }

  void receive(int src, int dst, int tag, void* data, size_t bytes, Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    auto& q = channels_[{src, dst, tag}];
    if (!cv_.wait_until(lock, deadline, [&] { return !q.empty() || !broken_.empty(); })) {
      throw Error(
          ErrorCode::kTimeout, {},
          fmt::format("no send from rank {} (tag {}) arrived in time", global_ranks_[src], tag));
    }
    if (q.empty()) check_broken_locked();
    PendingSend* send = q.front();
    q.pop_front();
    if (send->bytes != bytes) {
      send->error = fmt::format("send of {} bytes to rank {} matched a recv of {} bytes",
                                send->bytes, global_ranks_[dst], bytes);
      send->done = true;
      cv_.notify_all();
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("recv of {} bytes matched a send of {} bytes from rank {}", bytes,
                              send->bytes, global_ranks_[src]));
    }
    // Copy under the lock: the sender's buffer stays valid until it sees done.
    std::memcpy(data, send->data, bytes);
    send->done = true;
    cv_.notify_all();
  }

  // The child group for `key`, created by the first member to ask; forgotten after all took it.
  // A shrink's group (`descendant` false) outlives this one: breaking this one leaves it alone.
  std::shared_ptr<Group> child(const std::string& key, const std::vector<int>& global_ranks,
                               bool descendant = true) {
    std::lock_guard lock(mu_);
    auto& entry = children_[key];
    if (!entry.group) {
      entry.group = std::make_shared<Group>(global_ranks);
      std::erase_if(descendants_, [](const auto& w) { return w.expired(); });
      if (descendant) descendants_.push_back(entry.group);
    }
    auto group = entry.group;
    if (++entry.taken == static_cast<int>(global_ranks.size())) children_.erase(key);
    return group;
  }

  // Global ranks that broke this group by giving up (abort), ascending.
  std::vector<int> failed() {
    std::lock_guard lock(mu_);
    return {failed_.begin(), failed_.end()};
  }

 private:
  // Callers hold mu_.
  void check_broken_locked() const {
    if (!broken_.empty()) throw Error(ErrorCode::kPeerFailure, {}, "group failed: " + broken_);
  }
  void throw_if_broken() {
    if (!broken_flag_.load()) return;
    std::lock_guard lock(mu_);
    check_broken_locked();
  }

  struct ChildEntry {
    std::shared_ptr<Group> group;
    int taken = 0;
  };

  const int size_;
  const std::vector<int> global_ranks_;
  std::vector<const Op*> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint32_t> arrived_{0};             // Ranks arrived in this generation.
  std::atomic<uint32_t> generation_{0};          // Futex word: barriers passed.
  std::atomic<uint32_t> sleepers_{0};            // Ranks asleep (or going to sleep) on generation_.
  std::vector<std::atomic<uint32_t>> arrivals_;  // Per rank: generation + 1 it last arrived in.
  std::vector<SpinBackoff> backoff_;             // Per rank: only that rank's thread touches it.
  const bool spin_;                              // Every rank can have a core.
  std::atomic<bool> broken_flag_{false};
  std::string broken_;  // Why the group failed; guarded by mu_, set before broken_flag_.
  std::map<std::tuple<int, int, int>, std::deque<PendingSend*>> channels_;
  std::map<std::string, ChildEntry> children_;
  std::vector<std::weak_ptr<Group>> descendants_;
  std::set<int> failed_;  // Guarded by mu_.
};

// [begin, end) of block `i` when `n` elements are cut into `parts` nearly equal blocks.
std::pair<size_t, size_t> block(size_t n, int parts, int i) {
  return {n * i / parts, n * (i + 1) / parts};
}

char* at(const BufferView& b, size_t element) {
  return static_cast<char*>(b.data) + element * b.element_bytes();
}

// memcpy that accepts empty ranges with null pointers (blocks are empty when count < ranks).
void copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

class InprocBackend : public Backend {
 public:
  InprocBackend(std::shared_ptr<Group> group, int rank, std::vector<int> global_ranks)
      : group_(std::move(group)), rank_(rank), global_ranks_(std::move(global_ranks)) {}

  std::string_view name() const override { return "inproc"; }
  std::string version() const override { return "meshrt-inproc-1"; }

  void run(const Op& op) override {
    const auto deadline = deadline_after(op, op.timeout);
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
    // written by exactly one rank, so no locks are needed. check_match sees the same slots on
    // every rank, so all ranks fail together, and every rank still reaches the second barrier:
    // a peer must never read an op or buffer this rank has already given back.
    std::optional<Error> failure;
    try {
      check_match();
      collective(op);
    } catch (const Error& e) {
      failure = e;
    }
    group_->arrive_and_wait(rank_, deadline);
    if (failure) throw *failure;
  }

  std::unique_ptr<Backend> split(const SplitSpec& spec) override {
    std::vector<int> members;
    for (int r : spec.parent_ranks) members.push_back(global_ranks_[r]);
    auto group = group_->child(spec.store_key, members);
    return std::make_unique<InprocBackend>(std::move(group), spec.rank, std::move(members));
  }

  void abort() noexcept override {
    group_->break_group(fmt::format("rank {} aborted the communicator", global(rank_)),
                        global(rank_));
  }

  // Leaves the group without counting as failed (its survivors shrink too), then meets them in
  // a group of their own.
  void check_can_shrink() const override {}
  std::unique_ptr<Backend> shrink(const SplitSpec& spec) override {
    group_->break_group(fmt::format("rank {} shrank the communicator", global(rank_)));
    std::vector<int> members;
    for (int r : spec.parent_ranks) members.push_back(global_ranks_[r]);
    auto group = group_->child(spec.store_key, members, /*descendant=*/false);
    return std::make_unique<InprocBackend>(std::move(group), spec.rank, std::move(members));
  }

  std::vector<int> failed_peers() const override {
    std::vector<int> failed;
    for (int g : group_->failed()) {
      const auto it = std::find(global_ranks_.begin(), global_ranks_.end(), g);
      if (it != global_ranks_.end()) failed.push_back(static_cast<int>(it - global_ranks_.begin()));
    }
    return failed;
  }

 private:
  // What must agree across ranks for an op to be safe: kind, root, dtype, reduction (built-in or
  // a Reducer's name), the element count that sizes every rank's buffers and the record size.
  static std::tuple<OpKind, int, DType, std::string_view, size_t, size_t, uint64_t> signature(
      const Op& op) {
    const bool reduces = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce ||
                         op.kind == OpKind::kReduceScatter;
    // The buffer every rank sizes alike: the block, or the whole of a v-collective.
    const bool per_output = op.kind == OpKind::kReduceScatter || op.kind == OpKind::kScatter ||
                            op.kind == OpKind::kAllGatherV;
    size_t count = per_output ? op.output.count : op.input.count;
    if (op.kind == OpKind::kBarrier || !op.input_splits.empty()) count = 0;
    const DType dtype =
        per_output ? op.output.dtype : (op.kind == OpKind::kBarrier ? DType::kF32 : op.input.dtype);
    const std::string_view reduction =
        !reduces ? "" : (op.reducer ? op.reducer->name() : reduce_op_name(op.reduce_op));
    const size_t record_bytes = per_output ? op.output.record_bytes : op.input.record_bytes;
    return {op.kind, op.root, dtype, reduction, count, record_bytes, blocks_hash(op)};
  }

  // Ranks that called different collectives all fail with the same message, before any copy
  // that could run past a buffer.
  void check_match() const {
    const auto first = signature(group_->slot(0));
    for (int r = 1; r < group_->size(); ++r) {
      const auto other = signature(group_->slot(r));
      if (other == first) continue;
      auto describe = [](const auto& s) {
        const std::string type = std::get<5>(s) != 0
                                     ? fmt::format("{}-byte records", std::get<5>(s))
                                     : std::string(dtype_name(std::get<2>(s)));
        return fmt::format(
            "{}(root {}, {}, {}, {} elements{})", op_kind_name(std::get<0>(s)), std::get<1>(s),
            type, std::get<3>(s), std::get<4>(s),
            std::get<6>(s) != 0 ? fmt::format(", blocks #{:x}", std::get<6>(s)) : std::string());
      };
      throw Error(ErrorCode::kInvalidArgument, {},
                  fmt::format("collective mismatch: rank {} called {} but rank {} called {}",
                              global(0), describe(first), global(r), describe(other)));
    }
    if (std::get<0>(first) == OpKind::kAllToAll) check_all_to_all_splits();
  }

  // Elements rank `from` sends to rank `to` in the posted all_to_all.
  size_t sent(int from, int to) const {
    const Op& op = group_->slot(from);
    return op.input_splits.empty() ? op.input.count / group_->size() : op.input_splits[to];
  }
  size_t expected(int to, int from) const {
    const Op& op = group_->slot(to);
    return op.output_splits.empty() ? op.output.count / group_->size() : op.output_splits[from];
  }

  // The whole split matrix, checked on every rank, so that all fail or none.
  void check_all_to_all_splits() const {
    for (int from = 0; from < group_->size(); ++from) {
      for (int to = 0; to < group_->size(); ++to) {
        if (sent(from, to) != expected(to, from)) {
          throw Error(ErrorCode::kInvalidArgument, {},
                      fmt::format("all_to_all split mismatch: rank {} sends {} elements to rank "
                                  "{}, which expects {}",
                                  global(from), sent(from, to), global(to), expected(to, from)));
        }
      }
    }
  }

  int global(int group_rank) const { return global_ranks_[group_rank]; }

  // Reduces block [b, e) of every rank's input (at `offset` elements in each) into `scratch_`.
  const char* reduce_block(const Op& op, size_t offset, size_t len) {
    const size_t es = op.input.element_bytes();
    scratch_.resize(len * es);
    if (len == 0) return scratch_.data();
    copy(scratch_.data(), at(group_->slot(0).input, offset), len * es);
    const Reduction reduce = reduction_of(op);
    for (int q = 1; q < group_->size(); ++q) {
      reduce(scratch_.data(), scratch_.data(), at(group_->slot(q).input, offset), len);
    }
    average_elements(op, scratch_.data(), len, group_->size());
    return scratch_.data();
  }

  void collective(const Op& op) {
    const int n = group_->size();
    const size_t es = (op.kind == OpKind::kScatter ? op.output : op.input).element_bytes();
    switch (op.kind) {
      case OpKind::kBarrier:
        return;
      case OpKind::kAllReduce:
      case OpKind::kReduce: {
        const auto [b, e] = block(op.input.count, n, rank_);
        const char* result = reduce_block(op, b, e - b);
        for (int q = 0; q < n; ++q) {
          if (op.kind == OpKind::kReduce && q != op.root) continue;
          copy(at(group_->slot(q).output, b), result, (e - b) * es);
        }
        return;
      }
      case OpKind::kReduceScatter: {
        const char* result = reduce_block(op, rank_ * op.output.count, op.output.count);
        copy(op.output.data, result, op.output.count * es);
        return;
      }
      case OpKind::kReduceScatterV: {
        const size_t me = static_cast<size_t>(rank_);
        const char* result = reduce_block(op, op.block_offsets[me], op.block_counts[me]);
        copy(op.output.data, result, op.output.count * es);
        return;
      }
      case OpKind::kAllGatherV:
        for (int q = 0; q < n; ++q) {
          char* dst = at(group_->slot(q).output, op.block_offsets[static_cast<size_t>(rank_)]);
          if (dst != op.input.data) copy(dst, op.input.data, op.input.bytes());
        }
        return;
      case OpKind::kBroadcast:
        if (rank_ != op.root) {
          copy(op.output.data, group_->slot(op.root).input.data, op.output.bytes());
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
            copy(at(op.output, q * op.input.count), in.data, in.bytes());
          }
        }
        return;
      case OpKind::kScatter:
        copy(op.output.data, at(group_->slot(op.root).input, rank_ * op.output.count),
             op.output.bytes());
        return;
      case OpKind::kAllToAll: {
        size_t out_offset = 0;
        for (int q = 0; q < n; ++q) {
          size_t in_offset = 0;
          for (int j = 0; j < rank_; ++j) in_offset += sent(q, j);
          const size_t len = sent(q, rank_);
          copy(at(op.output, out_offset), at(group_->slot(q).input, in_offset), len * es);
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
  const std::vector<int> global_ranks_;  // For messages: users think in global ranks.
  std::vector<char> scratch_;            // Reused across ops: no allocation per op once warm.
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_inproc_world(int world_size,
                                                             InprocOptions options) {
  if (world_size < 1) {
    throw Error(ErrorCode::kInvalidArgument, {}, fmt::format("world size {} < 1", world_size));
  }
  // Exiting on a timeout would end every simulated rank with the host program: fail the op.
  Watchdog::instance().set_default_policy(TimeoutPolicy::kThrow);
  std::vector<int> ranks(world_size);
  for (int r = 0; r < world_size; ++r) ranks[r] = r;
  auto group = std::make_shared<Group>(ranks);
  std::shared_ptr<TcpStoreServer> server;
  if (options.job_store) server = std::make_shared<TcpStoreServer>();
  std::vector<std::shared_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) {
    std::shared_ptr<const JobContext> job;
    if (server) {
      // A connection per rank: a rank blocked in a get must not hold up the others.
      TcpStoreOptions o;
      o.port = server->port();
      job = std::make_shared<JobContext>(
          JobContext{std::make_shared<PrefixStore>(options.name, std::make_shared<TcpStore>(o)),
                     "127.0.0.1", "", r});
    }
    trace::CommInfo info;
    info.store_key = options.name;
    info.name = options.name;
    info.description = "default_pg";
    info.global_ranks = ranks;
    info.rank = r;
    info.global_rank = r;
    info.timeout_ms = options.timeout.count();
    comms.push_back(std::make_shared<Communicator>(
        std::move(info), std::make_unique<InprocBackend>(group, r, ranks), server, std::move(job)));
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
