// Uneven all_to_all (all_to_all with splits, MPI_Alltoallv), one rank of a local job: the
// exchange a trainer's hook does with variable blocks. Rank r sends (r + j + 1) x UNIT elements
// of f32 to rank j. Every result is checked; rank 0 prints one line: the median and mean op time
// over ROUNDS batches of ITERS ops (each waited on). Run it twice in interleaved rounds under
// meshrun, with MESHRT_ALGO=all_to_all=library (Gloo's alltoallv over TCP) and without (the
// shared-memory slots), to compare (docs/performance.md).
//
//   meshrun --nproc-per-node 2 bench/uneven_a2a_bench [UNIT] [ITERS] [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "mesh/meshrt.h"

int main(int argc, char** argv) {
  const size_t unit = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 16;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  auto world = meshrt::init();
  const int n = world->size();
  const int me = world->rank();
  std::vector<size_t> sends(n), wants(n);
  for (int j = 0; j < n; ++j) {
    sends[j] = (me + j + 1) * unit;
    wants[j] = (j + me + 1) * unit;
  }
  std::vector<float> in(std::accumulate(sends.begin(), sends.end(), size_t{0}));
  std::vector<float> out(std::accumulate(wants.begin(), wants.end(), size_t{0}));
  // Element i of the block for rank j: 1000 x sender + j + i / 1e6, so a misplaced element shows.
  for (size_t j = 0, at = 0; j < static_cast<size_t>(n); at += sends[j], ++j) {
    for (size_t i = 0; i < sends[j]; ++i) in[at + i] = 1000.0f * me + j + i * 1e-6f;
  }
  auto check = [&] {
    for (size_t q = 0, at = 0; q < static_cast<size_t>(n); at += wants[q], ++q) {
      for (size_t i = 0; i < wants[q]; ++i) {
        if (out[at + i] != 1000.0f * q + me + i * 1e-6f) return false;
      }
    }
    return true;
  };
  using Clock = std::chrono::steady_clock;
  std::vector<double> per_op_us;
  for (int r = -1; r < rounds; ++r) {  // Round -1 warms up.
    world->barrier()->wait();
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      world->all_to_all(meshrt::view(in), sends, meshrt::view(out), wants)->wait();
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (!check()) {
      std::fprintf(stderr, "rank %d: wrong result\n", me);
      return 1;
    }
    if (r >= 0) per_op_us.push_back(us / iters);
  }
  if (me == 0) {
    std::sort(per_op_us.begin(), per_op_us.end());
    const double mean =
        std::accumulate(per_op_us.begin(), per_op_us.end(), 0.0) / static_cast<double>(rounds);
    std::printf("uneven_a2a ranks %d unit %zu bytes_sent_rank0 %zu median_us %.2f mean_us %.2f\n",
                n, unit, in.size() * sizeof(float), per_op_us[per_op_us.size() / 2], mean);
  }
  world->barrier()->wait();
  return 0;
}
