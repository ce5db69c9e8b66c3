// hang: PyTorch's Flight Recorder tutorial program in C++. Every rank runs four all_reduces, but
// rank 0 runs one more in the middle, so its last all_reduce (#5) waits for partners that never
// come. Its watchdog ends it (the others have left the job, or at the timeout), every rank dumps
// its flight recorder, and `meshtrace analyze` names what happened.
//
//   MESHRT_DUMP_PREFIX=/tmp/fr_ <torchrun-style env> hang --timeout-ms 2000
//   hang --backend inproc --world 4 --timeout-ms 500
//
// The extra all_reduce has the same shape as the others (the tutorial's differs): Gloo cannot
// detect a size mismatch inside an all_reduce, and the point here is the missing partner.
// Exit status: that of the watchdog's policy (70 under the default abort) on the hung rank, 0 on
// the others; 1 when the hang surfaced as an error (the throw policy); 2 on bad flags.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "mesh/meshrt.h"

namespace {

// In-process ranks share one output; under a launcher each line already carries its rank.
bool name_the_rank = false;

void say(int rank, const char* what) {
  if (name_the_rank) std::printf("rank %d: ", rank);
  std::printf("%s\n", what);
}

void run_rank(meshrt::Communicator& world) {
  const int rank = world.global_rank();
  std::vector<float> a(12, static_cast<float>(rank));
  const meshrt::Shape shape{3, 4};
  for (int i = 0; i < 2; ++i) {
    say(rank, "all_reduce of a");
    world.all_reduce(meshrt::view(a, shape))->wait();
  }
  if (rank == 0) {
    say(rank, "an extra all_reduce on b, which the other ranks forgot");
    std::vector<float> b(12, static_cast<float>(rank));
    world.all_reduce(meshrt::view(b, shape))->wait();
  }
  for (int i = 0; i < 2; ++i) {
    say(rank, "all_reduce of a");
    std::fflush(stdout);
    world.all_reduce(meshrt::view(a, shape))->wait();
  }
  say(rank, "exiting");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs the flight recorder tutorial's mismatched all_reduce program."};
  int64_t timeout_ms = 2000;
  std::string backend = "gloo";
  int world_size = 4;
  app.add_option("--timeout-ms", timeout_ms, "the communicators' op timeout")
      ->check(CLI::PositiveNumber);
  app.add_option("--backend", backend, "gloo (ranks from the environment) or inproc")
      ->check(CLI::IsMember({"gloo", "inproc"}));
  app.add_option("--world", world_size, "ranks of the inproc backend")->check(CLI::Range(2, 1024));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (backend == "inproc") {
      name_the_rank = true;
      meshrt::InprocOptions options;
      options.timeout = std::chrono::milliseconds(timeout_ms);
      meshrt::run_inproc(world_size, run_rank, options);
    } else {
      meshrt::InitOptions options = meshrt::init_options_from_env();
      options.timeout = std::chrono::milliseconds(timeout_ms);
      run_rank(*meshrt::init(options));
    }
  } catch (const meshrt::Error& e) {
    std::fprintf(stderr, "hang: %s\n", e.what());
    return 1;
  }
  return 0;
}
