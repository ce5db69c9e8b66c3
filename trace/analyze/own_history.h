// Judging a rank by its own history: the analyzer breaks ties and cycles by asking whether the op
// a rank waits in continues the pattern its recent ops repeat (match.cc, explain.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>

namespace meshrt::trace {

// A history shows a pattern when its last max(kMinRepeats x p, kMinItems) items repeat with a
// period p of at most kMaxPeriod.
inline constexpr size_t kMaxPeriod = 16;
inline constexpr size_t kMinRepeats = 3;
inline constexpr size_t kMinItems = 6;

// The shortest such period of a history of `n` items, `same(i, j)` comparing items i and j (0:
// the oldest); nullopt when the history shows no clear pattern. The item after the history is
// predicted to be like item n - period.
template <typename Same>
std::optional<size_t> tail_period(size_t n, Same same) {
  for (size_t p = 1; p <= kMaxPeriod && p * kMinRepeats <= n; ++p) {
    const size_t need = std::max(kMinRepeats * p, kMinItems);
    if (n < need) continue;
    bool periodic = true;
    for (size_t i = n - need + p; i < n && periodic; ++i) periodic = same(i, i - p);
    if (periodic) return p;
  }
  return std::nullopt;
}

}  // namespace meshrt::trace
