// meshrt over MPI against raw MPI_Allreduce, in interleaved rounds in one run (the order
// alternates from round to round): 8-byte latency and busbw at 1 MiB and 16 MiB. Run it under
// mpirun, e.g.
//   mpirun -np 2 --allow-run-as-root --mca btl self,vader build-release/bench/mpi_bench
// Arguments: [ROUNDS (9)] [latency]. Rank 0 prints, per size, the medians of both and the paired
// ratios (min / median / max) of meshrt's time over raw MPI's (latency: also the added time), with
// the flight recorder on.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/mpi_timing.h"
#include "mesh/meshrt.h"

using meshrt::bench::median;
using meshrt::bench::time_per_op;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  // "latency": the 8-byte size only (for profiling the per-op path).
  const bool latency_only = argc > 2 && std::string(argv[2]) == "latency";
  auto world = meshrt::init();  // MPI backend under mpirun; initialises MPI.
  const int n = world->size();
  const int rank = world->rank();
  struct Size {
    size_t bytes;
    int iters;
  };
  const Size sizes[] = {{8, 20000}, {1 << 20, 200}, {16 << 20, 20}};
  if (rank == 0) {
    fmt::print("# {} ranks, {} rounds, {}; flight recorder on; blocking fast path max {} B\n", n,
               rounds, world->backend_name(),
               std::getenv("MESHRT_MPI_BLOCKING_MAX_BYTES")
                   ? std::getenv("MESHRT_MPI_BLOCKING_MAX_BYTES")
                   : "65536 (default)");
  }
  for (const Size& s : sizes) {
    if (latency_only && s.bytes > 64) break;
    std::vector<float> a(s.bytes / sizeof(float), 1.0f), b(a.size(), 1.0f);
    auto raw = [&] {
      MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(a.size()), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    };
    auto mesh = [&] { world->all_reduce(meshrt::view(b))->wait(); };
    // Warm both paths (connections, page faults, buffers).
    time_per_op(std::max(10, s.iters / 10), raw);
    time_per_op(std::max(10, s.iters / 10), mesh);
    std::vector<double> t_raw, t_mesh, ratio, added;
    for (int r = 0; r < rounds; ++r) {
      double tr, tm;
      if (r % 2 == 0) {
        tr = time_per_op(s.iters, raw);
        tm = time_per_op(s.iters, mesh);
      } else {
        tm = time_per_op(s.iters, mesh);
        tr = time_per_op(s.iters, raw);
      }
      t_raw.push_back(tr);
      t_mesh.push_back(tm);
      ratio.push_back(tm / tr);
      added.push_back((tm - tr) * 1e6);
    }
    if (rank != 0) continue;
    std::sort(ratio.begin(), ratio.end());
    std::sort(added.begin(), added.end());
    const double bus = 2.0 * (n - 1) / n * static_cast<double>(s.bytes);
    if (s.bytes <= 64) {
      fmt::print(
          "all_reduce {:>9} B  latency raw {:.3f} us  meshrt {:.3f} us  time ratio "
          "{:.3f} / {:.3f} / {:.3f}  added {:.3f} / {:.3f} / {:.3f} us\n",
          s.bytes, median(t_raw) * 1e6, median(t_mesh) * 1e6, ratio.front(), median(ratio),
          ratio.back(), added.front(), median(added), added.back());
    } else {
      // busbw ratio = raw time / meshrt time.
      fmt::print(
          "all_reduce {:>9} B  busbw raw {:.3f} GB/s  meshrt {:.3f} GB/s  busbw ratio "
          "{:.3f} / {:.3f} / {:.3f}\n",
          s.bytes, bus / median(t_raw) / 1e9, bus / median(t_mesh) / 1e9, 1 / ratio.back(),
          1 / median(ratio), 1 / ratio.front());
    }
  }
  world->barrier()->wait();
  return 0;
}
