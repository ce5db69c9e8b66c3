// Host overhead per op on a GPU: raw ncclAllReduce of 8 bytes against meshrt's
// `all_reduce(view)->wait()` (validation, record, flight recorder, events, pending op), both at
// world size 1 in this process, on one non-blocking caller stream. Host time to launch: ops are
// issued back to back in chunks of 100, the stream synchronised between chunks outside the timed
// region (so a full launch queue never turns host time into device time). Raw and meshrt batches
// interleave (7 rounds, order rotated each round, as ../shared/reference/measuring.md asks):
// figures are per-side medians and the paired median of the per-round difference.
//
//   build/bench/nccl_bench [iterations]   (a GPU machine; see docs/gpu.md; default 20000)
//
// `iterations`: ops per series, split over the 7 rounds. Four series: in-place sum (meshrt's
// all_reduce is in place only, so both sides are; at world size 1 NCCL runs it as a no-op, so
// this is the pure host path) and in-place avg (NCCL launches its one-rank kernel: the case of
// every real collective), each raw and meshrt. The raw communicator is non-blocking, as meshrt's.
// One run per setting: MESHRT_NCCL_CHECK_POINTERS, MESHRT_NCCL_USE_CALLER_STREAM,
// MESHRT_ENABLE_TIMING are read by meshrt and echoed on the settings line; the flight recorder is
// always on. MESHRT_CUDA_DEVICE picks the device for both sides (default 0).
//
// Prints, on stdout (ns are host ns per op; "(...)" holds details):
//   nccl_bench device <n> "<name>" sm_<major><minor> pci <bus id>
//   nccl_bench versions cuda_runtime <n> cuda_driver <n> nccl <a.b.c> nccl_header <a.b.c>
//   nccl_bench settings MESHRT_NCCL_CHECK_POINTERS=<v|unset> MESHRT_NCCL_USE_CALLER_STREAM=<..>
//       MESHRT_ENABLE_TIMING=<..> flight_recorder=on iterations=<n> rounds=7 chunk=100
//   nccl_bench cold_pool_ns <c> (...)        the first 200 meshrt ops after init (sum)
//   nccl_bench raw_ns <x> (...)              median over rounds, sum
//   nccl_bench meshrt_ns <y> (...)
//   nccl_bench overhead_ns <d> (target <= 1000) (...)   paired median of meshrt - raw, sum
//   nccl_bench raw_avg_ns / meshrt_avg_ns / overhead_avg_ns: the same for avg
//   nccl_bench raw_streams_ns / meshrt_streams_ns / overhead_streams_ns: sum, against the raw
//       call with the stream handling every runtime with a stream of its own adds (the floor)
//   nccl_bench raw_launch_only_ns / meshrt_launch_only_ns / overhead_launch_only_ns: sum, meshrt
//       without wait() (the Work dropped), so that wait()'s share shows
//   nccl_bench results ok                    (else WRONG, exit 1)
// Without a usable device: "no CUDA device: <reason>" on stderr, exit 77. A failure: its message on
// stderr, exit 1. A hang: exit 124 after 60 s.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "bench/gpu_bench_util.h"
#include "mesh/meshrt.h"
#include "runtime/backends/nccl/cuda_stream.h"

namespace {

constexpr int kRounds = 7;
// Ops per untimed synchronisation: far below CUDA's pending-launch limit (~1000) even with
// meshrt's two event commands per op.
constexpr int kChunk = 100;
constexpr int kColdOps = 200;
constexpr int kWarmupOps = 1000;
constexpr unsigned kDeadlineSeconds = 60;
constexpr char kTool[] = "nccl_bench";

using meshrt::bench::check_cuda;
using meshrt::bench::check_nccl;
using meshrt::bench::nonblocking;

// How nccl_bench words a call NCCL never finished, kept as logs of earlier runs have it.

std::string env_text(const char* name) {
  const char* value = std::getenv(name);
  return std::string(name) + "=" + (value != nullptr ? value : "unset");
}

// Host ns per op of `ops` calls of `launch`, timed in chunks of kChunk with `sync` (untimed)
// after each chunk.
double ns_per_op(int ops, const std::function<void()>& launch, const std::function<void()>& sync) {
  double total = 0;
  for (int done = 0; done < ops;) {
    const int n = std::min(kChunk, ops - done);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) launch();
    const auto t1 = std::chrono::steady_clock::now();
    total += std::chrono::duration<double, std::nano>(t1 - t0).count();
    sync();
    done += n;
  }
  return total / ops;
}

struct Stats {
  double min = 0, median = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {v.front(), median, v.back()};
}

