// Timing helpers of the benches that run under mpirun beside raw MPI (mpi_bench,
// gloo_vs_mpi_bench): the slowest rank's time per op, and the median of a round's figures.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace meshrt::bench {

// Seconds per op of `iters` calls of `op`, the slowest rank's, after a barrier.
template <typename F>
double time_per_op(int iters, F&& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) op();
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  double worst = 0;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

// The middle value (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace meshrt::bench
