#include "trace/bandwidth.h"

namespace meshrt::trace {

double bus_factor(std::string_view op, int n) {
  if (n <= 0) return 0.0;
  const double ring = static_cast<double>(n - 1) / n;
  if (op == "all_reduce") return 2.0 * ring;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" || op == "gather" ||
      op == "scatter") {
    return ring;
  }
  if (op == "barrier") return 0.0;
  return 1.0;  // broadcast, reduce, send, recv, batch_p2p: bound by one link.
}

double algbw_gbps(uint64_t bytes, double duration_us) {
  if (duration_us <= 0) return 0.0;
  return static_cast<double>(bytes) / (duration_us * 1e3);  // bytes/us / 1e3 = GB/s
}

double busbw_gbps(std::string_view op, int n, uint64_t bytes, double duration_us) {
  return algbw_gbps(bytes, duration_us) * bus_factor(op, n);
}

}  // namespace meshrt::trace
