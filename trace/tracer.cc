#include "trace/tracer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include "trace/env.h"
#include "trace/logging.h"

namespace meshrt::trace {
namespace {

// Sinks change rarely and events are frequent, so delivery takes no lock: a fixed table of
// slots read with acquire loads. A removed sink is kept alive (never freed) because a delivery
// that loaded it may still be running; sinks are few, so that costs nothing that matters.
constexpr size_t kMaxSinks = 32;

struct Registry {
  std::mutex mu;  // Serialises add/remove only.
  std::array<std::atomic<Sink*>, kMaxSinks> slots{};
  std::atomic<size_t> used{0};  // Slots [0, used) may hold a sink.
  std::vector<std::shared_ptr<Sink>> owned;
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> next_record_id{1};
  std::atomic<int> timing_sinks{0};  // Registered sinks whose needs_timing() is true.
};

Registry& registry() {
  // Leaked: worker threads may still emit while static destructors run at exit.
  static Registry* r = new Registry;
  return *r;
}

template <typename F>
void deliver(F&& f) noexcept {
  Registry& r = registry();
  const size_t used = r.used.load(std::memory_order_acquire);
  for (size_t i = 0; i < used; ++i) {
    Sink* sink = r.slots[i].load(std::memory_order_acquire);
    if (sink == nullptr) continue;
    try {
      f(*sink);
    } catch (...) {
      // A sink bug must never fail or hang a collective: count it, say it once.
      if (r.failures.fetch_add(1) == 0) {
        log().error("a trace sink threw; further sink errors are only counted");
      }
    }
  }
}

}  // namespace

std::string format_tensor_stats(const TensorStats& s) {
  if (!s.valid) return "n/a";
  return fmt::format("count={} min={:g} max={:g} mean={:g} nan={} inf={}", s.count, s.min, s.max,
                     s.mean, s.nan_count, s.inf_count);
}

std::string_view op_state_name(OpState state) {
  switch (state) {
    case OpState::kScheduled:
      return "scheduled";
    case OpState::kStarted:
      return "started";
    case OpState::kCompleted:
      return "completed";
    case OpState::kFailed:
      return "failed";
  }
  return "unknown";
}

void add_sink(std::shared_ptr<Sink> sink) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  const size_t used = r.used.load(std::memory_order_relaxed);
  size_t slot = 0;
  while (slot < used && r.slots[slot].load(std::memory_order_relaxed) != nullptr) ++slot;
  if (slot == kMaxSinks) {
    log().error("more than {} trace sinks; this one is ignored", kMaxSinks);
    return;
  }
  r.slots[slot].store(sink.get(), std::memory_order_release);
  if (sink->needs_timing()) r.timing_sinks.fetch_add(1, std::memory_order_relaxed);
  if (slot == used) r.used.store(used + 1, std::memory_order_release);
  r.owned.push_back(std::move(sink));
}

void remove_sink(const Sink* sink) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& slot : r.slots) {
    if (slot.load(std::memory_order_relaxed) == sink) {
      slot.store(nullptr, std::memory_order_release);
      if (sink->needs_timing()) r.timing_sinks.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

bool timing_enabled() {
  static const bool forced = env::get_flag({"MESHRT_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"});
  return forced || registry().timing_sinks.load(std::memory_order_relaxed) > 0;
}

void keep_registered_while_enabled(Sink& sink, bool was_enabled, bool enabled) {
  if (enabled && !was_enabled) add_sink(std::shared_ptr<Sink>(&sink, [](Sink*) {}));
  if (!enabled && was_enabled) remove_sink(&sink);
}

void run_at_exit_once(void (*write)()) {
  static std::mutex mu;
  static std::set<void (*)()> registered;
  std::lock_guard lock(mu);
  if (registered.insert(write).second) std::atexit(write);
}

uint64_t next_record_id() {
  return registry().next_record_id.fetch_add(1, std::memory_order_relaxed);
}

void emit_enqueue(const OpRecord& record) noexcept {
  deliver([&](Sink& s) { s.on_enqueue(record); });
}
void emit_start(const OpRecord& record) noexcept {
  deliver([&](Sink& s) { s.on_start(record); });
}
void emit_end(const OpRecord& record) noexcept {
  deliver([&](Sink& s) { s.on_end(record); });
}

uint64_t sink_failures() { return registry().failures.load(); }

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t wall_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t wall_from_steady_ns(int64_t steady_ns) {
  static const int64_t offset_ns = wall_now_ns() - steady_now_ns();
  return steady_ns + offset_ns;
}

}  // namespace meshrt::trace
