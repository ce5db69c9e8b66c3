// The one cap on timeouts, for every layer that computes a deadline (communicators, works, the
// store's client and server): "forever" (milliseconds::max()) would overflow now() + timeout.
#pragma once

#include <algorithm>
#include <chrono>

namespace meshrt {

// The longest timeout taken (a year); longer ones are cut to it.
inline constexpr std::chrono::milliseconds kMaxTimeout{std::chrono::hours(24 * 365)};

// `timeout` clamped to [0, kMaxTimeout].
constexpr std::chrono::milliseconds capped_timeout(std::chrono::milliseconds timeout) {
  return std::clamp(timeout, std::chrono::milliseconds{0}, kMaxTimeout);
}

}  // namespace meshrt
