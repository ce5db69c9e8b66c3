// One rank of the MPI tests, started by mpirun (tests/mpi_test.cc). Joins the job from OpenMPI's
// environment (no MASTER_ADDR: the store's address travels over MPI), runs the scenario named by
// argv[1], prints failures and exits 0 (all right) or 1 (a check failed).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "mesh/meshrt.h"
#include "tests/collective_checks.h"

namespace {

// Every op kind and dtype (tests/collective_checks), then a 2x2 DeviceMesh whose dims are MPI
// communicators.
std::vector<std::string> collectives(const std::shared_ptr<meshrt::Communicator>& world) {
  std::vector<std::string> failures;
  if (world->backend_name() != "mpi") {
    failures.push_back(fmt::format("world backend is {}, want mpi", world->backend_name()));
  }
  auto more = meshrt::testing::check_all_collectives(*world);
  failures.insert(failures.end(), more.begin(), more.end());
  more = meshrt::testing::check_p2p_and_split(*world);
  failures.insert(failures.end(), more.begin(), more.end());

  auto mesh = meshrt::init_device_mesh(world, "cpu", {2, 2}, {"dp", "tp"});
  const int r = world->rank();
  // Rank r sits at (r / 2, r % 2): its tp group is {2(r/2), 2(r/2)+1}, its dp group {r%2, r%2+2}.
  std::vector<int64_t> x{r + 1};
  mesh->comm("tp").all_reduce(meshrt::view(x))->wait();
  const int64_t tp_want = (2 * (r / 2) + 1) + (2 * (r / 2) + 2);
  if (x[0] != tp_want)
    failures.push_back(fmt::format("rank {}: tp sum {} want {}", r, x[0], tp_want));
  std::vector<int64_t> y{r + 1};
  mesh->comm("dp").all_reduce(meshrt::view(y))->wait();
  const int64_t dp_want = (r % 2 + 1) + (r % 2 + 3);
  if (y[0] != dp_want)
    failures.push_back(fmt::format("rank {}: dp sum {} want {}", r, y[0], dp_want));
  for (const char* dim : {"dp", "tp"}) {
    auto& c = mesh->comm(dim);
    if (c.backend_name() != "mpi" || c.size() != 2) {
      failures.push_back(
          fmt::format("rank {}: {} is {} of size {}", r, dim, c.backend_name(), c.size()));
    }
    more = meshrt::testing::check_p2p_and_split(c);
    failures.insert(failures.end(), more.begin(), more.end());
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "collectives";
  try {
    auto world = meshrt::init();
    if (scenario == "collectives") {
      auto failures = collectives(world);
      // Repair: a planned shrink is a split; one around dead ranks needs ULFM, which MPI lacks:
      // refused before anything is aborted, so the world goes on.
      const int n = world->size();
      auto shrunk = world->shrink(std::vector<int>{n - 1});
      if ((shrunk == nullptr) != (world->rank() == n - 1)) failures.push_back("default shrink");
      if (shrunk) {
        std::vector<int32_t> one(3, 1);
        shrunk->all_reduce(meshrt::view(one))->wait();
        if (one[2] != n - 1 || shrunk->name() != "world@1") failures.push_back("shrunk world");
      }
      try {
        world->shrink(std::vector<int>{(world->rank() + 1) % n}, meshrt::ShrinkMode::kAbort);
        failures.push_back("shrink(kAbort) on MPI did not throw");
      } catch (const meshrt::Error& e) {
        if (e.code() != meshrt::ErrorCode::kNotSupported ||
            std::string(e.what()).find("ULFM") == std::string::npos) {
          failures.push_back(std::string("shrink(kAbort) on MPI: ") + e.what());
        }
      }
      world->barrier()->wait();
      std::printf("rank %d: %zu failures\n", world->rank(), failures.size());
      return meshrt::testing::report_failures(failures);
    }
    if (scenario == "killed") {
      // Every rank writes its pid; then rank 2 dies by SIGKILL in the middle of the job while
      // the others wait in an all_reduce that can never finish. mpirun must end them.
      const std::string dir = argc > 2 ? argv[2] : "/tmp";
      std::ofstream(fmt::format("{}/pid{}", dir, world->rank())) << getpid() << "\n";
      std::vector<float> v(16, 1.0f);
      world->all_reduce(meshrt::view(v))->wait();
      if (world->rank() == 2) ::raise(SIGKILL);
      world->all_reduce(meshrt::view(v))->wait();
      std::fprintf(stderr, "FAIL rank %d: all_reduce finished after a peer died\n", world->rank());
      return 1;
    }
    if (scenario == "throw_timeout") {
      // Under MESHRT_ON_TIMEOUT=throw rank 0's all_reduce (non-blocking: the fast path is off
      // under throw) has no partner: wait() must throw kTimeout near the op timeout.
      if (world->rank() == 0) {
        std::vector<float> v(4, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        try {
          world->all_reduce(meshrt::view(v))->wait();
          std::fprintf(stderr, "FAIL all_reduce without partners finished\n");
          return 1;
        } catch (const meshrt::Error& e) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
          std::printf("THROWN code=%s after_ms=%lld: %s\n",
                      std::string(meshrt::error_code_name(e.code())).c_str(),
                      static_cast<long long>(ms), e.what());
          return e.code() == meshrt::ErrorCode::kTimeout ? 0 : 1;
        }
      }
      return 0;
    }
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR %s\n", e.what());
    return 4;
  }
}
