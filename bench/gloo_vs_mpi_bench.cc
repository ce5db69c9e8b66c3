// meshrt's default backend (Gloo: shared memory between the ranks of one host) against raw MPI
// on the same ranks, in the same processes, in interleaved rounds: all_reduce, all_gather,
// reduce_scatter, broadcast and sendrecv (each rank sends to rank + 1 and receives from rank - 1:
// MPI_Sendrecv against a batch of one send and one recv). Run it under mpirun with Gloo chosen
// and a store address, e.g.
//   mpirun -np 2 --allow-run-as-root --mca btl self,vader -x MESHRT_BACKEND=gloo
//     -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29611 build-release/bench/gloo_vs_mpi_bench 9
// (one command line).
// Arguments: [ROUNDS (9)] [OPS (all, or a comma list)]. Rank 0 prints per op and size the median
// time per op of each (the slowest rank's mean over the round's ops) and the paired ratios
// meshrt / MPI (min / median / max). Every op's result is checked on every rank before timing;
// a wrong element exits 1.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/mpi_timing.h"
#include "mesh/meshrt.h"

namespace {

using meshrt::bench::median;
using meshrt::bench::time_per_op;

// One op at one size, both ways, on buffers of its own.
struct Case {
  std::function<void()> raw;
  std::function<void()> mesh;
  // What one call of each leaves to check: both outputs, element-wise against want(i).
  struct {
    const float* raw = nullptr;
    const float* mesh = nullptr;
    size_t length = 0;
  } outputs;
  std::function<float(size_t)> want;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const std::string only = argc > 2 ? argv[2] : "all";
  auto world = meshrt::init();
  const int n = world->size();
  const int rank = world->rank();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  if (rank == 0) {
    fmt::print("# {} ranks, {} rounds; meshrt backend {} (flight recorder on) vs raw MPI\n", n,
               rounds, world->backend_name());
  }
  const std::vector<std::string> ops{"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                     "sendrecv"};
  const size_t sizes[] = {8, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  int wrong = 0;
  for (const std::string& op : ops) {
    if (only != "all" && ("," + only + ",").find("," + op + ",") == std::string::npos) continue;
    for (const size_t bytes : sizes) {
      // bytes: the message size of nccl-tests (the whole output of all_gather, the whole input
      // of reduce_scatter), so that each rank's block is bytes / n.
      const size_t count = bytes / sizeof(float);
      const size_t block = count / static_cast<size_t>(n);
      if (block == 0) continue;
      // Rank r's input element i; what a sum over the ranks makes of element i.
      auto value = [](int r, size_t i) {
        return static_cast<float>(r * 7 + static_cast<int>(i % 97));
      };
      auto summed = [&](size_t i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += value(r, i);
        return sum;
      };
      std::vector<float> ra(count), rb(count, -1), ma(count), mb(count, -1);
      for (size_t i = 0; i < count; ++i) ra[i] = ma[i] = value(rank, i);
      const int c = static_cast<int>(count), b = static_cast<int>(block);
      Case k;
      if (op == "all_reduce") {
        k.raw = [&] {
          MPI_Allreduce(MPI_IN_PLACE, ra.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        };
        k.mesh = [&] { world->all_reduce(meshrt::view(ma))->wait(); };
        k.outputs = {ra.data(), ma.data(), count};
        k.want = summed;
      } else if (op == "all_gather") {
        k.raw = [&] {
          MPI_Allgather(ra.data(), b, MPI_FLOAT, rb.data(), b, MPI_FLOAT, MPI_COMM_WORLD);
        };
        k.mesh = [&] {
          world->all_gather(meshrt::view(ma.data(), block), meshrt::view(mb.data(), block * n))
              ->wait();
        };
        k.outputs = {rb.data(), mb.data(), block * static_cast<size_t>(n)};
        k.want = [&](size_t i) { return value(static_cast<int>(i / block), i % block); };
      } else if (op == "reduce_scatter") {
        k.raw = [&] {
          MPI_Reduce_scatter_block(ra.data(), rb.data(), b, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        };
        k.mesh = [&] {
          world->reduce_scatter(meshrt::view(ma.data(), block * n), meshrt::view(mb.data(), block))
              ->wait();
        };
        k.outputs = {rb.data(), mb.data(), block};
        k.want = [&](size_t i) { return summed(static_cast<size_t>(rank) * block + i); };
      } else if (op == "broadcast") {
        k.raw = [&] { MPI_Bcast(ra.data(), c, MPI_FLOAT, 0, MPI_COMM_WORLD); };
        k.mesh = [&] { world->broadcast(meshrt::view(ma), 0)->wait(); };
        k.outputs = {ra.data(), ma.data(), count};
        k.want = [&](size_t i) { return value(0, i); };
      } else {
        k.raw = [&] {
          MPI_Sendrecv(ra.data(), c, MPI_FLOAT, next, 0, rb.data(), c, MPI_FLOAT, prev, 0,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        };
        const meshrt::P2POp batch[] = {{meshrt::P2POp::Dir::kSend, meshrt::view(ma), next, 0},
                                       {meshrt::P2POp::Dir::kRecv, meshrt::view(mb), prev, 0}};
        k.mesh = [&] { world->batch_isend_irecv(batch)->wait(); };
        k.outputs = {rb.data(), mb.data(), count};
        k.want = [&](size_t i) { return value(prev, i); };
      }
      k.raw();
      k.mesh();
      int bad = 0, any_bad = 0;
      for (size_t i = 0; i < k.outputs.length; ++i) {
        const float want = k.want(i);
        bad |= k.outputs.raw[i] != want || k.outputs.mesh[i] != want;
      }
      MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      wrong += any_bad;
      // About 20 ms of work per timed call at the rate of a memcpy, at least 10 ops.
      const int iters = static_cast<int>(
          std::clamp<size_t>((size_t{200} << 20) / (bytes * 10 + 4096), 10, 20000));
      time_per_op(std::max(10, iters / 10), k.raw);  // Warm both paths.
      time_per_op(std::max(10, iters / 10), k.mesh);
      std::vector<double> t_raw, t_mesh, ratio;
      for (int r = 0; r < rounds; ++r) {
        double tr = 0, tm = 0;
        if (r % 2 == 0) {
          tr = time_per_op(iters, k.raw);
          tm = time_per_op(iters, k.mesh);
        } else {
          tm = time_per_op(iters, k.mesh);
          tr = time_per_op(iters, k.raw);
        }
        t_raw.push_back(tr);
        t_mesh.push_back(tm);
        ratio.push_back(tm / tr);
      }
      if (rank != 0) continue;
      std::sort(ratio.begin(), ratio.end());
      fmt::print(
          "{:<15} {:>9} B  MPI {:>10.2f} us  meshrt {:>10.2f} us  meshrt/MPI time "
          "{:.2f} / {:.2f} / {:.2f}{}\n",
          op, bytes, median(t_raw) * 1e6, median(t_mesh) * 1e6, ratio.front(), median(ratio),
          ratio.back(), any_bad ? "  WRONG RESULT" : "");
      std::fflush(stdout);
    }
  }
  world->barrier()->wait();
  world.reset();
  MPI_Finalize();
  return wrong == 0 ? 0 : 1;
}
