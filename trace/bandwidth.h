// nccl-tests' bandwidth formulas as small pure functions: algbw = S / t in GB/s (1e9 bytes/s),
// busbw = algbw x a factor of the group size n, where n is the size of the group the op ran on
// (never the world size, and all_reduce's algbw is not doubled: DeepSpeed's two mistakes).
#pragma once

#include <cstdint>
#include <string_view>

namespace meshrt::trace {

// busbw / algbw for `op` ("all_reduce", "all_gather", ...) on a group of `n` ranks:
// all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all, gather, scatter (n-1)/n;
// broadcast, reduce, send, recv, batch_p2p 1; barrier 0. n = 1 gives 0 where data stays local.
double bus_factor(std::string_view op, int n);

// S / t in GB/s; 0 when `duration_us` is not positive.
double algbw_gbps(uint64_t bytes, double duration_us);

// algbw x bus_factor(op, n).
double busbw_gbps(std::string_view op, int n, uint64_t bytes, double duration_us);

}  // namespace meshrt::trace
