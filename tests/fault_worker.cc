// fault_worker: four ranks on a 2 x 2 mesh (pp x tp) run two healthy steps (tp all_reduce, pp
// broadcast); in step 3 one rank goes wrong in one of issue #16's ways (tests/faults_test.cc):
//   kill9      rank 3 kills itself with SIGKILL while its peers are inside the tp all_reduce;
//   user_hang  rank 3 sleeps in user code instead of joining the tp all_reduce;
//   exit0      rank 3 exits with status 0 before the tp all_reduce;
//   return     rank 3 returns from main before the tp all_reduce (through its exit barrier);
//   sigstop    rank 3 stops itself (SIGSTOP) while its peers are inside the tp all_reduce;
//   wrong_op   rank 3 calls all_gather on tp where rank 2 calls all_reduce;
//   sizes      rank 3 passes 32 elements to the tp all_reduce, rank 2 16;
//   p2p        a pipeline over the world in which rank 2 receives from rank 3 instead of rank 0;
//   segv       rank 3 dereferences a null pointer in user code.
// The op timeout comes from MESHRT_TIMEOUT_MS (the test sets a short one).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mesh/meshrt.h"

namespace {

void step(meshrt::DeviceMesh& mesh, std::vector<float>& a) {
  mesh.comm("tp").all_reduce(meshrt::view(a))->wait();
  mesh.comm("pp").broadcast(meshrt::view(a), /*root=*/0)->wait();
}

// no_sanitize: UBSan would report the null store and abort (SIGABRT) before the SIGSEGV under test.
[[gnu::noinline, gnu::no_sanitize("null")]] void crash_in_user_code(volatile int* p) { *p = 1; }

void run_rank(const std::shared_ptr<meshrt::Communicator>& world_ptr, const std::string& mode) {
  meshrt::Communicator& world = *world_ptr;
  const int rank = world.global_rank();
  auto mesh = meshrt::init_device_mesh(world_ptr, "cpu", {2, 2}, {"pp", "tp"});
  std::vector<float> a(16, static_cast<float>(rank));
  for (int i = 0; i < 2; ++i) step(*mesh, a);
  std::printf("step 3\n");
  if (rank != 3 || mode == "p2p") {
    if (mode == "p2p") {
      const int peer = rank < 2 ? rank + 2 : rank - 2;
      if (rank < 2) {
        world.send(meshrt::view(a), peer)->wait();
        world.recv(meshrt::view(a), peer)->wait();
      } else {
        world.recv(meshrt::view(a), rank == 2 ? 3 : peer)->wait();
        world.send(meshrt::view(a), peer)->wait();
      }
    } else {
      step(*mesh, a);
    }
    std::printf("done\n");
    return;
  }
  if (mode == "kill9") {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Peers are in the all_reduce.
    ::raise(SIGKILL);
  } else if (mode == "user_hang") {
    std::this_thread::sleep_for(std::chrono::seconds(120));
  } else if (mode == "exit0") {
    std::fflush(stdout);
    ::_exit(0);
  } else if (mode == "return") {
    std::printf("returning early\n");
    return;
  } else if (mode == "sigstop") {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Peers are in the all_reduce.
    ::raise(SIGSTOP);
  } else if (mode == "wrong_op") {
    std::vector<float> out(32);
    mesh->comm("tp").all_gather(meshrt::view(a), meshrt::view(out))->wait();
  } else if (mode == "sizes") {
    std::vector<float> big(32, 1.0f);
    mesh->comm("tp").all_reduce(meshrt::view(big))->wait();
  } else if (mode == "segv") {
    crash_in_user_code(nullptr);
  }
  std::printf("done\n");
}

}  // namespace

int main(int argc, char** argv) {
  // A second argument, ignored, lets a test find its processes.
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr,
                 "usage: fault_worker kill9|user_hang|exit0|return|sigstop|wrong_op|sizes|p2p|segv "
                 "[marker]\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    auto world = meshrt::init();
    if (world->size() != 4) {
      std::fprintf(stderr, "fault_worker: needs 4 ranks, got %d\n", world->size());
      return 2;
    }
    run_rank(world, argv[1]);
  } catch (const meshrt::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
