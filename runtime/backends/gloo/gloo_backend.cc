#include "runtime/backends/gloo/gloo_backend.h"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <bit>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>

#include "runtime/backends/gloo/gloo_signature.h"
#include "runtime/backends/gloo/gloo_store.h"
#include "runtime/backends/gloo/shm_group.h"
#include "runtime/error.h"
#include "runtime/store/prefix_store.h"
#include "trace/env.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

// Slot prefixes of our own ops; Gloo's algorithms use 0x01..0x08.
constexpr uint8_t kP2PSlotPrefix = 0x20;
constexpr uint8_t kP2PHeaderSlotPrefix = 0x22;
constexpr uint8_t kReduceScatterSlotPrefix = 0x21;
constexpr uint8_t kOneShotSlotPrefix = 0x23;

// Groups up to this size fold all_reduces and reduces of any size through shared memory, chunk
// by chunk (shm_fits). At 16 ranks on 2 cores an 8 MiB all_reduce took 25-33 ms so, 83-86 ms over
// TCP; with enough cores a ring over TCP would win from about 2 x (memcpy / loopback bandwidth),
// some 13-16 ranks. Larger groups fold only ops of one chunk.
constexpr int kShmFoldMaxRanks = 16;

// Whether an all_reduce runs by recursive doubling (log2(n) exchanges) rather than Gloo's ring
// (2(n-1) steps). Power-of-two groups only: elsewhere the surplus ranks need extra steps. Above 2
// ranks, only once the ring's segments hold data (count >= 2n): below that Gloo's ring skips its
// empty segments and the data moves as one token, one rank awake at a time, while recursive
// doubling wakes every rank at once, which costs a scheduler tick per op when ranks outnumber
// cores (4 ranks on 2 cores, 8 B: 3.0 ms against the ring's 0.3 ms; from 4 KiB to 256 KiB it
// gave 1.1-3.2x the ring's busbw over two runs: docs/performance.md).
bool recursive_doubling_fits(size_t n, size_t count, size_t bytes, size_t max_bytes) {
  if (n < 2 || !std::has_single_bit(n) || bytes > max_bytes) return false;
  return n == 2 || count >= 2 * n;
}

// The most a collective keeps of its timeout for comparing signatures after Gloo failed
// (gloo_diagnose): peers that passed other sizes time out or see the pairs close at about the same
// moment. Kept back from Gloo's own timeout, so that the op still ends by its deadline.
constexpr std::chrono::milliseconds kDiagnoseWait{1000};

// The part of a collective's timeout kept for gloo_diagnose.
std::chrono::milliseconds diagnose_reserve(const Op& op) {
  return std::min(op.timeout / 4, kDiagnoseWait);
}
// What Gloo gets of `op`'s timeout: all of it for p2p, which needs no diagnosis.
std::chrono::milliseconds gloo_timeout(const Op& op) {
  const bool p2p =
      op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kBatchP2P;
  return p2p ? op.timeout : op.timeout - diagnose_reserve(op);
}

// Calls f(T{}) with the C++ element type of `dtype`: Gloo's setters are templates on it.
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(float{});
    case DType::kF64:
      return f(double{});
    case DType::kF16:
      return f(Half{});
    case DType::kBF16:
      return f(BFloat16{});
    case DType::kI8:
      return f(int8_t{});
    case DType::kU8:
      return f(uint8_t{});
    case DType::kI32:
      return f(int32_t{});
    case DType::kI64:
      return f(int64_t{});
    case DType::kF8E4M3:
      return f(Fp8E4M3{});
    case DType::kF8E5M2:
      return f(Fp8E5M2{});
  }
}

template <typename T>
T* typed(const BufferView& b) {
  return static_cast<T*>(b.data);
}

char* byte_at(const BufferView& b, size_t element) {
  return static_cast<char*>(b.data) + element * dtype_size_bytes(b.dtype);
}

// Gloo reports failures as exceptions whose text says what happened; keep the text, pick a code.
Error translate(const std::exception& e) {
  const std::string what = e.what();
  ErrorCode code = ErrorCode::kBackend;
  if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos) {
    code = ErrorCode::kTimeout;
  } else if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) {
    code = ErrorCode::kPeerFailure;
  }
  return Error(code, {}, "gloo: " + what);
}

