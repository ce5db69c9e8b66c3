// One rank of the multi-process straggler tests, started with torchrun's environment by
// tests/straggler_test.cc. Scenarios (argv[1]):
//   late    10 all_reduces; rank 2 sleeps 50 ms before each, so the others wait for it. Then
//           rank 3 runs 2 more collectives that complete without peers (a zero-element
//           all_gather returns at once), as a rank that ran ahead: they have no match.
//   vanish  3 all_reduces, then rank 3 leaves without releasing its world (no exit barrier, no
//           samples published); the others end normally.
//   inproc  no processes: 4 in-process ranks, 3 all_reduces, rank 1 sleeps 20 ms before each;
//           the report is written at exit from the process's own samples.
// Exits 0 when the all_reduce results are right, 1 otherwise.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mesh/meshrt.h"

namespace {

// Sums a vector of `rank + 1` over the world; returns whether every element is right.
bool all_reduce_checked(meshrt::Communicator& world) {
  std::vector<float> x(1024, static_cast<float>(world.rank() + 1));
  world.all_reduce(meshrt::view(x))->wait();
  const float want = world.size() * (world.size() + 1) / 2.0f;
  for (float v : x) {
    if (v != want) {
      std::fprintf(stderr, "FAIL rank %d: all_reduce gave %f, want %f\n", world.rank(), v, want);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "late";
  try {
    if (scenario == "inproc") {
      std::atomic<bool> ok{true};
      meshrt::run_inproc(4, [&](meshrt::Communicator& world) {
        for (int i = 0; i < 3; ++i) {
          if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          if (!all_reduce_checked(world)) ok = false;
        }
      });
      return ok ? 0 : 1;
    }
    auto world = meshrt::init();
    bool ok = true;
    if (scenario == "late") {
      for (int i = 0; i < 10; ++i) {
        if (world->rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ok = all_reduce_checked(*world) && ok;
      }
      if (world->rank() == 3) {
        std::vector<float> none;
        for (int i = 0; i < 2; ++i) {
          world->all_gather(meshrt::view(none), meshrt::view(none))->wait();
        }
      }
    } else if (scenario == "vanish") {
      for (int i = 0; i < 3; ++i) ok = all_reduce_checked(*world) && ok;
      if (world->rank() == 3) _exit(0);
    } else {
      std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
      return 2;
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL %s\n", e.what());
    return 1;
  }
}
