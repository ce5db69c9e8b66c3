// One rank of the multi-process Gloo tests. Joins the job from torchrun's environment, runs the
// scenario named by argv[1], prints failures and exits 0 (all right) or 1 (a check failed).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "runtime/meshrt.h"
#include "tests/collective_checks.h"

namespace {

int report(const std::vector<std::string>& failures) {
  for (const auto& f : failures) std::fprintf(stderr, "FAIL %s\n", f.c_str());
  return failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "collectives";
  try {
    auto world = meshrt::init();
    if (scenario == "collectives") {
      auto failures = meshrt::testing::check_all_collectives(*world);
      auto more = meshrt::testing::check_p2p_and_split(*world);
      failures.insert(failures.end(), more.begin(), more.end());
      // Rank 0 hosts the store: nobody leaves while a peer may still be connecting through it.
      world->barrier()->wait();
      return report(failures);
    }
    if (scenario == "peer_dies") {
      // The last rank dies between two collectives; the others must fail with a clear error
      // within the op timeout (exit 3), never hang or abort.
      std::vector<float> x(1024, 1.0f);
      world->all_reduce(meshrt::view(x))->wait();
      if (world->rank() == world->size() - 1) _exit(9);
      try {
        world
            ->all_reduce(meshrt::view(x), meshrt::ReduceOp::kSum, {std::chrono::milliseconds(4000)})
            ->wait();
      } catch (const meshrt::Error& e) {
        std::fprintf(stderr, "EXPECTED %s\n", e.what());
        return 3;
      }
      std::fprintf(stderr, "FAIL rank %d: all_reduce succeeded after a peer died\n", world->rank());
      return 1;
    }
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR %s\n", e.what());
    return 4;
  }
}