// Gloo writes to sockets without MSG_NOSIGNAL: a peer that died would kill this process with
// SIGPIPE instead of failing the op. Ignore it unless the program installed its own handler.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

std::shared_ptr<gloo::transport::Device> make_device(const GlooConfig& config) {
  ignore_sigpipe();
  gloo::transport::tcp::attr attr;
  if (!config.iface.empty()) {
    attr.iface = config.iface;
  } else {
    attr.hostname = config.hostname.empty() ? "127.0.0.1" : config.hostname;
  }
  return gloo::transport::tcp::CreateDevice(attr);
}

std::shared_ptr<gloo::Context> connect(const std::shared_ptr<Store>& store, const std::string& key,
                                       int rank, int size,
                                       std::shared_ptr<gloo::transport::Device>& device,
                                       std::chrono::milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  GlooStore gloo_store(std::make_shared<PrefixStore>(key, store), timeout);
  context->connectFullMesh(gloo_store, device);
  return context;
}

// The shared-memory segment of a new communicator, or null when its ranks cannot share one (they
// then all use TCP, and MESHRT_LOG_LEVEL=info says why): collective over `context`.
std::unique_ptr<ShmGroup> make_shm_group(const std::shared_ptr<gloo::Context>& context,
                                         const std::string& store_key, size_t slot_bytes,
                                         std::chrono::milliseconds timeout) {
  if (context->size < 2) return nullptr;
  std::string why_not;
  auto group = ShmGroup::create(context, slot_bytes, timeout, why_not);
  if (!group) log().info("gloo '{}': TCP instead of shared memory: {}", store_key, why_not);
  return group;
}

