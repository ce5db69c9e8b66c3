#include "trace/bandwidth.h"

namespace meshrt::trace {

double bus_factor(OpKind kind, int n) {
  if (n <= 0) return 0.0;
  const double ring = static_cast<double>(n - 1) / n;
  switch (op_info(kind).bus) {
    case BusRule::kZero:
      return 0.0;
    case BusRule::kOne:
      return 1.0;
    case BusRule::kRing:
      return ring;
    case BusRule::kDoubleRing:
      return 2.0 * ring;
  }
  return 0.0;
}

double algbw_gbps(uint64_t bytes, double duration_us) {
  if (duration_us <= 0) return 0.0;
  return static_cast<double>(bytes) / (duration_us * 1e3);  // bytes/us / 1e3 = GB/s
}

double busbw_gbps(OpKind kind, int n, uint64_t bytes, double duration_us) {
  return algbw_gbps(bytes, duration_us) * bus_factor(kind, n);
}

}  // namespace meshrt::trace
