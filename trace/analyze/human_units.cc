#include "trace/analyze/human_units.h"

#include <fmt/format.h>

#include <cmath>
#include <span>
#include <utility>

namespace meshrt::trace {
namespace {

// `value` rounded to three significant digits (so that unit choice sees 999.7 as 1000).
double round3(double value) {
  if (value == 0 || !std::isfinite(value)) return value;
  const double scale = std::pow(10.0, 2 - std::floor(std::log10(std::fabs(value))));
  return std::round(value * scale) / scale;
}

// `value` in the largest unit of `units` (each `step` times the previous) that keeps it >= 1.
std::string scaled(double value, double step, std::span<const char* const> units) {
  size_t u = 0;
  while (u + 1 < units.size() && std::fabs(value) >= step) {
    value /= step;
    ++u;
  }
  // Rounding can reach the next unit: 999.7 ms is "1 s", not "1000 ms".
  if (u + 1 < units.size() && std::fabs(round3(value / step)) >= 1) {
    value /= step;
    ++u;
  }
  return three_digits(value) + " " + units[u];
}

}  // namespace

std::string three_digits(double value) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  value = round3(value);
  if (value == 0) return "0";
  const int digits = static_cast<int>(std::floor(std::log10(std::fabs(value)))) + 1;
  std::string out = fmt::format("{:.{}f}", value, std::max(0, 3 - digits));
  if (out.find('.') != std::string::npos) {
    out.erase(out.find_last_not_of('0') + 1);
    if (out.back() == '.') out.pop_back();
  }
  return out;
}

std::string human_bytes(double bytes) {
  // Below 1 KiB the count is exact and short: "1023 B", not "1020 B".
  if (std::fabs(bytes) < 1024 && bytes == std::round(bytes)) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return scaled(bytes, 1024, kUnits);
}

std::string human_ms(double ms) {
  if (ms == 0) return "0 ms";
  static constexpr const char* kUnits[] = {"ns", "µs", "ms", "s"};
  return scaled(ms * 1e6, 1000, kUnits);
}

std::string human_gbps(double gbps) {
  static constexpr const char* kUnits[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
  return scaled(gbps * 1e9, 1000, kUnits);
}

}  // namespace meshrt::trace
