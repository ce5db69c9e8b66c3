// stall: four ranks on a 2 x 2 mesh (pp x tp) that stall, for the live verdict
// (docs/diagnosis.md). Two healthy steps (tp all_reduce, pp broadcast), then rank 3 in step 3:
//   skip       skips the tp all_reduce #3, runs the pp broadcast #3 and moves on;
//   user_code  sleeps in user code before the tp all_reduce #3;
//   wrong_op   calls all_gather on tp where the others call all_reduce #3;
//   p2p        a pipeline exchange over the world in which rank 2 receives from rank 3 instead
//              of rank 0 (a p2p deadlock);
//   straggler  no stall: steps with 20 ms of work for --sleep-s seconds, rank 3's 200 ms.
// Run under meshrun with MESHRT_STALL_S small and a long --timeout-ms: meshrun prints the
// verdict while the ranks wait; the watchdog ends the job at the timeout.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "mesh/meshrt.h"

namespace {

void step(meshrt::DeviceMesh& mesh, std::vector<float>& a, bool tp, bool pp) {
  if (tp) mesh.comm("tp").all_reduce(meshrt::view(a))->wait();
  if (pp) mesh.comm("pp").broadcast(meshrt::view(a), /*root=*/0)->wait();
}

void run_rank(const std::shared_ptr<meshrt::Communicator>& world_ptr, const std::string& mode,
              int64_t sleep_s) {
  meshrt::Communicator& world = *world_ptr;
  const int rank = world.global_rank();
  auto mesh = meshrt::init_device_mesh(world_ptr, "cpu", {2, 2}, {"pp", "tp"});
  std::vector<float> a(16, static_cast<float>(rank));
  for (int i = 0; i < 2; ++i) step(*mesh, a, true, true);
  std::printf("step 3\n");
  std::fflush(stdout);
  const bool culprit = rank == 3;
  if (mode == "skip") {
    step(*mesh, a, !culprit, true);
    if (culprit) std::this_thread::sleep_for(std::chrono::seconds(sleep_s));
  } else if (mode == "user_code") {
    if (culprit) std::this_thread::sleep_for(std::chrono::seconds(sleep_s));
    step(*mesh, a, true, true);
  } else if (mode == "wrong_op") {
    if (culprit) {
      std::vector<float> out(32);
      mesh->comm("tp").all_gather(meshrt::view(a), meshrt::view(out))->wait();
    } else {
      step(*mesh, a, true, false);
    }
  } else if (mode == "straggler") {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(sleep_s);
    while (std::chrono::steady_clock::now() < end) {
      step(*mesh, a, true, true);
      std::this_thread::sleep_for(std::chrono::milliseconds(culprit ? 200 : 20));
    }
  } else {  // p2p: stage 0 sends then receives, stage 1 receives then sends.
    const int peer = rank < 2 ? rank + 2 : rank - 2;
    if (rank < 2) {
      world.send(meshrt::view(a), peer)->wait();
      world.recv(meshrt::view(a), peer)->wait();
    } else {
      world.recv(meshrt::view(a), rank == 2 ? 3 : peer)->wait();
      world.send(meshrt::view(a), peer)->wait();
    }
  }
  std::printf("done\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Four ranks that stall in a chosen way, for the live verdict."};
  std::string mode = "user_code";
  int64_t timeout_ms = 60000;
  int64_t sleep_s = 30;
  app.add_option("--case", mode, "how rank 3 goes wrong")
      ->check(CLI::IsMember({"skip", "user_code", "wrong_op", "p2p", "straggler"}));
  app.add_option("--timeout-ms", timeout_ms, "the communicators' op timeout")
      ->check(CLI::PositiveNumber);
  app.add_option("--sleep-s", sleep_s, "how long rank 3 stays in user code")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    meshrt::InitOptions options = meshrt::init_options_from_env();
    options.timeout = std::chrono::milliseconds(timeout_ms);
    auto world = meshrt::init(options);
    if (world->size() != 4) {
      std::fprintf(stderr, "stall: needs 4 ranks, got %d\n", world->size());
      return 2;
    }
    run_rank(world, mode, sleep_s);
  } catch (const meshrt::Error& e) {
    std::fprintf(stderr, "stall: %s\n", e.what());
    return 1;
  }
  return 0;
}
