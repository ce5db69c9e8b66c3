#include "trace/tracer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

namespace meshrt::trace {
namespace {

// Sinks change rarely and events are frequent: readers take a snapshot of an immutable list.
struct Registry {
  std::mutex mu;
  std::shared_ptr<const std::vector<std::shared_ptr<Sink>>> sinks =
      std::make_shared<const std::vector<std::shared_ptr<Sink>>>();
  std::atomic<bool> any{false};
  std::atomic<uint64_t> failures{0};
};

Registry& registry() {
  static Registry r;
  return r;
}

template <typename F>
void deliver(F&& f) noexcept {
  Registry& r = registry();
  if (!r.any.load(std::memory_order_acquire)) return;
  std::shared_ptr<const std::vector<std::shared_ptr<Sink>>> sinks;
  {
    std::lock_guard lock(r.mu);
    sinks = r.sinks;
  }
  for (const auto& sink : *sinks) {
    try {
      f(*sink);
    } catch (...) {
      // A sink bug must never fail or hang a collective: count it, say it once.
      if (r.failures.fetch_add(1) == 0) {
        std::fprintf(stderr, "meshrt: a trace sink threw; further sink errors are only counted\n");
      }
    }
  }
}

}  // namespace

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
  auto next = std::make_shared<std::vector<std::shared_ptr<Sink>>>(*r.sinks);
  next->push_back(std::move(sink));
  r.sinks = std::move(next);
  r.any.store(true, std::memory_order_release);
}

void remove_sink(const Sink* sink) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto next = std::make_shared<std::vector<std::shared_ptr<Sink>>>(*r.sinks);
  std::erase_if(*next, [sink](const auto& s) { return s.get() == sink; });
  r.any.store(!next->empty(), std::memory_order_release);
  r.sinks = std::move(next);
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

}  // namespace meshrt::trace