// The world-size-1 sum or average of `input` is `input`, exactly (x * 1.0f == x).
bool holds_input(const float* device_buffer, const float (&input)[2], const char* side) {
  float got[2] = {};
  check_cuda(kTool, cudaMemcpy(got, device_buffer, sizeof(got), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
  if (std::memcmp(got, input, sizeof(got)) == 0) return true;
  std::fprintf(stderr, "nccl_bench: wrong %s result: %g %g, expected %g %g\n", side, got[0], got[1],
               input[0], input[1]);
  return false;
}

int run(int iterations) {
  if (!meshrt::bench::has_cuda_device()) return meshrt::bench::kExitNoDevice;
  // meshrt picks MESHRT_CUDA_DEVICE (else LOCAL_RANK, here 0): the raw side follows it.
  const char* device_env = std::getenv("MESHRT_CUDA_DEVICE");
  const int device = device_env != nullptr ? std::atoi(device_env) : 0;
  meshrt::bench::use_device(kTool, device);
  meshrt::bench::print_banner(kTool, device);
  const int per_round = std::max(1, iterations / kRounds);
  std::printf("nccl_bench settings %s %s %s flight_recorder=on iterations=%d rounds=%d chunk=%d\n",
              env_text("MESHRT_NCCL_CHECK_POINTERS").c_str(),
              env_text("MESHRT_NCCL_USE_CALLER_STREAM").c_str(),
              env_text("MESHRT_ENABLE_TIMING").c_str(), per_round * kRounds, kRounds, kChunk);

  // The caller's stream: a trainer's compute stream is non-blocking, like this one.
  cudaStream_t s = nullptr;
  check_cuda(kTool, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags");
  // Each side its own 8 bytes, so that each side's result is checked on its own.
  const float input[2] = {1.5f, -2.25f};
  float *raw_buf = nullptr, *mesh_buf = nullptr;
  check_cuda(kTool, cudaMalloc(&raw_buf, sizeof(input)), "cudaMalloc");
  check_cuda(kTool, cudaMalloc(&mesh_buf, sizeof(input)), "cudaMalloc");
  for (float* p : {raw_buf, mesh_buf}) {
    check_cuda(kTool, cudaMemcpy(p, input, sizeof(input), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  // A pageable cudaMemcpy may return before its DMA lands, and `s` does not wait for the legacy
  // stream.
  check_cuda(kTool, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::function<void()> sync = [&] {
    check_cuda(kTool, cudaStreamSynchronize(s), "cudaStreamSynchronize");
  };

  ncclUniqueId id;
  check_nccl(kTool, ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
  ncclComm_t raw = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // As meshrt's communicators.
  config.commName = "nccl_bench_raw";
  // `raw` is read only once the call has set it: an argument list has no evaluation order.
  const ncclResult_t init = ncclCommInitRankConfig(&raw, 1, id, 0, &config);
  nonblocking(kTool, init, "ncclCommInitRankConfig", raw);
  const auto raw_op = [&](ncclRedOp_t op) -> std::function<void()> {
    return [&, op] {
      nonblocking(kTool, ncclAllReduce(raw_buf, raw_buf, 2, ncclFloat32, op, raw, s),
                  "ncclAllReduce", raw);
    };
  };
  const std::function<void()> raw_sum = raw_op(ncclSum), raw_avg = raw_op(ncclAvg);
  // The floor of any runtime that runs NCCL on a stream of its own, as meshrt and PyTorch do: the
  // raw call plus ordering after the caller's stream (record + wait), the end event, and the
  // caller's stream waiting for it (Work::wait()).
  cudaStream_t comm_stream = nullptr;
  check_cuda(kTool, cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking),
             "cudaStreamCreate");
  cudaEvent_t order = nullptr, end = nullptr;
  check_cuda(kTool, cudaEventCreateWithFlags(&order, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(kTool, cudaEventCreateWithFlags(&end, cudaEventDisableTiming), "cudaEventCreate");
  const std::function<void()> raw_streams_sum = [&] {
    check_cuda(kTool, cudaEventRecord(order, s), "cudaEventRecord");
    check_cuda(kTool, cudaStreamWaitEvent(comm_stream, order, 0), "cudaStreamWaitEvent");
    nonblocking(kTool, ncclAllReduce(raw_buf, raw_buf, 2, ncclFloat32, ncclSum, raw, comm_stream),
                "ncclAllReduce", raw);
    check_cuda(kTool, cudaEventRecord(end, comm_stream), "cudaEventRecord");
    check_cuda(kTool, cudaStreamWaitEvent(s, end, 0), "cudaStreamWaitEvent");
  };
  // Loads NCCL's kernels into the context (CUDA loads modules lazily) before meshrt's cold ops,
  // so that those measure meshrt, not the first kernel launch of the process.
  (void)ns_per_op(kChunk, raw_sum, sync);
  (void)ns_per_op(kChunk, raw_avg, sync);

  meshrt::InitOptions options;
  options.rank = 0;
  options.world_size = 1;
  options.local_rank = 0;
  options.local_world_size = 1;
  options.backend = "nccl";
  options.live_monitor = false;  // A bench needs no status page, and the carry may lack it.
  options.run_id = "nccl_bench";
  std::shared_ptr<meshrt::Communicator> world = meshrt::init(options);
  meshrt::cuda::set_current_stream(s);
  const meshrt::BufferView view{mesh_buf, 2, meshrt::DType::kF32, meshrt::Device::cuda(device), {}};
  const auto mesh_op = [&](meshrt::ReduceOp op) -> std::function<void()> {
    return [&, op] { world->all_reduce(view, op)->wait(); };
  };
  const std::function<void()> mesh_sum = mesh_op(meshrt::ReduceOp::kSum),
                              mesh_avg = mesh_op(meshrt::ReduceOp::kAvg);
  // The launch alone (the Work dropped, no wait()): what wait() adds is the difference.
  const std::function<void()> mesh_launch_sum = [&] { (void)world->all_reduce(view); };

  // Cold: the first ops after init, before the event pool has anything to reuse. The first op
  // alone also pays meshrt's one-time costs (thread-locals, first record), so it is shown apart.
  const double first_ns = ns_per_op(1, mesh_sum, sync);
  const double rest_ns = ns_per_op(kColdOps - 1, mesh_sum, sync);
  const double cold_ns = (first_ns + rest_ns * (kColdOps - 1)) / kColdOps;
  std::printf(
      "nccl_bench cold_pool_ns %.0f (first %d meshrt ops after init, sum; op 1 %.0f ns, "
      "ops 2-%d %.0f ns)\n",
      cold_ns, kColdOps, first_ns, kColdOps, rest_ns);

  struct Series {
    const char* name;
    const std::function<void()>* launch;
    std::vector<double> ns;
  };
  std::array<Series, 6> series{{{"raw_sum", &raw_sum, {}},
                                {"meshrt_sum", &mesh_sum, {}},
                                {"raw_avg", &raw_avg, {}},
                                {"meshrt_avg", &mesh_avg, {}},
                                {"raw_streams_sum", &raw_streams_sum, {}},
                                {"meshrt_launch_sum", &mesh_launch_sum, {}}}};
  for (Series& x : series) (void)ns_per_op(kWarmupOps, *x.launch, sync);
  for (int round = 0; round < kRounds; ++round) {
    // Rotated so that no series always runs first or right after the same one.
    for (size_t k = 0; k < series.size(); ++k) {
      Series& x = series[(k + static_cast<size_t>(round)) % series.size()];
      x.ns.push_back(ns_per_op(per_round, *x.launch, sync));
    }
  }

  // Every op's outcome: a failed NCCL op shows as the communicator's error, a failed meshrt op in
  // a Work that waits for it on the host.
  world->all_reduce(view)->synchronize();
  sync();
  ncclResult_t state = ncclSuccess;
  check_nccl(kTool, ncclCommGetAsyncError(raw, &state), "ncclCommGetAsyncError", raw);
  check_nccl(kTool, state, "an ncclAllReduce (asynchronous error)", raw);
  const bool raw_ok = holds_input(raw_buf, input, "raw");
  const bool ok = holds_input(mesh_buf, input, "meshrt") && raw_ok;

  const auto report = [&](const char* key, const Series& raw_side, const Series& mesh_side) {
    const Stats r = stats(raw_side.ns), m = stats(mesh_side.ns);
    std::vector<double> diff, ratio;
    for (int i = 0; i < kRounds; ++i) {
      diff.push_back(mesh_side.ns[i] - raw_side.ns[i]);
      ratio.push_back(mesh_side.ns[i] / raw_side.ns[i]);
    }
    const Stats d = stats(diff), q = stats(ratio);
    std::printf("nccl_bench raw%s_ns %.0f (min %.0f max %.0f, %d rounds x %d ops)\n", key, r.median,
                r.min, r.max, kRounds, per_round);
    std::printf("nccl_bench meshrt%s_ns %.0f (min %.0f max %.0f, %d rounds x %d ops)\n", key,
                m.median, m.min, m.max, kRounds, per_round);
    std::printf(
        "nccl_bench overhead%s_ns %.0f (target <= 1000) (paired per round: min %.0f max "
        "%.0f; ratio median %.2f min %.2f max %.2f)\n",
        key, d.median, d.min, d.max, q.median, q.min, q.max);
  };
  report("", series[0], series[1]);
  report("_avg", series[2], series[3]);
  report("_streams", series[4], series[1]);
  report("_launch_only", series[0], series[5]);
  std::printf("nccl_bench results %s\n", ok ? "ok" : "WRONG");

  world.reset();
  cudaEventDestroy(order);
  cudaEventDestroy(end);
  cudaStreamDestroy(comm_stream);
  nonblocking(kTool, ncclCommFinalize(raw), "ncclCommFinalize", raw);
  check_nccl(kTool, ncclCommDestroy(raw), "ncclCommDestroy", nullptr);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Lines reach a log file as they are printed: a crash later keeps the figures before it.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (iterations < kRounds) {
    std::fprintf(stderr, "usage: nccl_bench [iterations, >= %d]\n", kRounds);
    return 2;
  }
  meshrt::bench::arm_deadline(kTool, kDeadlineSeconds);
  try {
    return run(iterations);
  } catch (const std::exception& e) {
    meshrt::bench::fail(kTool, e.what());
  }
}
