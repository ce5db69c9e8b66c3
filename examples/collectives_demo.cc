// The demo: every rank joins the job from torchrun-style variables, builds a 2 x (N/2) "dp x tp"
// DeviceMesh, runs collectives on each dim's communicator, checks every element, and rank 0
// prints what ran where and how long it took, then the comm logger's summary (run with
// MESHRT_COMMS_LOG=1) and the scope tree at noise level 0. Exit status 1 on a wrong result.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "trace/run_report.h"
#include "trace/scope.h"
#include "trace/scope_tree.h"

namespace {

struct Check {
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "WRONG %s\n", what.c_str());
    }
  }
};

}  // namespace

int main() {
  try {
    meshrt::trace::ScopeTree::instance().enable();
    auto world = meshrt::init();
    const int n = world->size();
    const int r = world->rank();
    if (n % 2 != 0) {
      std::fprintf(stderr, "collectives_demo needs an even number of ranks, got %d\n", n);
      return 2;
    }
    // Ranks [0..n/2) and [n/2..n) form the two tp groups; ranks r and r + n/2 form a dp group.
    auto mesh = meshrt::init_device_mesh({2, n / 2}, {"dp", "tp"});
    meshrt::Communicator* tp = &mesh->comm("tp");
    meshrt::Communicator* dp = &mesh->comm("dp");
    const int tp_size = tp->size();
    Check check;
    std::vector<meshrt::WorkHandle> done;

    // A few steps, so that the comm logger's summary has rows worth reading.
    for (int step = 0; step < 20; ++step) {
      meshrt::trace::Scope scope("step", meshrt::trace::Phase::kForward);
      std::vector<float> act(4096, 1.0f);
      tp->all_reduce(meshrt::view(act))->wait();
      meshrt::trace::Scope backward("grads", meshrt::trace::Phase::kBackward);
      std::vector<float> grads(16384, 1.0f);
      dp->all_reduce(meshrt::view(grads), meshrt::ReduceOp::kAvg)->wait();
    }

    // Gradient all_reduce over the world (avg), as data parallelism would do.
    std::vector<float> grad(1024, static_cast<float>(r));
    done.push_back(world->all_reduce(meshrt::view(grad), meshrt::ReduceOp::kAvg));
    done.back()->wait();
    check.expect(grad[7] == (n - 1) / 2.0f, fmt::format("world all_reduce avg: {}", grad[7]));

    // Tensor-parallel activations: all_gather along tp.
    std::vector<float> shard(256, static_cast<float>(tp->rank()));
    std::vector<float> full(256 * tp_size);
    done.push_back(tp->all_gather(meshrt::view(shard), meshrt::view(full)));
    done.back()->wait();
    for (int j = 0; j < tp_size; ++j) {
      check.expect(full[256 * j + 3] == j, fmt::format("tp all_gather block {}", j));
    }

    // Sharded optimizer: reduce_scatter along dp, each dp rank keeps half.
    std::vector<double> g(2 * 512, 1.0 + dp->rank());
    std::vector<double> mine(512);
    done.push_back(dp->reduce_scatter(meshrt::view(g), meshrt::view(mine)));
    done.back()->wait();
    check.expect(mine[0] == 3.0, fmt::format("dp reduce_scatter: {}", mine[0]));

    // Expert routing: all_to_all over the world.
    std::vector<int32_t> send(4 * n), recv(4 * n);
    for (int i = 0; i < 4 * n; ++i) send[i] = 1000 * r + i / 4;
    done.push_back(world->all_to_all(meshrt::view(send), meshrt::view(recv)));
    done.back()->wait();
    for (int j = 0; j < n; ++j) {
      check.expect(recv[4 * j] == 1000 * j + r, fmt::format("all_to_all block {}", j));
    }

    // Parameters from rank 0, then a pipeline-style ring of sends and receives.
    std::vector<int64_t> params(64, r == 0 ? 42 : 0);
    done.push_back(world->broadcast(meshrt::view(params), 0));
    done.back()->wait();
    check.expect(params[63] == 42, "broadcast");
    std::vector<float> act(128, static_cast<float>(r)), prev(128);
    const meshrt::P2POp ring[] = {
        {meshrt::P2POp::Dir::kSend, meshrt::view(act), (r + 1) % n, 0},
        {meshrt::P2POp::Dir::kRecv, meshrt::view(prev), (r + n - 1) % n, 0}};
    done.push_back(world->batch_isend_irecv(ring));
    done.back()->wait();
    check.expect(prev[0] == (r + n - 1) % n, "ring send/recv");

    // Every rank reports its count of wrong elements; rank 0 prints the table.
    std::vector<int32_t> wrong{check.failures};
    world->all_reduce(meshrt::view(wrong))->wait();
    if (r == 0) {
      std::printf("%-16s %-10s %6s %10s %12s\n", "op", "comm", "group", "bytes", "latency_us");
      for (const auto& w : done) {
        const auto rec = w->record();
        std::printf("%-16s %-10s %6zu %10llu %12.1f\n", std::string(rec.op).c_str(),
                    rec.comm->name.c_str(), rec.comm->global_ranks.size(),
                    static_cast<unsigned long long>(rec.bytes), (rec.end_ns - rec.start_ns) / 1e3);
      }
      std::printf("%d ranks, %s: %s\n", n, world->backend_version().c_str(),
                  wrong[0] == 0 ? "all results correct" : "WRONG RESULTS");
      std::printf(
          "%s",
          meshrt::trace::run_report(world->global_rank(), isatty(STDOUT_FILENO) != 0).c_str());
    }
    world->barrier()->wait();
    return wrong[0] == 0 ? 0 : 1;
  } catch (const meshrt::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
