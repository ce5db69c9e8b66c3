// One rank of the multi-process Gloo tests. Joins the job from torchrun's environment, runs the
// scenario named by argv[1], prints failures and exits 0 (all right) or 1 (a check failed).
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mesh/meshrt.h"
#include "tests/collective_checks.h"

namespace {

// Float sums depend on their order, yet every rank must end an all_reduce with the same bits, or
// the replicas of one parameter drift apart. Values of mixed signs spanning 1e-3 to 1e4 make
// the sum of nearly any two orders differ. Returns the failures.
std::vector<std::string> check_same_bits_everywhere(meshrt::Communicator& world) {
  std::mt19937 rng(static_cast<unsigned>(world.rank()) + 1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = unit(rng) * std::pow(10.0f, float(i % 8) - 3.0f);
  world.all_reduce(meshrt::view(x))->wait();
  std::vector<float> all(x.size() * static_cast<size_t>(world.size()));
  world.all_gather(meshrt::view(x), meshrt::view(all))->wait();
  std::vector<std::string> failures;
  for (int r = 0; r < world.size(); ++r) {
    if (std::memcmp(all.data() + x.size() * static_cast<size_t>(r), x.data(),
                    x.size() * sizeof(float)) != 0) {
      failures.push_back(
          fmt::format("rank {}: all_reduce of 1000 floats: rank {}'s result has "
                      "other bits than this rank's",
                      world.rank(), r));
    }
  }
  return failures;
}

// An all_reduce of a size that takes many exchanges and, across hosts, the striped path (parts
// of 1/L of the buffer per local rank, here not dividing evenly), summed and averaged in place.
std::vector<std::string> check_large_all_reduce(meshrt::Communicator& world) {
  const size_t count = 3 * 100003;
  const double n = world.size();
  std::vector<float> sum(count);
  std::vector<double> avg(count);
  for (size_t i = 0; i < count; ++i) {
    sum[i] = static_cast<float>((world.rank() + 1) * static_cast<int>(i % 7));
    avg[i] = sum[i];
  }
  world.all_reduce(meshrt::view(sum))->wait();
  world.all_reduce(meshrt::view(avg), meshrt::ReduceOp::kAvg)->wait();
  std::vector<std::string> failures;
  for (size_t i = 0; i < count && failures.size() < 5; ++i) {
    const double want = static_cast<double>(i % 7) * n * (n + 1) / 2;
    if (sum[i] != static_cast<float>(want) || avg[i] != want / n) {
      failures.push_back(
          fmt::format("rank {}: large all_reduce element {}: sum {} avg {}, want {} {}",
                      world.rank(), i, sum[i], avg[i], want, want / n));
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "collectives";
  // "collectives_slot_mismatch": rank 1 asks for another slot size than its peers, so that the
  // communicator must fall back to TCP on every rank alike; then the same checks.
  const char* rank_env = std::getenv("RANK");
  // TEST_SIMULATED_HOSTS="a,a,b,b": rank r plays host number r of the list (MESHRT_SIMULATED_HOST).
  if (const char* hosts = std::getenv("TEST_SIMULATED_HOSTS"); hosts != nullptr && rank_env) {
    std::string list = std::string(hosts) + ",";
    for (int r = std::atoi(rank_env); r > 0 && list.find(',') != std::string::npos; --r) {
      list.erase(0, list.find(',') + 1);
    }
    ::setenv("MESHRT_SIMULATED_HOST", list.substr(0, list.find(',')).c_str(), 1);
  }
  if (scenario == "collectives_slot_mismatch" && rank_env != nullptr &&
      std::string(rank_env) == "1") {
    ::setenv("MESHRT_GLOO_SHM_SLOT_BYTES", "128", 1);
  }
  try {
    auto world = meshrt::init();
    if (scenario == "collectives" || scenario == "collectives_slot_mismatch") {
      auto failures = meshrt::testing::check_all_collectives(*world);
      auto more = meshrt::testing::check_p2p_and_split(*world);
      failures.insert(failures.end(), more.begin(), more.end());
      more = check_same_bits_everywhere(*world);
      failures.insert(failures.end(), more.begin(), more.end());
      more = check_large_all_reduce(*world);
      failures.insert(failures.end(), more.begin(), more.end());
      // Rank 0 hosts the store: nobody leaves while a peer may still be connecting through it.
      world->barrier()->wait();
      return meshrt::testing::report_failures(failures);
    }
    if (scenario == "peer_dies") {
      // The last rank dies between two collectives; the others must fail with a clear error
      // within the op timeout (exit 3), never hang or abort.
      std::vector<float> x(1024, 1.0f);
      world->all_reduce(meshrt::view(x))->wait();
      if (world->rank() == world->size() - 1) _exit(9);
      const auto start = std::chrono::steady_clock::now();
      try {
        world
            ->all_reduce(meshrt::view(x), meshrt::ReduceOp::kSum, {std::chrono::milliseconds(4000)})
            ->wait();
      } catch (const meshrt::Error& e) {
        // How long the survivor took to see the death: the figure docs/reliability.md quotes.
        std::fprintf(stderr, "EXPECTED after %lld ms: %s\n",
                     static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::steady_clock::now() - start)
                                                .count()),
                     e.what());
        return 3;
      }
      std::fprintf(stderr, "FAIL rank %d: all_reduce succeeded after a peer died\n", world->rank());
      return 1;
    }
    if (scenario == "scribbled") {
      // Sums ranks in a loop for up to 20 s while the test, as a process of the same user,
      // writes random bytes over the group's shared-memory slots. Wrong sums are what such a
      // writer can cause unseen; the stamp check must end the loop with its own error, never a
      // "different collective" whose number is garbage.
      int wrong = 0;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (long i = 0; std::chrono::steady_clock::now() < until; ++i) {
        std::vector<int32_t> x(256, world->rank() + 1);
        try {
          world->all_reduce(meshrt::view(x))->wait();
        } catch (const meshrt::Error& e) {
          std::fprintf(stderr, "EXPECTED after %ld ops (%d wrong): %s\n", i, wrong, e.what());
          return 3;
        }
        const int32_t want = world->size() * (world->size() + 1) / 2;
        for (int32_t v : x) wrong += v != want;
      }
      std::fprintf(stderr, "FAIL rank %d: 20 s of ops, no error (%d wrong elements)\n",
                   world->rank(), wrong);
      return 1;
    }
    if (scenario == "abort") {
      // Rank 0 enters a small all_reduce that rank 1 never joins, and another thread aborts
      // rank 0's communicator 200 ms later. Through shared memory the op fails at once with
      // kAborted (over TCP it would run to its 20 s timeout). Rank 1 stays alive meanwhile, so
      // that the op cannot fail for a peer that exited.
      if (world->rank() == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return 0;
      }
      std::vector<float> x(8, 1.0f);
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        world->abort();
      });
      const auto start = std::chrono::steady_clock::now();
      int rc = 1;
      try {
        world->all_reduce(meshrt::view(x))->wait();
        std::fprintf(stderr, "FAIL: the all_reduce completed without rank 1\n");
      } catch (const meshrt::Error& e) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        std::printf("failed after %lld ms: %s\n", static_cast<long long>(ms), e.what());
        rc = e.code() == meshrt::ErrorCode::kAborted && ms < 2000 ? 0 : 1;
      }
      aborter.join();
      return rc;
    }
    if (scenario == "p2p_stress") {
      // Thousands of ring exchanges (each rank sends right, receives from the left) of sizes that
      // fit a header's piece, fill the ring and wrap it, each checked: a receiver that misreads
      // a header being written, or a sender that overwrites unread bytes, shows here.
      const int n = world->size(), rank = world->rank();
      const size_t sizes[] = {1, 7, 33, 200, 3001, 20001};
      int wrong = 0;
      for (int i = 0; i < 1200; ++i) {
        const size_t count = sizes[static_cast<size_t>(i) % std::size(sizes)];
        std::vector<int32_t> out(count), in(count, -1);
        for (size_t k = 0; k < count; ++k) out[k] = static_cast<int32_t>(rank * 1000003 + i + k);
        const int right = (rank + 1) % n, left = (rank + n - 1) % n;
        const std::vector<meshrt::P2POp> ops{
            {meshrt::P2POp::Dir::kSend, meshrt::view(out), right, i % 3},
            {meshrt::P2POp::Dir::kRecv, meshrt::view(in), left, i % 3}};
        world->batch_isend_irecv(ops)->wait();
        for (size_t k = 0; k < count; ++k) {
          wrong += in[k] != static_cast<int32_t>(left * 1000003 + i + k);
        }
      }
      std::printf("p2p_stress wrong=%d\n", wrong);
      return wrong == 0 ? 0 : 1;
    }
    if (scenario == "p2p_withdrawn") {
      // Rank 0 sends 4 MiB (by reference: MESHRT_GLOO_SINGLE_COPY=always) with a 500 ms timeout;
      // rank 1 receives it only after 1.5 s. Rank 0 times out (exit 3), and its failed send must
      // not be read afterwards: rank 1 fails with kPeerFailure (exit 4), not with the bytes of a
      // buffer its owner got back.
      std::vector<float> large(1 << 20, 1.0f);
      try {
        if (world->rank() == 0) {
          world->send(meshrt::view(large), 1, 0, {std::chrono::milliseconds(500)})->wait();
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          world->recv(meshrt::view(large), 0, 0, {std::chrono::milliseconds(5000)})->wait();
        }
        std::fprintf(stderr, "FAIL rank %d: the p2p op completed\n", world->rank());
        return 1;
      } catch (const meshrt::Error& e) {
        std::printf("failed: %s\n", e.what());
        if (world->rank() == 0) return e.code() == meshrt::ErrorCode::kTimeout ? 3 : 1;
        return e.code() == meshrt::ErrorCode::kPeerFailure ? 4 : 1;
      }
    }
    if (scenario.starts_with("p2p_")) {
      // How a send or recv through the shared-memory mailboxes ends when its peer does not
      // come: "p2p_abort", rank 0's recv from rank 1 (alive, silent) is aborted by another thread
      // after 200 ms: kAborted at once (exit 0); "p2p_timeout", the same recv with a 1 s timeout:
      // kTimeout naming the recv (exit 3); "p2p_peer_dies" (3 ranks), rank 2 exits while rank 0
      // waits to receive from it and rank 1 sends it 4 MiB (by reference; through the ring, more
      // than it holds, with MESHRT_GLOO_SINGLE_COPY=never): both fail with kPeerFailure
      // (exit 3) well before their 20 s timeout.
      const int rank = world->rank();
      std::vector<float> small(8, 1.0f), large(1 << 20, 1.0f);
      if (scenario == "p2p_peer_dies") {
        world->all_reduce(meshrt::view(small))->wait();
        if (rank == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          _exit(9);
        }
      } else if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return 0;
      }
      std::thread aborter;
      if (scenario == "p2p_abort") {
        aborter = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          world->abort();
        });
      }
      const meshrt::OpOptions options{
          std::chrono::milliseconds(scenario == "p2p_timeout" ? 1000 : 20000)};
      const int peer = scenario == "p2p_peer_dies" ? 2 : 1;
      const auto start = std::chrono::steady_clock::now();
      int rc = 1;
      try {
        if (rank == 1) {
          world->send(meshrt::view(large), peer, 0, options)->wait();
        } else {
          world->recv(meshrt::view(small), peer, 0, options)->wait();
        }
        std::fprintf(stderr, "FAIL rank %d: the p2p op completed\n", rank);
      } catch (const meshrt::Error& e) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        std::printf("failed after %lld ms: %s\n", static_cast<long long>(ms), e.what());
        rc = scenario == "p2p_abort"
                 ? (e.code() == meshrt::ErrorCode::kAborted && ms < 2000 ? 0 : 1)
                 : 3;
      }
      if (aborter.joinable()) aborter.join();
      return rc;
    }
    if (scenario == "size_mismatch") {
      // Rank 1 receives 4 floats where rank 0 sends 8, then 8 where rank 0 sends 4, then an
      // uneven all_to_all whose splits disagree. Each time rank 1 fails with invalid_argument
      // (rank 0 too in the all_to_all through shared memory) and nobody dies; a final
      // all_reduce proves the communicator is still in step.
      int failures = 0;
      std::vector<float> eight(8, 1.0f), four(4, 2.0f);
      for (int round = 0; round < 2; ++round) {
        try {
          if (world->rank() == 0) {
            world->send(meshrt::view(round == 0 ? eight : four), 1)->wait();
          } else {
            world->recv(meshrt::view(round == 0 ? four : eight), 0)->wait();
          }
        } catch (const meshrt::Error& e) {
          std::fprintf(stderr, "EXPECTED %s\n", e.what());
          failures += e.code() == meshrt::ErrorCode::kInvalidArgument;
        }
      }
      std::vector<float> in(4, 1.0f), out(4);
      const std::vector<size_t> sends{2, 2};
      const std::vector<size_t> wants = world->rank() == 1 ? std::vector<size_t>{3, 1} : sends;
      try {
        world->all_to_all(meshrt::view(in), sends, meshrt::view(out), wants)->wait();
      } catch (const meshrt::Error& e) {
        std::fprintf(stderr, "EXPECTED %s\n", e.what());
        failures += e.code() == meshrt::ErrorCode::kInvalidArgument;
      }
      std::vector<int32_t> x{1};
      world->all_reduce(meshrt::view(x))->wait();
      std::printf("failures=%d sum=%d\n", failures, x[0]);
      return 0;
    }
    if (scenario == "collective_mismatch") {
      // Rank 1 passes 16 floats (argv[2] "count") or 8 int32s ("dtype") where rank 0 passes 8
      // floats. Gloo would abort rank 0 from its own thread (the first case) or reduce garbage
      // (the second); instead every rank fails with both signatures: under the abort policy the
      // watchdog dumps and exits, under throw the error reaches wait() (exit 3).
      const std::string what = argc > 2 ? argv[2] : "count";
      std::vector<float> x(world->rank() == 1 && what == "count" ? 16 : 8, 1.0f);
      std::vector<int32_t> y(8, 1);
      try {
        world->all_reduce(world->rank() == 1 && what == "dtype" ? meshrt::view(y) : meshrt::view(x))
            ->wait();
      } catch (const meshrt::Error& e) {
        std::fprintf(stderr, "EXPECTED %s\n", e.what());
        return 3;
      }
      std::fprintf(stderr, "FAIL rank %d: mismatched all_reduce succeeded\n", world->rank());
      return 1;
    }
    if (scenario == "subgroup_timeout") {
      // A 2x2 dp x tp mesh; rank 3 skips a tp all_reduce, so rank 2 (tp group {2, 3}) times out
      // through shared memory: its error must name the peer by global and group rank.
      auto mesh = meshrt::init_device_mesh({2, 2}, {"dp", "tp"});
      if (world->rank() < 2) return 0;
      if (world->rank() == 3) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return 0;
      }
      std::vector<float> x(8, 1.0f);
      try {
        mesh->comm("tp")
            .all_reduce(meshrt::view(x), meshrt::ReduceOp::kSum, {std::chrono::milliseconds(1000)})
            ->wait();
      } catch (const meshrt::Error& e) {
        std::fprintf(stderr, "EXPECTED %s\n", e.what());
        return 3;
      }
      return 1;
    }
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR %s\n", e.what());
    return 4;
  }
}
