#include "runtime/hooks.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt {

// A communicator's hook lists, shared by its OpHooks, the handles and the post-op dispatcher, so
// that a handle outliving its communicator still removes safely.
struct HookState {
  explicit HookState(std::shared_ptr<const trace::CommInfo> c) : comm(std::move(c)) {}

  template <typename Hook>
  using List = std::vector<std::pair<uint64_t, std::shared_ptr<const Hook>>>;

  template <typename Hook>
  HookHandle add(const std::shared_ptr<HookState>& self, List<Hook>& list, Hook hook) {
    std::lock_guard lock(mu);
    const uint64_t id = next_id++;
    list.emplace_back(id, std::make_shared<const Hook>(std::move(hook)));
    pre_count.store(pre.size(), std::memory_order_relaxed);
    return HookHandle(self, id);
  }
  // A copy of `list`, so that hooks run without the lock (a hook may add or remove hooks).
  template <typename Hook>
  List<Hook> snapshot(const List<Hook>& list) const {
    std::lock_guard lock(mu);
    return list;
  }
  void remove(uint64_t id) {
    std::lock_guard lock(mu);
    auto drop = [id](auto& list) {
      std::erase_if(list, [id](const auto& entry) { return entry.first == id; });
    };
    drop(pre);
    drop(post);
    drop(abort);
    pre_count.store(pre.size(), std::memory_order_relaxed);
  }

  const std::shared_ptr<const trace::CommInfo> comm;
  mutable std::mutex mu;
  uint64_t next_id = 1;
  List<PreOpHook> pre;
  List<PostOpHook> post;
  List<AbortHook> abort;
  std::atomic<size_t> pre_count{0};
  std::atomic<bool> post_attached{false};  // Known to PostOpDispatch (until ~OpHooks).
};

namespace {

// Delivers ops' ends to their communicators' post-op hooks: one tracer sink for the process,
// registered with the first post-op hook, so that communicators without one cost nothing.
class PostOpDispatch final : public trace::Sink {
 public:
  static PostOpDispatch& instance() {
    // Leaked, like every sink: the tracer may still deliver to it during exit.
    static PostOpDispatch* dispatch = [] {
      auto* d = new PostOpDispatch;
      trace::add_sink(std::shared_ptr<trace::Sink>(d, [](trace::Sink*) {}));
      return d;
    }();
    return *dispatch;
  }

  void attach(const std::shared_ptr<HookState>& state) {
    std::lock_guard lock(mu_);
    states_[state->comm.get()] = state;
    attached_.store(states_.size(), std::memory_order_relaxed);
  }
  void detach(const trace::CommInfo* comm) {
    std::lock_guard lock(mu_);
    states_.erase(comm);
    attached_.store(states_.size(), std::memory_order_relaxed);
  }

  bool needs_timing() const override { return false; }
  void on_enqueue(const trace::OpRecord&) override {}
  void on_start(const trace::OpRecord&) override {}
  void on_end(const trace::OpRecord& record) override {
    if (attached_.load(std::memory_order_relaxed) == 0) return;
    std::shared_ptr<HookState> state;
    {
      std::lock_guard lock(mu_);
      auto it = states_.find(record.comm.get());
      if (it == states_.end()) return;
      state = it->second.lock();
    }
    if (!state) return;
    for (const auto& [id, hook] : state->snapshot(state->post)) {
      try {
        (*hook)(record);
      } catch (const std::exception& e) {
        log().error("a post-op hook of '{}' threw on {} #{}: {}", record.comm->name, record.op,
                    trace::trace_seq(record), e.what());
      }
    }
  }

 private:
  std::mutex mu_;
  std::map<const trace::CommInfo*, std::weak_ptr<HookState>> states_;
  std::atomic<size_t> attached_{0};
};

}  // namespace

HookHandle::HookHandle(HookHandle&& other) noexcept
    : state_(std::move(other.state_)), id_(std::exchange(other.id_, 0)) {}

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    remove();
    state_ = std::move(other.state_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void HookHandle::remove() noexcept {
  if (id_ == 0) return;
  state_->remove(std::exchange(id_, 0));
  state_.reset();
}

OpHooks::OpHooks(std::shared_ptr<const trace::CommInfo> comm)
    : state_(std::make_shared<HookState>(std::move(comm))) {}

OpHooks::~OpHooks() {
  if (state_->post_attached.load()) PostOpDispatch::instance().detach(state_->comm.get());
}

HookHandle OpHooks::add_pre_op(PreOpHook hook) {
  return state_->add(state_, state_->pre, std::move(hook));
}

HookHandle OpHooks::add_post_op(PostOpHook hook) {
  if (!state_->post_attached.exchange(true)) PostOpDispatch::instance().attach(state_);
  return state_->add(state_, state_->post, std::move(hook));
}

HookHandle OpHooks::add_abort(AbortHook hook) {
  return state_->add(state_, state_->abort, std::move(hook));
}

bool OpHooks::has_pre_op() const { return state_->pre_count.load(std::memory_order_relaxed) > 0; }

void OpHooks::run_pre_op(const OpHookArgs& args) const {
  const trace::CommInfo& c = *state_->comm;
  const ErrorContext where{c.global_rank, c.name, std::string(args.op), -1};
  for (const auto& [id, hook] : state_->snapshot(state_->pre)) {
    try {
      (*hook)(args);
    } catch (const Error& e) {
      throw Error(e.code(), where, e.detail());
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kInvalidArgument, where,
                  fmt::format("a pre-op hook failed: {}", e.what()));
    }
  }
}

void OpHooks::run_abort() const noexcept {
  try {
    for (const auto& [id, hook] : state_->snapshot(state_->abort)) {
      try {
        (*hook)();
      } catch (const std::exception& e) {
        log().error("an abort hook of '{}' threw: {}", state_->comm->name, e.what());
      }
    }
  } catch (...) {
    // Copying the list failed (out of memory): the abort itself must still go on.
  }
}

}  // namespace meshrt
