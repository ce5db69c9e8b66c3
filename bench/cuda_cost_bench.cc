// The host cost of each CUDA and NCCL call on meshrt's NCCL launch path (runtime/backends/nccl),
// one at a time, so that the launch path's overhead over raw ncclAllReduce (bench/nccl_bench) can
// be explained call by call. Every figure is host time per call: calls issued back to back, the
// device synchronised between chunks of stream work outside the timed region (so a full launch
// queue never turns a host figure into a device one), the median of 5 batches after a warm-up
// batch. World size 1, one process, device 0 (CUDA_VISIBLE_DEVICES picks it).
//
//   build/bench/cuda_cost_bench [calls]   (a GPU machine; see docs/gpu.md)
//
// `calls`: calls per batch of host-only items (default 20000); stream and NCCL items use a tenth.
// Prints, on stdout:
//   cuda_cost_bench device 0 "<name>" sm_<major><minor> pci <bus id>
//   cuda_cost_bench versions cuda_runtime <n> cuda_driver <n> nccl <a.b.c> nccl_header <a.b.c>
//   cost <name> <ns per call> ns (min <x> max <y>, 5 batches x <calls>)   (one line per item)
//   cuda_cost_bench results ok
// Without a usable device: "no CUDA device: <reason>" on stderr, exit 77. Any failing call: its
// name and error on stderr, exit 1. A hang: exit 124 after 60 s.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "bench/gpu_bench_util.h"

namespace {

constexpr int kBatches = 5;
// Stream work per untimed synchronisation: far below CUDA's pending-launch limit (~1000), so no
// timed call ever blocks on a full queue.
constexpr int kStreamChunk = 100;
constexpr unsigned kDeadlineSeconds = 60;
constexpr int kDevice = 0;  // CUDA_VISIBLE_DEVICES picks the GPU.
constexpr char kTool[] = "cuda_cost_bench";

using meshrt::bench::check_cuda;
using meshrt::bench::check_nccl;
using meshrt::bench::nonblocking;
using meshrt::bench::wait_ready;

struct Figure {
  double median = 0, min = 0, max = 0;
};

// ns per call of `body`: a warm-up batch, then kBatches timed batches of `calls` calls, each
// batch timed in chunks of `chunk` calls with `sync` (untimed) after each chunk.
Figure measure(int calls, int chunk, const std::function<void()>& body,
               const std::function<void()>& sync) {
  std::array<double, kBatches> ns{};
  for (int batch = -1; batch < kBatches; ++batch) {
    double total = 0;
    for (int done = 0; done < calls;) {
      const int n = std::min(chunk, calls - done);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) body();
      const auto t1 = std::chrono::steady_clock::now();
      total += std::chrono::duration<double, std::nano>(t1 - t0).count();
      if (sync) sync();
      done += n;
    }
    if (batch >= 0) ns[batch] = total / calls;
  }
  std::sort(ns.begin(), ns.end());
  return {ns[kBatches / 2], ns.front(), ns.back()};
}

void report(const char* name, int calls, const Figure& f) {
  std::printf("cost %s %.1f ns (min %.1f max %.1f, %d batches x %d)\n", name, f.median, f.min,
              f.max, kBatches, calls);
}

ncclComm_t make_comm(bool blocking) {
  ncclUniqueId id;
  check_nccl(kTool, ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  config.commName = blocking ? "cost_bench_blocking" : "cost_bench_nonblocking";
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  check_nccl(kTool, r, "ncclCommInitRankConfig", comm);
  if (!blocking) wait_ready(kTool, comm, "ncclCommInitRankConfig");
  return comm;
}

}  // namespace

