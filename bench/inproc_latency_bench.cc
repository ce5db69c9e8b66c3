// The in-process backend's 8 B all_reduce against a std::barrier round trip on the same threads:
// the floor of any exchange among threads (issue #30: within 2x). Interleaved rounds, each a batch
// of ITERS of one then ITERS of the other (order alternating), every all_reduce result checked.
// Prints per round the ns per op of each and their ratio, then min / median / max of the ratio.
//
//   bench/inproc_latency_bench [THREADS] [ITERS] [ROUNDS]     (defaults 2 20000 7)
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <thread>
#include <vector>

#include "mesh/meshrt.h"

namespace {

using Clock = std::chrono::steady_clock;

// Runs fn(rank) on `threads` threads at once; returns the wall time of the slowest, in ns.
template <typename F>
double on_threads(int threads, F fn) {
  std::barrier start(threads + 1);
  std::vector<std::thread> pool;
  for (int r = 0; r < threads; ++r) {
    pool.emplace_back([&, r] {
      start.arrive_and_wait();
      fn(r);
    });
  }
  const auto t0 = Clock::now();
  start.arrive_and_wait();
  for (auto& t : pool) t.join();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  auto world = meshrt::make_inproc_world(threads);
  int wrong = 0;
  auto barrier_ns = [&] {
    std::barrier b(threads);
    return on_threads(threads,
                      [&](int) {
                        for (int i = 0; i < iters; ++i) b.arrive_and_wait();
                      }) /
           iters;
  };
  auto all_reduce_ns = [&] {
    return on_threads(threads,
                      [&](int r) {
                        float x[2];
                        for (int i = 0; i < iters; ++i) {
                          x[0] = x[1] = 1.0f;
                          world[r]->all_reduce(meshrt::view(std::span<float>(x, 2)))->wait();
                          if (x[0] != static_cast<float>(threads)) ++wrong;
                        }
                      }) /
           iters;
  };
  all_reduce_ns();  // Warm-up: worker caches, first-touch.
  std::vector<double> ratios;
  for (int round = 0; round < rounds; ++round) {
    double b = 0, a = 0;
    if (round % 2 == 0) {
      b = barrier_ns();
      a = all_reduce_ns();
    } else {
      a = all_reduce_ns();
      b = barrier_ns();
    }
    ratios.push_back(a / b);
    std::printf("round %d: std::barrier %.0f ns, all_reduce 8 B %.0f ns, ratio %.2f\n", round, b, a,
                a / b);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("threads %d: all_reduce / barrier min %.2f median %.2f max %.2f; wrong %d\n", threads,
              ratios.front(), ratios[ratios.size() / 2], ratios.back(), wrong);
  return wrong == 0 ? 0 : 1;
}
