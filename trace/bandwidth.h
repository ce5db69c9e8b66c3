// nccl-tests' bandwidth formulas as small pure functions: algbw = S / t in GB/s (1e9 bytes/s),
// busbw = algbw x a factor of the group size n, where n is the size of the group the op ran on
// (never the world size, and all_reduce's algbw is not doubled: DeepSpeed's two mistakes).
#pragma once

#include <cstdint>

#include "trace/op_kind.h"

namespace meshrt::trace {

// busbw / algbw for `kind` on a group of `n` ranks (op_kind.h's BusRule): all_reduce 2(n-1)/n;
// all_gather, reduce_scatter, all_to_all, gather, scatter (n-1)/n; broadcast, reduce, send,
// recv, batch_p2p 1; barrier 0. n = 1 gives 0 where data stays local.
double bus_factor(OpKind kind, int n);

// S / t in GB/s; 0 when `duration_us` is not positive.
double algbw_gbps(uint64_t bytes, double duration_us);

// algbw x bus_factor(kind, n).
double busbw_gbps(OpKind kind, int n, uint64_t bytes, double duration_us);

}  // namespace meshrt::trace