int main(int argc, char** argv) {
  // Lines reach a log file as they are printed: a crash later keeps the figures before it.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (calls < 10) {
    std::fprintf(stderr, "usage: cuda_cost_bench [calls per batch, >= 10]\n");
    return 2;
  }
  meshrt::bench::arm_deadline(kTool, kDeadlineSeconds);
  if (!meshrt::bench::has_cuda_device()) return meshrt::bench::kExitNoDevice;
  meshrt::bench::use_device(kTool, kDevice);
  meshrt::bench::print_banner(kTool, kDevice);

  // meshrt's streams are non-blocking: no implicit ordering with the legacy default stream.
  cudaStream_t s = nullptr, s2 = nullptr;
  check_cuda(kTool, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags");
  check_cuda(kTool, cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags");
  // Two floats: the 8 B of the figures. Out-of-place pairs read `send` and write `recv`.
  const float input[2] = {1.5f, -2.25f};
  float *send = nullptr, *recv = nullptr, *inplace = nullptr;
  check_cuda(kTool, cudaMalloc(&send, sizeof(input)), "cudaMalloc");
  check_cuda(kTool, cudaMalloc(&recv, sizeof(input)), "cudaMalloc");
  check_cuda(kTool, cudaMalloc(&inplace, sizeof(input)), "cudaMalloc");
  for (float* p : {send, recv, inplace}) {
    check_cuda(kTool, cudaMemcpy(p, input, sizeof(input), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  // A pageable cudaMemcpy may return before its DMA lands, and `s` does not wait for the legacy
  // stream.
  check_cuda(kTool, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaEvent_t plain = nullptr, timed = nullptr;
  check_cuda(kTool, cudaEventCreateWithFlags(&plain, cudaEventDisableTiming),
             "cudaEventCreateWithFlags");
  check_cuda(kTool, cudaEventCreateWithFlags(&timed, cudaEventDefault), "cudaEventCreateWithFlags");

  const int stream_calls = std::max(kStreamChunk, calls / 10);
  const std::function<void()> host_only;  // No synchronisation: nothing reaches the device.
  const std::function<void()> sync = [] { check_cuda(kTool, cudaDeviceSynchronize(), "sync"); };
  const auto host_item = [&](const char* name, const std::function<void()>& body) {
    report(name, calls, measure(calls, calls, body, host_only));
  };
  const auto stream_item = [&](const char* name, const std::function<void()>& body) {
    report(name, stream_calls, measure(stream_calls, kStreamChunk, body, sync));
  };

  host_item("cudaGetDevice", [] {
    int d = -1;
    check_cuda(kTool, cudaGetDevice(&d), "cudaGetDevice");
  });
  host_item("cudaSetDevice_same",
            [] { check_cuda(kTool, cudaSetDevice(kDevice), "cudaSetDevice"); });
  host_item("cudaStreamGetCaptureInfo_nonblocking_stream", [&] {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaGraph_t graph = nullptr;
    check_cuda(kTool, cudaStreamGetCaptureInfo(s, &status, &id, &graph),
               "cudaStreamGetCaptureInfo");
  });
  // meshrt's default caller stream (none set) is the legacy default stream.
  host_item("cudaStreamGetCaptureInfo_legacy_stream", [&] {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaGraph_t graph = nullptr;
    check_cuda(kTool, cudaStreamGetCaptureInfo(nullptr, &status, &id, &graph),
               "cudaStreamGetCaptureInfo");
  });
  host_item("cudaStreamIsCapturing", [&] {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check_cuda(kTool, cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
  });
  // The guard PyTorch puts around event queries (set thread-local, then restore).
  host_item("cudaThreadExchangeStreamCaptureMode_pair", [] {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    check_cuda(kTool, cudaThreadExchangeStreamCaptureMode(&mode),
               "cudaThreadExchangeStreamCaptureMode");
    check_cuda(kTool, cudaThreadExchangeStreamCaptureMode(&mode),
               "cudaThreadExchangeStreamCaptureMode");
  });
  host_item("cudaPointerGetAttributes_device", [&] {
    cudaPointerAttributes attr{};
    check_cuda(kTool, cudaPointerGetAttributes(&attr, inplace), "cudaPointerGetAttributes");
  });
  host_item("cudaEventCreate_destroy_disable_timing", [] {
    cudaEvent_t e = nullptr;
    check_cuda(kTool, cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
               "cudaEventCreateWithFlags");
    check_cuda(kTool, cudaEventDestroy(e), "cudaEventDestroy");
  });
  host_item("cudaEventCreate_destroy_timing", [] {
    cudaEvent_t e = nullptr;
    check_cuda(kTool, cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreateWithFlags");
    check_cuda(kTool, cudaEventDestroy(e), "cudaEventDestroy");
  });
  stream_item("cudaEventRecord_disable_timing",
              [&] { check_cuda(kTool, cudaEventRecord(plain, s), "cudaEventRecord"); });
  stream_item("cudaEventRecord_timing",
              [&] { check_cuda(kTool, cudaEventRecord(timed, s), "cudaEventRecord"); });
  check_cuda(kTool, cudaEventRecord(plain, s), "cudaEventRecord");
  check_cuda(kTool, cudaStreamSynchronize(s), "cudaStreamSynchronize");
  host_item("cudaEventQuery_completed",
            [&] { check_cuda(kTool, cudaEventQuery(plain), "cudaEventQuery"); });
  stream_item("cudaStreamWaitEvent_completed",
              [&] { check_cuda(kTool, cudaStreamWaitEvent(s2, plain, 0), "cudaStreamWaitEvent"); });
  // meshrt's ordering of its stream after the caller's: record on one, wait on the other.
  stream_item("cudaEventRecord_cudaStreamWaitEvent_pair", [&] {
    check_cuda(kTool, cudaEventRecord(plain, s), "cudaEventRecord");
    check_cuda(kTool, cudaStreamWaitEvent(s2, plain, 0), "cudaStreamWaitEvent");
  });

  ncclComm_t blocking = make_comm(true);
  ncclComm_t nonblock = make_comm(false);
  host_item("ncclCommGetAsyncError", [&] {
    ncclResult_t state = ncclSuccess;
    check_nccl(kTool, ncclCommGetAsyncError(nonblock, &state), "ncclCommGetAsyncError", nonblock);
  });
  // At world size 1 NCCL runs an in-place sum as a no-op (nothing reaches the stream):
  // out-of-place makes it launch a real copy, and avg (a pre-multiplied sum) a real kernel, as
  // every collective does at larger sizes. The in-place sum is meshrt's own call (its all_reduce
  // is in place), here as NCCL's host floor.
  const auto nccl_item = [&](const char* name, ncclComm_t comm, bool grouped, float* in, float* out,
                             ncclRedOp_t op) {
    stream_item(name, [=] {
      if (grouped) check_nccl(kTool, ncclGroupStart(), "ncclGroupStart", comm);
      const ncclResult_t r = ncclAllReduce(in, out, 2, ncclFloat32, op, comm, s);
      if (grouped) {
        check_nccl(kTool, r, "ncclAllReduce", comm);
        nonblocking(kTool, ncclGroupEnd(), "ncclGroupEnd", comm);
      } else {
        nonblocking(kTool, r, "ncclAllReduce", comm);
      }
    });
  };
  nccl_item("ncclAllReduce_8B_oop_blocking", blocking, false, send, recv, ncclSum);
  nccl_item("ncclAllReduce_8B_oop_nonblocking", nonblock, false, send, recv, ncclSum);
  nccl_item("ncclGroup_ncclAllReduce_8B_oop_blocking", blocking, true, send, recv, ncclSum);
  nccl_item("ncclGroup_ncclAllReduce_8B_oop_nonblocking", nonblock, true, send, recv, ncclSum);
  nccl_item("ncclAllReduce_8B_inplace_sum_nonblocking", nonblock, false, inplace, inplace, ncclSum);
  nccl_item("ncclGroup_ncclAllReduce_8B_inplace_sum_nonblocking", nonblock, true, inplace, inplace,
            ncclSum);
  nccl_item("ncclAllReduce_8B_inplace_avg_nonblocking", nonblock, false, inplace, inplace, ncclAvg);
  nccl_item("ncclGroup_ncclAllReduce_8B_inplace_avg_nonblocking", nonblock, true, inplace, inplace,
            ncclAvg);

  // A sum or average over one rank leaves every value as it was: exactly (x * 1.0f == x).
  check_cuda(kTool, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (ncclComm_t comm : {blocking, nonblock}) {
    ncclResult_t state = ncclSuccess;
    check_nccl(kTool, ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
    check_nccl(kTool, state, "an NCCL op (asynchronous error)", comm);
  }
  bool ok = true;
  for (float* p : {send, recv, inplace}) {
    float got[2] = {};
    check_cuda(kTool, cudaMemcpy(got, p, sizeof(got), cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (std::memcmp(got, input, sizeof(input)) != 0) {
      std::fprintf(stderr, "cuda_cost_bench: wrong result: %g %g, expected %g %g\n", got[0], got[1],
                   input[0], input[1]);
      ok = false;
    }
  }
  check_nccl(kTool, ncclCommDestroy(blocking), "ncclCommDestroy", nullptr);
  // A non-blocking communicator is finalized (polled) before it is destroyed.
  nonblocking(kTool, ncclCommFinalize(nonblock), "ncclCommFinalize", nonblock);
  check_nccl(kTool, ncclCommDestroy(nonblock), "ncclCommDestroy", nullptr);
  std::printf("cuda_cost_bench results %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
