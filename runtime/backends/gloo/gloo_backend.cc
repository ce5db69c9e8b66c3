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

#include "runtime/backends/gloo/gloo_hierarchy.h"
#include "runtime/backends/gloo/gloo_pair_channel.h"
#include "runtime/backends/gloo/gloo_pair_shutdown.h"
#include "runtime/backends/gloo/gloo_signature.h"
#include "runtime/backends/gloo/gloo_store.h"
#include "runtime/backends/gloo/shm_group.h"
#include "runtime/backends/gloo/shm_mailboxes.h"
#include "runtime/collectives/algorithm_table.h"
#include "runtime/collectives/average.h"
#include "runtime/collectives/hierarchical.h"
#include "runtime/collectives/pair_collectives.h"
#include "runtime/collectives/slot_collectives.h"
#include "runtime/error.h"
#include "runtime/store/prefix_store.h"
#include "runtime/watchdog.h"
#include "trace/env.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

// Slot prefixes of our own p2p; Gloo's algorithms use 0x01..0x08, GlooPairChannel 0x21.
constexpr uint8_t kP2PSlotPrefix = 0x20;
constexpr uint8_t kP2PHeaderSlotPrefix = 0x22;

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
  return is_p2p(op.kind) ? op.timeout : op.timeout - diagnose_reserve(op);
}

