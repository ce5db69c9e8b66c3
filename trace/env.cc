#include "trace/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "trace/logging.h"

extern char** environ;

namespace meshrt::trace::env {
namespace {

[[noreturn]] void bad(const Value& v, std::string_view expected) {
  throw EnvError(fmt::format("{}='{}': expected {}", v.name, v.text, expected));
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string range_text(int64_t min, int64_t max) {
  constexpr int64_t kLow = std::numeric_limits<int64_t>::min();
  constexpr int64_t kHigh = std::numeric_limits<int64_t>::max();
  if (min == kLow && max == kHigh) return "an integer";
  if (max == kHigh) return fmt::format("an integer >= {}", min);
  if (min == kLow) return fmt::format("an integer <= {}", max);
  return fmt::format("an integer in [{}, {}]", min, max);
}

}  // namespace

std::optional<Value> lookup(Names names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return Value{name, v};
  }
  return std::nullopt;
}

std::optional<std::string> get(Names names) {
  auto v = lookup(names);
  if (!v) return std::nullopt;
  return std::move(v->text);
}

std::optional<int64_t> get_int(Names names, int64_t min, int64_t max) {
  const auto v = lookup(names);
  if (!v) return std::nullopt;
  int64_t n = 0;
  const char* begin = v->text.data();
  const char* end = begin + v->text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, n);
  if (ec != std::errc() || ptr != end || n < min || n > max) bad(*v, range_text(min, max));
  return n;
}

std::optional<std::chrono::milliseconds> get_ms(Names names, int64_t min_ms) {
  const auto n = get_int(names, min_ms);
  if (!n) return std::nullopt;
  return std::chrono::milliseconds(*n);
}

bool get_flag(Names names, bool fallback) {
  const auto v = lookup(names);
  if (!v) return fallback;
  const std::string s = lower(v->text);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  bad(*v, "1/true/yes/on or 0/false/no/off");
}

std::optional<std::string> get_choice(Names names,
                                      std::initializer_list<std::string_view> choices) {
  const auto v = lookup(names);
  if (!v) return std::nullopt;
  for (std::string_view c : choices)
    if (v->text == c) return v->text;
  bad(*v, fmt::format("one of {}", fmt::join(choices, ", ")));
}

const std::vector<std::string_view>& known_variables() {
  static const std::vector<std::string_view> names = {
      "MESHRT_ALGO",
      "MESHRT_BACKEND",
      "MESHRT_COMMS_LOG",
      "MESHRT_COMMS_LOG_OPS",
      "MESHRT_COMMS_LOG_VERBOSE",
      "MESHRT_COMMS_SUMMARY",
      "MESHRT_CUDA_DEVICE",
      "MESHRT_DEBUG_TENSOR_STATS",
      "MESHRT_DUMP_FORMAT",
      "MESHRT_DUMP_ON_STALL",
      "MESHRT_DUMP_PIPE",
      "MESHRT_DUMP_PREFIX",
      "MESHRT_DUMP_SIGNAL_POLL_MS",
      "MESHRT_DUMP_WAIT_MS",
      "MESHRT_ENABLE_TIMING",
      "MESHRT_EXIT_TIMEOUT_MS",
      "MESHRT_GLOO_IFNAME",
      "MESHRT_GLOO_ONESHOT_MAX_BYTES",
      "MESHRT_GLOO_SHM_SLOT_BYTES",
      "MESHRT_GLOO_SINGLE_COPY",
      "MESHRT_GLOO_STRIPE_MIN_BYTES",
      "MESHRT_HEARTBEAT_TIMEOUT_MS",
      "MESHRT_INIT_TIMEOUT_MS",
      "MESHRT_LAUNCHER",
      "MESHRT_LIVE_MONITOR",
      "MESHRT_LOG_DIR",
      "MESHRT_LOG_LEVEL",
      "MESHRT_MESHTRACE",
      "MESHRT_MONITOR_BIN",
      "MESHRT_MPI_BLOCKING_MAX_BYTES",
      "MESHRT_NAN_CHECK",
      "MESHRT_NCCL_CHECK_POINTERS",
      "MESHRT_NCCL_USE_CALLER_STREAM",
      "MESHRT_NCCL_WATCH_GRAPHS",
      "MESHRT_ON_RANK_FAILURE",
      "MESHRT_ON_TIMEOUT",
      "MESHRT_PROGRESS_PERIOD_MS",
      "MESHRT_RESTART_COUNT",
      "MESHRT_RUN_ID",
      "MESHRT_SCOPE_TREE",
      "MESHRT_SCOPE_TREE_HTML",
      "MESHRT_SIMULATED_HOST",
      "MESHRT_STALL_S",
      "MESHRT_STATUS_TOKEN",
      "MESHRT_STORE_EXTERNAL",
      "MESHRT_STORE_TLS_CA",
      "MESHRT_STORE_TLS_CERT",
      "MESHRT_STORE_TLS_KEY",
      "MESHRT_STORE_TOKEN",
      "MESHRT_STRAGGLER_BUFFER_SIZE",
      "MESHRT_STRAGGLER_REPORT",
      "MESHRT_STRAGGLER_TOPK",
      "MESHRT_TIMEOUT_MS",
      "MESHRT_TRACE_BUFFER_SIZE",
      "MESHRT_TRACE_CHROME",
      "MESHRT_TRACE_JSONL",
      "MESHRT_TRACE_PROMETHEUS",
      "MESHRT_TRACE_STACKS",
      "MESHRT_WATCHDOG_POLL_MS",
  };
  return names;
}

std::string_view closest_known_variable(std::string_view name) {
  // Levenshtein distance, one row at a time: names are short.
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  std::string_view best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (std::string_view known : known_variables()) {
    if (const size_t d = distance(name, known); d < best_distance) {
      best = known;
      best_distance = d;
    }
  }
  return best;
}

void warn_unknown_variables() {
  static std::once_flag once;
  std::call_once(once, [] {
    const auto& known = known_variables();
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      if (!entry.starts_with("MESHRT_")) continue;
      const std::string_view name = entry.substr(0, entry.find('='));
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      log().warn("{} is not a variable meshrt reads (ignored); did you mean {}?", name,
                 closest_known_variable(name));
    }
  });
}

}  // namespace meshrt::trace::env
