// Host overhead per op on a GPU: raw ncclAllReduce of 8 bytes against meshrt's launch path
// (validation, record, flight recorder on, events, pending op), both at world size 1, launched
// back to back and synchronised once per batch. Prints ns per op for each and the difference.
//
//   build/bench/nccl_bench [iterations]   (a GPU machine; see docs/gpu.md)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mesh/meshrt.h"
#include "runtime/backends/nccl/cuda_stream.h"

namespace {

double ns_per_op(int iters, auto&& launch, cudaStream_t s) {
  for (int i = 0; i < 100; ++i) launch();  // Warm up.
  cudaStreamSynchronize(s);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) launch();
  const auto t1 = std::chrono::steady_clock::now();  // Host time to launch, not to run.
  cudaStreamSynchronize(s);
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "nccl_bench: no CUDA device\n");
    return 77;  // Skipped.
  }
  cudaSetDevice(0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void* buf;
  cudaMalloc(&buf, 8);

  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t raw;
  ncclCommInitRank(&raw, 1, id, 0);
  const double raw_ns = ns_per_op(
      iters, [&] { ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, raw, s); }, s);

  meshrt::InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.backend = "nccl";
  auto world = meshrt::init(o);
  meshrt::cuda::set_current_stream(s);
  const meshrt::BufferView v{buf, 2, meshrt::DType::kF32, meshrt::Device::cuda(0), {}};
  const double meshrt_ns = ns_per_op(
      iters, [&] { world->all_reduce(v)->wait(); }, s);
  world->barrier()->synchronize();

  std::printf(
      "raw ncclAllReduce 8 B: %.0f ns/op\nmeshrt all_reduce 8 B: %.0f ns/op\n"
      "meshrt overhead: %.0f ns/op (target <= 1000)\n",
      raw_ns, meshrt_ns, meshrt_ns - raw_ns);
  ncclCommDestroy(raw);
  return 0;
}
