#include "trace/labels.h"

#include <fmt/format.h>

#include <utility>

namespace meshrt::trace {
namespace {

constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

// `bytes` (a power of two) as a whole number of its largest 1024-based unit.
std::pair<uint64_t, const char*> in_unit(uint64_t bytes) {
  int unit = 0;
  while (bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return {bytes, kUnits[unit]};
}

}  // namespace

uint64_t size_bucket(uint64_t bytes) {
  if (bytes == 0) return 0;
  return uint64_t{1} << (63 - __builtin_clzll(bytes));
}

std::string size_bucket_label(uint64_t bytes) {
  if (bytes == 0) return "0B";
  const uint64_t low = size_bucket(bytes);
  const auto [low_n, low_unit] = in_unit(low);
  // 2^63's upper end does not fit: spell it from the lower end's unit.
  const auto [high_n, high_unit] = low == uint64_t{1} << 63
                                       ? std::pair<uint64_t, const char*>{low_n * 2, low_unit}
                                       : in_unit(low * 2);
  if (std::string_view(low_unit) == high_unit)
    return fmt::format("{}-{}{}", low_n, high_n, high_unit);
  return fmt::format("{}{}-{}{}", low_n, low_unit, high_n, high_unit);
}

const std::string& mesh_dim_label(const CommInfo& comm) {
  return comm.mesh_dim.empty() ? comm.name : comm.mesh_dim;
}

}  // namespace meshrt::trace