class GlooBackend : public Backend {
 public:
  GlooBackend(std::shared_ptr<Store> store, const std::string& store_key,
              std::shared_ptr<gloo::transport::Device> device,
              std::shared_ptr<gloo::Context> context, size_t one_shot_max_bytes,
              size_t shm_slot_bytes, std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        comm_store_(std::make_shared<PrefixStore>(store_key, store_)),
        device_(std::move(device)),
        context_(std::move(context)),
        one_shot_max_bytes_(one_shot_max_bytes),
        shm_slot_bytes_(shm_slot_bytes),
        shm_(make_shm_group(context_, store_key, shm_slot_bytes, timeout)) {}

  std::string_view name() const override { return "gloo"; }
  void set_comm_info(std::shared_ptr<const trace::CommInfo> info) override {
    if (!info) return;
    global_ranks_ = info->global_ranks;
    if (shm_) shm_->set_global_ranks(info->global_ranks);
  }
  std::string version() const override {
    return fmt::format("gloo {}.{}.{}", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
  }

  void run(const Op& op) override {
    try {
      dispatch(op);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // An escaping Gloo exception would abort the process: always translate. A collective whose
      // ranks passed different sizes fails here too (its messages never match): say so.
      Error error = translate(e);
      if (gloo_timeout(op) < op.timeout && error.code() != ErrorCode::kInvalidArgument) {
        error = gloo_diagnose(op, context_->rank, context_->size, *comm_store_,
                              diagnose_reserve(op), std::move(error), global_ranks_);
      }
      throw error;
    }
  }

  std::unique_ptr<Backend> split(const SplitSpec& spec) override {
    try {
      auto context = connect(store_, spec.store_key, spec.rank,
                             static_cast<int>(spec.parent_ranks.size()), device_, spec.timeout);
      // One side of a pair can finish connecting before the other has: a member that dropped the
      // new communicator at once would then close a connection its peer is still setting up.
      // A barrier on the new context returns only once every member is connected.
      if (context->size > 1) {
        gloo::BarrierOptions o(context);
        o.setTimeout(spec.timeout);
        gloo::barrier(o);
      }
      return std::make_unique<GlooBackend>(store_, spec.store_key, device_, std::move(context),
                                           one_shot_max_bytes_, shm_slot_bytes_, spec.timeout);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw translate(e);
    }
  }

  void abort() noexcept override {
    // Gloo cannot interrupt an algorithm in progress: it ends at its timeout. A shared-memory
    // exchange can. The communicator fails every op queued after the abort.
    if (shm_) shm_->abort();
  }

 private:
  uint32_t tag(const Op& op) const { return gloo_tag(op); }

  void dispatch(const Op& op) {
    // Gloo's all_gather divides by the element count: nothing to move, nothing to do (validation
    // guarantees the output is empty too).
    if (op.kind == OpKind::kAllGather && op.input.count == 0) return;
    const auto timeout = gloo_timeout(op);
    const DType dtype = op.kind == OpKind::kScatter ? op.output.dtype : op.input.dtype;
    const size_t n = static_cast<size_t>(context_->size);
    const int rank = context_->rank;
    if (shm_ && shm_fits(op)) return run_shm(op);
    auto reducer = [dtype, r = op.reduce_op](void* c, const void* a, const void* b, size_t k) {
      reduce_elements(dtype, r, c, a, b, k);
    };
    switch (op.kind) {
      case OpKind::kAllReduce:
        if (recursive_doubling_fits(n, op.output.count, op.output.bytes(), one_shot_max_bytes_)) {
          all_reduce_recursive_doubling(op);
          return;
        }
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          gloo::AllreduceOptions o(context_);
          o.setOutput(typed<T>(op.output), op.output.count);
          o.setReduceFunction(reducer);
          o.setTag(tag(op));
          o.setTimeout(timeout);
          gloo::allreduce(o);
        });
        if (op.reduce_op == ReduceOp::kAvg) {
          divide_elements(dtype, op.output.data, op.output.count, n);
        }
        return;
      case OpKind::kReduce:
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          gloo::ReduceOptions o(context_);
          o.setInput(typed<T>(op.input), op.input.count);
          // Gloo reduces through the output on every rank; non-roots keep their buffer intact
          // (NCCL's semantics) by lending it scratch memory instead.
          T* out = typed<T>(op.output);
          if (rank != op.root) {
            scratch_.resize(op.output.bytes());
            out = reinterpret_cast<T*>(scratch_.data());
          }
          o.setOutput(out, op.output.count);
          o.setRoot(op.root);
          o.setReduceFunction(reducer);
          o.setTag(tag(op));
          o.setTimeout(timeout);
          gloo::reduce(o);
        });
        if (op.reduce_op == ReduceOp::kAvg && rank == op.root) {
          divide_elements(dtype, op.output.data, op.output.count, n);
        }
        return;
      case OpKind::kBroadcast:
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          gloo::BroadcastOptions o(context_);
          o.setOutput(typed<T>(op.output), op.output.count);
          o.setRoot(op.root);
          o.setTag(tag(op));
          o.setTimeout(timeout);
          gloo::broadcast(o);
        });
        return;
      case OpKind::kAllGather:
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          gloo::AllgatherOptions o(context_);
          // Gloo copies the input into the output itself; an input that already is this rank's
          // block of the output (in-place) is passed as output only.
          if (op.input.data != byte_at(op.output, rank * op.input.count)) {
            o.setInput(typed<T>(op.input), op.input.count);
          }
          o.setOutput(typed<T>(op.output), op.output.count);
          o.setTag(tag(op));
          o.setTimeout(timeout);
          gloo::allgather(o);
        });
        return;
      case OpKind::kReduceScatter:
        return reduce_scatter_ring(op);
      case OpKind::kAllToAll:
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          if (op.input_splits.empty()) {
            gloo::AlltoallOptions o(context_);
            o.setInput(typed<T>(op.input), op.input.count);
            o.setOutput(typed<T>(op.output), op.output.count);
            o.setTag(tag(op));
            o.setTimeout(timeout);
            gloo::alltoall(o);
          } else {
            all_to_all_uneven<T>(op);
          }
        });
        return;
      case OpKind::kGather:
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          gloo::GatherOptions o(context_);
          o.setInput(typed<T>(op.input), op.input.count);
          if (rank == op.root) o.setOutput(typed<T>(op.output), op.output.count);
          o.setRoot(op.root);
          o.setTag(tag(op));
          o.setTimeout(timeout);
          gloo::gather(o);
        });
        return;
      case OpKind::kScatter:
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          gloo::ScatterOptions o(context_);
          if (rank == op.root) {
            std::vector<T*> blocks(n);
            for (size_t j = 0; j < n; ++j) blocks[j] = typed<T>(op.input) + j * op.output.count;
            o.setInputs(blocks, op.output.count);
          }
          o.setOutput(typed<T>(op.output), op.output.count);
          o.setRoot(op.root);
          o.setTag(tag(op));
          o.setTimeout(timeout);
          gloo::scatter(o);
        });
        return;
      case OpKind::kBarrier: {
        gloo::BarrierOptions o(context_);
        o.setTag(tag(op));
        o.setTimeout(timeout);
        gloo::barrier(o);
        return;
      }
      case OpKind::kSend:
        return p2p({P2POp{P2POp::Dir::kSend, op.input, op.root, op.tag}}, timeout);
      case OpKind::kRecv:
        return p2p({P2POp{P2POp::Dir::kRecv, op.input, op.root, op.tag}}, timeout);
      case OpKind::kBatchP2P:
        return p2p(op.p2p, timeout);
      case OpKind::kCoalesced:
        return;  // Never given to a backend: the communicator completes it.
    }
  }

  // All sends and receives are posted before any is waited on, so a batch never deadlocks on its
  // own order. Messages between a pair with the same tag match in posting order. Each payload
  // follows an 8-byte size header: Gloo aborts the process when a message is larger than the
  // posted receive and silently leaves the rest unfilled when it is smaller, so the receiver
  // checks the size first, drains a mismatched payload into scratch and fails the op (as MPI's
  // truncation error does: the sender's side completes).
  void p2p(const std::vector<P2POp>& ops, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<uint64_t> sizes(ops.size());
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> headers(ops.size());
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> payloads(ops.size());
    auto slot = [](uint8_t prefix, int tag) {
      return gloo::Slot::build(prefix, static_cast<uint32_t>(tag));
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& p = ops[i];
      headers[i] = context_->createUnboundBuffer(&sizes[i], sizeof(uint64_t));
      if (p.dir == P2POp::Dir::kSend) {
        sizes[i] = p.buffer.bytes();
        headers[i]->send(p.peer, slot(kP2PHeaderSlotPrefix, p.tag));
        payloads[i] = context_->createUnboundBuffer(p.buffer.data, p.buffer.bytes());
        payloads[i]->send(p.peer, slot(kP2PSlotPrefix, p.tag));
      } else {
        headers[i]->recv(p.peer, slot(kP2PHeaderSlotPrefix, p.tag));
      }
    }
    std::vector<std::vector<char>> drains;
    std::string mismatch;
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& p = ops[i];
      if (p.dir != P2POp::Dir::kRecv) continue;
      headers[i]->waitRecv(deadline);
      void* target = p.buffer.data;
      if (sizes[i] != p.buffer.bytes()) {
        mismatch = fmt::format("recv of {} bytes from rank {} (tag {}) matched a send of {} bytes",
                               p.buffer.bytes(), p.peer, p.tag, sizes[i]);
        target = drains.emplace_back(sizes[i]).data();
      }
      payloads[i] = context_->createUnboundBuffer(target, sizes[i]);
      payloads[i]->recv(p.peer, slot(kP2PSlotPrefix, p.tag));
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].dir == P2POp::Dir::kSend) {
        headers[i]->waitSend(deadline);
        payloads[i]->waitSend(deadline);
      } else {
        payloads[i]->waitRecv(deadline);
      }
    }
    if (!mismatch.empty()) throw Error(ErrorCode::kInvalidArgument, {}, mismatch);
  }

  // Uneven all_to_all: the split counts travel first (a small all_to_all), so that a rank whose
  // expectation differs from what a peer sends receives the real amounts into scratch and fails,
  // instead of Gloo aborting the process or leaving the output partly unwritten.
  template <typename T>
  void all_to_all_uneven(const Op& op) {
    const size_t n = static_cast<size_t>(context_->size);
    std::vector<int64_t> sending(op.input_splits.begin(), op.input_splits.end()), incoming(n);
    gloo::AlltoallOptions counts(context_);
    counts.setInput(sending.data(), n);
    counts.setOutput(incoming.data(), n);
    counts.setTag(tag(op));
    counts.setTimeout(gloo_timeout(op));
    gloo::alltoall(counts);
    std::string mismatch;
    for (size_t j = 0; j < n; ++j) {
      if (static_cast<size_t>(incoming[j]) != op.output_splits[j] && mismatch.empty()) {
        mismatch = fmt::format(
            "all_to_all split mismatch: rank {} sends {} elements to rank {}, "
            "which expects {}",
            j, incoming[j], context_->rank, op.output_splits[j]);
      }
    }
    T* out = typed<T>(op.output);
    std::vector<T> drain;
    if (!mismatch.empty()) {
      drain.resize(std::accumulate(incoming.begin(), incoming.end(), size_t{0}) + 1);
      out = drain.data();
    }
    gloo::AlltoallvOptions o(context_);
    o.setInput(typed<T>(op.input), sending);
    o.setOutput(out, incoming);
    o.setTag(tag(op) ^ 0x80000000u);  // The counts used tag(op).
    o.setTimeout(gloo_timeout(op));
    gloo::alltoallv(o);
    if (!mismatch.empty()) throw Error(ErrorCode::kInvalidArgument, {}, mismatch);
  }

  // Ring reduce-scatter: n-1 steps, each sends one partially reduced block to the right neighbour
  // and reduces the block arriving from the left, so every rank moves (n-1)/n of the input once.
  // Debian's Gloo has no unbound-buffer reduce_scatter (its bound-buffer halving-doubling is
  // slower here and gave wrong results in 3 of ~70 bench runs); all_reduce-then-slice moves twice
  // the bytes. Measured in docs/performance.md.
  void reduce_scatter_ring(const Op& op) {
    const int n = context_->size;
    const int rank = context_->rank;
    const DType dtype = op.input.dtype;
    const size_t count = op.output.count;
    const size_t bytes = op.output.bytes();
    if (n == 1) {
      if (op.output.data != op.input.data) std::memmove(op.output.data, op.input.data, bytes);
      return;
    }
    const int right = (rank + 1) % n;
    const int left = (rank + n - 1) % n;
    auto block = [&](int i) {
      return byte_at(op.input, static_cast<size_t>((i % n + n) % n) * count);
    };
    // acc_[0..1]: partial sums, alternated so the block in flight is never overwritten.
    for (auto& a : acc_) a.resize(bytes);
    recv_.resize(bytes);
    auto recv_buf = context_->createUnboundBuffer(recv_.data(), bytes);
    std::unique_ptr<gloo::transport::UnboundBuffer> send_buf;
    // One slot for the whole op: messages between a pair on one slot match in order.
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag(op));
    const auto deadline = std::chrono::steady_clock::now() + gloo_timeout(op);
    const char* outgoing = block(rank - 1);
    for (int step = 0; step < n - 1; ++step) {
      send_buf = context_->createUnboundBuffer(const_cast<char*>(outgoing), bytes);
      send_buf->send(right, slot);
      recv_buf->recv(left, slot);
      recv_buf->waitRecv(deadline);
      const bool last = step == n - 2;
      char* target = last ? static_cast<char*>(op.output.data) : acc_[step % 2].data();
      // The last step writes the output, which may alias this rank's input block: that block is
      // read only here, as the second operand, element by element.
      reduce_elements(dtype, op.reduce_op, target, recv_.data(), block(rank - step - 2), count);
      send_buf->waitSend(deadline);
      outgoing = target;
    }
    if (op.reduce_op == ReduceOp::kAvg) divide_elements(dtype, op.output.data, count, n);
  }

  // Small all_reduce on a power-of-two group by recursive doubling: in round k each rank swaps
  // its partial result with rank ^ 2^k and both reduce the pair, so every rank ends with the same
  // bits. The pair goes in rank order (lower op higher): the ops commute, but not NaN payloads
  // or min/max of a NaN. log2(n) dependent exchanges of the whole buffer, where Gloo's ring takes
  // 2(n-1) of a block each: one instead of two at 2 ranks, two instead of six at 4. Every round's
  // peer is another rank, so one slot serves them all.
  void all_reduce_recursive_doubling(const Op& op) {
    const int rank = context_->rank;
    const int n = context_->size;
    const size_t bytes = op.output.bytes();
    const DType dtype = op.output.dtype;
    pair_.resize(2 * bytes);
    char* mine = pair_.data();
    char* theirs = pair_.data() + bytes;
    auto send_buf = context_->createUnboundBuffer(mine, bytes);
    auto recv_buf = context_->createUnboundBuffer(theirs, bytes);
    const uint64_t slot = gloo::Slot::build(kOneShotSlotPrefix, tag(op));
    const auto deadline = std::chrono::steady_clock::now() + gloo_timeout(op);
    for (int bit = 1; bit < n; bit <<= 1) {
      const int peer = rank ^ bit;
      // An empty op has no buffer: memcpy's pointers must not be null even for 0 bytes (UBSan).
      if (bytes != 0) std::memcpy(mine, op.output.data, bytes);
      recv_buf->recv(peer, slot);
      send_buf->send(peer, slot);
      recv_buf->waitRecv(deadline);
      const bool lower = (rank & bit) == 0;
      reduce_elements(dtype, op.reduce_op, op.output.data, lower ? mine : theirs,
                      lower ? theirs : mine, op.output.count);
      // The next round overwrites `mine`.
      send_buf->waitSend(deadline);
    }
    if (op.reduce_op == ReduceOp::kAvg) divide_elements(dtype, op.output.data, op.output.count, n);
  }

  // How `op` goes through the shared-memory segment (run_shm): in exchanges of `k` elements of
  // each of `parts` blocks of `count` elements that a rank writes, side by side, from `source`.
  struct ShmShape {
    const BufferView* source;  // What a contributing rank writes.
    DType dtype;               // Of the blocks, equal on every rank (not so scatter's input).
    size_t count;              // Elements per block.
    size_t parts;              // Blocks a rank writes per exchange: 1, or n (one per rank).
    bool contributes;          // Whether this rank writes (broadcast, scatter: only the root).
  };

  ShmShape shm_shape(const Op& op) const {
    const size_t n = static_cast<size_t>(context_->size);
    const bool root = context_->rank == op.root;
    switch (op.kind) {
      case OpKind::kAllReduce:
      case OpKind::kReduce:
      case OpKind::kAllGather:
      case OpKind::kGather:
        return {&op.input, op.input.dtype, op.input.count, 1, true};
      case OpKind::kBroadcast:
        return {&op.output, op.output.dtype, op.output.count, 1, root};
      case OpKind::kReduceScatter:
        return {&op.input, op.input.dtype, op.output.count, n, true};
      case OpKind::kScatter:
        return {&op.input, op.output.dtype, op.output.count, n, root};
      case OpKind::kAllToAll:
        return {&op.input, op.input.dtype, op.input.count / n, n, true};
      default:  // kBarrier
        return {&op.output, op.output.dtype, 0, 1, true};
    }
  }

  // Whether `op` goes through the shared-memory segment: every collective but uneven all_to_all,
  // in chunks. all_reduce and reduce read every rank's chunk to fold it (n reads per byte, where a
  // ring over TCP reads 2(n-1)/n), so above kShmFoldMaxRanks ranks only those of one chunk do.
  bool shm_fits(const Op& op) const {
    if (is_p2p(op.kind) || op.kind == OpKind::kCoalesced) return false;
    if (op.kind == OpKind::kAllToAll && !op.input_splits.empty()) return false;
    const bool folds = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce;
    return !folds || context_->size <= kShmFoldMaxRanks || op.input.bytes() <= shm_->slot_bytes();
  }

  // The op as exchanges through the segment, one per chunk (one for an empty op or a barrier):
  // every rank writes its part of the chunk to its slot, waits for all the others', then reads
  // what it needs (consume_shm_chunk). Reductions fold the slots in rank order, so every rank
  // computes the same bits.
  void run_shm(const Op& op) {
    const auto deadline = std::chrono::steady_clock::now() + gloo_timeout(op);
    const ShmShape shape = shm_shape(op);
    const size_t element_bytes = dtype_size_bytes(shape.dtype);
    // Elements per block per exchange: a slot holds at least 8 bytes per rank (ShmGroup), so at
    // least one of each block.
    const size_t chunk = shm_->slot_bytes() / element_bytes / shape.parts;
    if (chunk == 0)
      throw Error(ErrorCode::kInternal, {}, "gloo shared memory: a slot under 8 bytes per rank");
    const ShmStamp stamp{op.collective_seq, tag(op)};
    size_t done = 0;
    do {
      const size_t k = std::min(chunk, shape.count - done);
      const size_t bytes = k * element_bytes;
      if (shape.contributes && bytes != 0) {
        char* slot = shm_->my_slot();
        for (size_t j = 0; j < shape.parts; ++j) {
          std::memcpy(slot + j * bytes, byte_at(*shape.source, j * shape.count + done), bytes);
        }
      }
      try {
        shm_->exchange(stamp, deadline);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kTimeout) throw;
        throw gloo_diagnose(op, context_->rank, context_->size, *comm_store_, diagnose_reserve(op),
                            e, global_ranks_);
      }
      if (bytes != 0) consume_shm_chunk(op, shape.count, done, k, bytes);
      done += k;
    } while (done < shape.count);
    const bool averaged = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduceScatter ||
                          (op.kind == OpKind::kReduce && context_->rank == op.root);
    if (averaged && op.reduce_op == ReduceOp::kAvg) {
      divide_elements(op.output.dtype, op.output.data, op.output.count, context_->size);
    }
  }

  // Elements [first, first + k) (`bytes`) of each block of `count` are in the slots (block j of
  // rank q at offset j x bytes of slot q): place them in the output.
  void consume_shm_chunk(const Op& op, size_t count, size_t first, size_t k, size_t bytes) {
    const int n = context_->size;
    const size_t rank = static_cast<size_t>(context_->rank);
    const bool root = context_->rank == op.root;
    auto fold = [&](size_t offset) {  // Reduces the slots' bytes at `offset` into the output.
      char* out = byte_at(op.output, first);
      const DType dtype = op.output.dtype;
      reduce_elements(dtype, op.reduce_op, out, shm_->slot(0) + offset, shm_->slot(1) + offset, k);
      for (int q = 2; q < n; ++q) {
        reduce_elements(dtype, op.reduce_op, out, out, shm_->slot(q) + offset, k);
      }
    };
    // Block q of the output gets the slot bytes of rank q at `offset`.
    auto gather_at = [&](size_t offset) {
      for (int q = 0; q < n; ++q) {
        std::memcpy(byte_at(op.output, static_cast<size_t>(q) * count + first),
                    shm_->slot(q) + offset, bytes);
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
        if (!root) std::memcpy(byte_at(op.output, first), shm_->slot(op.root), bytes);
        return;
      case OpKind::kScatter:
        std::memcpy(byte_at(op.output, first), shm_->slot(op.root) + rank * bytes, bytes);
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

  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> comm_store_;  // store_ under this communicator's key.
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  const size_t one_shot_max_bytes_;  // GlooConfig::one_shot_max_bytes.
  const size_t shm_slot_bytes_;      // GlooConfig::shm_slot_bytes.
  std::unique_ptr<ShmGroup> shm_;    // Null when the ranks cannot share memory.
  std::vector<int> global_ranks_;    // Group rank -> global rank, for error messages.
  std::vector<char> pair_;           // Recursive doubling's buffers: this rank's, the peer's.
  std::vector<char> acc_[2];         // Reused across ops.
  std::vector<char> recv_;
  std::vector<char> scratch_;
};

}  // namespace

namespace {
size_t bytes_from_env(const char* name, size_t fallback,
                      int64_t max = std::numeric_limits<int64_t>::max()) {
  try {
    return static_cast<size_t>(trace::env::get_int({name}, 0, max).value_or(fallback));
  } catch (const trace::env::EnvError& e) {
    throw Error(ErrorCode::kInvalidArgument, {}, e.what());
  }
}
}  // namespace

size_t gloo_one_shot_max_bytes_from_env() {
  return bytes_from_env("MESHRT_GLOO_ONESHOT_MAX_BYTES", size_t{256} << 10);
}

size_t gloo_shm_slot_bytes_from_env() {
  // At most 64 MiB: the segment holds 2 x ranks slots, reserved in /dev/shm up front.
  return bytes_from_env("MESHRT_GLOO_SHM_SLOT_BYTES", size_t{256} << 10, int64_t{64} << 20);
}

std::unique_ptr<Backend> make_gloo_backend(const GlooConfig& config) {
  try {
    auto device = make_device(config);
    auto context =
        connect(config.store, config.store_key, config.rank, config.size, device, config.timeout);
    return std::make_unique<GlooBackend>(config.store, config.store_key, std::move(device),
                                         std::move(context), config.one_shot_max_bytes,
                                         config.shm_slot_bytes, config.timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    Error t = translate(e);
    throw Error(t.code(), {config.rank, config.store_key, "connect", -1}, t.detail());
  }
}

}  // namespace meshrt