// A p2p op's sends and receives, as one batch (send and recv are batches of one).
std::span<const P2POp> p2p_ops(const Op& op, P2POp& single) {
  if (op.kind == OpKind::kBatchP2P) return op.p2p;
  single = P2POp{op.kind == OpKind::kSend ? P2POp::Dir::kSend : P2POp::Dir::kRecv, op.input,
                 op.root, op.tag};
  return {&single, 1};
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
  return static_cast<char*>(b.data) + element * b.element_bytes();
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

// Connects a full mesh of Gloo pairs among `size` ranks under store key `key`, then waits until
// every rank is connected (one side of a pair can finish before the other: a member that dropped
// the context at once would close a connection its peer is still setting up). Every rank has
// then read every address: each removes its own from the store, so that a long job (and each
// repair epoch) leaves no connection keys behind.
std::shared_ptr<gloo::Context> connect(const std::shared_ptr<Store>& store, const std::string& key,
                                       int rank, int size,
                                       std::shared_ptr<gloo::transport::Device>& device,
                                       std::chrono::milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  auto prefixed = std::make_shared<PrefixStore>(key, store);
  GlooStore gloo_store(prefixed, timeout);
  context->connectFullMesh(gloo_store, device);
  if (size > 1) {
    gloo::BarrierOptions o(context);
    o.setTimeout(timeout);
    gloo::barrier(o);
  }
  for (const std::string& written : gloo_store.keys_set()) prefixed->delete_key(written);
  return context;
}

// The shared-memory segment of a new communicator, or null when its ranks cannot share one (they
// then all use TCP, and MESHRT_LOG_LEVEL=info says why): collective over `context`.
std::unique_ptr<ShmGroup> make_shm_group(const std::shared_ptr<gloo::Context>& context,
                                         const std::string& store_key, size_t slot_bytes,
                                         std::chrono::milliseconds timeout) {
  if (context->size < 2) return nullptr;
  std::string why_not;
  auto group = ShmGroup::create(context, slot_bytes, timeout, why_not, /*with_mailboxes=*/true);
  if (!group) log().info("gloo '{}': TCP instead of shared memory: {}", store_key, why_not);
  return group;
}

class GlooBackend : public Backend {
 public:
  GlooBackend(std::shared_ptr<Store> store, const std::string& store_key,
              std::shared_ptr<gloo::transport::Device> device,
              std::shared_ptr<gloo::Context> context, const GlooTuning& tuning,
              AlgorithmOverrides overrides, std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        comm_store_(std::make_shared<PrefixStore>(store_key, store_)),
        device_(std::move(device)),
        context_(std::move(context)),
        tuning_(tuning),
        overrides_(overrides),
        shm_(make_shm_group(context_, store_key, tuning.shm_slot_bytes, timeout)),
        mailboxes_(shm_ ? std::make_unique<ShmMailboxes>(*shm_, tuning.single_copy) : nullptr),
        hierarchy_(shm_ ? nullptr : make_hierarchy(store_key, tuning.shm_slot_bytes, timeout)),
        pairs_(context_),
        shape_{context_->size, shm_ ? shm_->slot_bytes() : 0, tuning.one_shot_max_bytes,
               hierarchy_ != nullptr} {}

  std::string_view name() const override { return "gloo"; }
  void set_comm_info(std::shared_ptr<const trace::CommInfo> info) override {
    if (!info) return;
    global_ranks_ = info->global_ranks;
    if (shm_) shm_->set_global_ranks(info->global_ranks);
    if (hierarchy_) hierarchy_->set_global_ranks(info->global_ranks);
  }
  Algorithm choose_algorithm(const Op& op) const override {
    return select_algorithm(op, shape_, overrides_);
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
      // No diagnosis after an abort or, when the job repairs around dead ranks, for a closed
      // connection: the peer is gone, and the survivors should not wait a second for its
      // signature.
      const bool peer_gone = aborted_.load() || (error.code() == ErrorCode::kPeerFailure &&
                                                 Watchdog::instance().repairs_in_place());
      if (gloo_timeout(op) < op.timeout && error.code() != ErrorCode::kInvalidArgument &&
          !peer_gone) {
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
      return std::make_unique<GlooBackend>(store_, spec.store_key, device_, std::move(context),
                                           tuning_, overrides_, spec.timeout);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw translate(e);
    }
  }

  // The survivors connect afresh under the shrink's store key, as a split's members do; the
  // old pairs are shut down first, so that no op of theirs waits on.
  void check_can_shrink() const override {}
  std::unique_ptr<Backend> shrink(const SplitSpec& spec) override {
    abort();
    return split(spec);
  }

  std::vector<int> failed_peers() const override {
    return shm_ ? shm_->exited_peers() : std::vector<int>{};
  }

  void abort() noexcept override {
    // Gloo cannot interrupt an algorithm in progress, but its pairs fail every wait once their
    // sockets close: shut them down, which fails the peers' waits on this rank too, as leaving
    // the shared-memory segment does there. The communicator fails every op queued after the
    // abort.
    aborted_.store(true);
    if (shm_) {
      shm_->leave();  // The peers' waits on this rank fail at once too.
      shm_->abort();
    }
    if (hierarchy_) {
      hierarchy_->leave();
      hierarchy_->abort();
    }
    shutdown_gloo_pairs(*context_);
  }

 private:
  uint32_t tag(const Op& op) const { return gloo_tag(op); }

  void dispatch(const Op& op) {
    const auto timeout = gloo_timeout(op);
    const auto deadline = deadline_after(op, timeout);
    P2POp single;
    switch (op.algorithm) {
      case Algorithm::kNone:
        return;
      case Algorithm::kSlots:
        return diagnosing_timeouts(op, [&] {
          run_through_slots(op, *shm_, SlotStamp{op.collective_seq, tag(op)}, deadline);
        });
      case Algorithm::kRecursiveDoubling:
        return all_reduce_recursive_doubling(op, pairs_, tag(op), deadline, pair_scratch_);
      case Algorithm::kRing:
        switch (op.kind) {
          case OpKind::kReduceScatter:
            return reduce_scatter_ring(op, pairs_, tag(op), deadline, pair_scratch_);
          case OpKind::kAllGatherV:
            return all_gather_v_ring(op, pairs_, tag(op), deadline);
          case OpKind::kReduceScatterV:
            return reduce_scatter_v_ring(op, pairs_, tag(op), deadline, pair_scratch_);
          default:
            return all_reduce_ring(op, pairs_, tag(op), deadline, pair_scratch_);
        }
      case Algorithm::kHierarchical:
        try {
          return diagnosing_timeouts(op, [&] {
            run_hierarchical(op, hierarchy_->transports(), SlotStamp{op.collective_seq, tag(op)},
                             tag(op), deadline, hierarchy_scratch_);
          });
        } catch (...) {
          hierarchy_->leave();
          throw;
        }
      case Algorithm::kMailbox:
        return mailboxes_->run(p2p_ops(op, single), deadline);
      case Algorithm::kLibrary:
        return run_library(op, timeout);
    }
  }

  // The transports of a group across hosts (ranks that share none: see make_shm_group).
  std::unique_ptr<GlooHierarchy> make_hierarchy(const std::string& store_key, size_t slot_bytes,
                                                std::chrono::milliseconds timeout) {
    if (context_->size < 3) return nullptr;  // Two ranks on two hosts: nothing to share.
    auto connect_group = [&](const std::string& key, int rank, int size) {
      return connect(store_, key, rank, size, device_, timeout);
    };
    return GlooHierarchy::create(context_, store_key, connect_group, slot_bytes,
                                 tuning_.stripe_min_bytes, timeout);
  }

  // The op by Gloo's own algorithms (and meshrt's p2p over Gloo's pairs).
  void run_library(const Op& op, std::chrono::milliseconds timeout) {
    const DType dtype = op.kind == OpKind::kScatter ? op.output.dtype : op.input.dtype;
    const size_t n = static_cast<size_t>(context_->size);
    const int rank = context_->rank;
    auto reducer = [dtype, r = op.reduce_op](void* c, const void* a, const void* b, size_t k) {
      reduce_elements(dtype, r, c, a, b, k);
    };
    switch (op.kind) {
      case OpKind::kAllReduce:
        with_type(dtype, [&](auto t) {
          using T = decltype(t);
          gloo::AllreduceOptions o(context_);
          o.setOutput(typed<T>(op.output), op.output.count);
          o.setReduceFunction(reducer);
          o.setTag(tag(op));
          o.setTimeout(timeout);
          gloo::allreduce(o);
        });
        return finish_average(op, rank, context_->size);
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
        return finish_average(op, rank, context_->size);
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
      case OpKind::kReduceScatter:  // Debian's Gloo has none of unbound buffers.
      case OpKind::kAllGatherV:     // meshrt's slots or ring run these (algorithm_table.cc).
      case OpKind::kReduceScatterV:
        throw Error(ErrorCode::kInternal, {},
                    fmt::format("gloo: no library {}", op_kind_name(op.kind)));
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
      case OpKind::kRecv:
      case OpKind::kBatchP2P: {
        P2POp single;
        return p2p(p2p_ops(op, single), timeout);
      }
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
  void p2p(std::span<const P2POp> ops, std::chrono::milliseconds timeout) {
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

  // Runs f, an algorithm of meshrt's own. A timeout there is a program mismatch as often as a
  // slow peer: diagnosed as Gloo's are.
  template <typename F>
  void diagnosing_timeouts(const Op& op, F&& f) {
    try {
      f();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
      throw gloo_diagnose(op, context_->rank, context_->size, *comm_store_, diagnose_reserve(op), e,
                          global_ranks_);
    }
  }

  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> comm_store_;  // store_ under this communicator's key.
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  const GlooTuning tuning_;             // GlooConfig::tuning, inherited by splits.
  const AlgorithmOverrides overrides_;  // MESHRT_ALGO, read by the world's creation; inherited.
  std::unique_ptr<ShmGroup> shm_;       // Null when the ranks cannot share memory.
  std::unique_ptr<ShmMailboxes> mailboxes_;  // Over shm_'s rings; null with it.
  // Null unless the ranks span hosts and some host holds several.
  std::unique_ptr<GlooHierarchy> hierarchy_;
  GlooPairChannel pairs_;
  const GroupShape shape_;         // What select_algorithm() reads of this group.
  std::vector<int> global_ranks_;  // Group rank -> global rank, for error messages.
  std::atomic<bool> aborted_{false};
  PairScratch pair_scratch_;  // Recursive doubling's and the ring's buffers.
  HierarchicalScratch hierarchy_scratch_;
  std::vector<char> scratch_;  // A reduce's output on non-roots.
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

size_t gloo_stripe_min_bytes_from_env() {
  return bytes_from_env("MESHRT_GLOO_STRIPE_MIN_BYTES", kStripeMinBytes);
}

SingleCopy gloo_single_copy_from_env() {
  try {
    const auto mode =
        trace::env::get_choice({"MESHRT_GLOO_SINGLE_COPY"}, {"auto", "always", "never"});
    if (mode == "always") return SingleCopy::kAlways;
    if (mode == "never") return SingleCopy::kNever;
    return SingleCopy::kAuto;
  } catch (const trace::env::EnvError& e) {
    throw Error(ErrorCode::kInvalidArgument, {}, e.what());
  }
}

size_t gloo_shm_slot_bytes_from_env() {
  // At most 64 MiB: the segment holds 2 x ranks slots, reserved in /dev/shm up front.
  return bytes_from_env("MESHRT_GLOO_SHM_SLOT_BYTES", size_t{256} << 10, int64_t{64} << 20);
}

std::unique_ptr<Backend> make_gloo_backend(const GlooConfig& config) {
  AlgorithmOverrides overrides;
  try {
    overrides = algorithm_overrides_from_env();  // Before connecting: no peer waits for a typo.
  } catch (const Error& e) {
    throw Error(e.code(), {config.rank, config.store_key, "init", -1}, e.detail());
  }
  try {
    auto device = make_device(config);
    auto context =
        connect(config.store, config.store_key, config.rank, config.size, device, config.timeout);
    return std::make_unique<GlooBackend>(config.store, config.store_key, std::move(device),
                                         std::move(context), config.tuning, overrides,
                                         config.timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    Error t = translate(e);
    throw Error(t.code(), {config.rank, config.store_key, "connect", -1}, t.detail());
  }
}

}  // namespace meshrt
