// A process that hangs one NCCL collective on purpose, for tests/gpu_test.cc and the prepared GPU
// run (.ci/gpu_run.sh), which start it by fork+exec: CUDA cannot be used in a child forked after
// its parent initialised CUDA, and the watchdog's threads do not survive a fork.
//
//   gpu_hang_worker stream DIR   a kernel spinning on a device flag ahead of an all_gather
//   gpu_hang_worker graph DIR    the same two captured into a CUDA graph, then replayed
//
// The op timeout is 1 s; dumps go to DIR/fr_<rank> unless MESHRT_DUMP_PREFIX says otherwise, and
// DIR/armed holds the steady-clock ns (CLOCK_MONOTONIC, comparable across processes) at which the
// hang was launched. Under MESHRT_ON_TIMEOUT=abort the watchdog must end the process with 70.
// Under throw or continue the worker releases the flag 3 s after arming, tears everything down
// (graphs before communicators) and exits 0: the abort of a communicator a graph still held must
// not hang the process. Exit 77: no CUDA device; 1: the hang was not handled.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "mesh/meshrt.h"
#include "runtime/backends/nccl/cuda_stream.h"
#include "tests/cuda_test_kernels.h"

namespace {

int run(const std::string& mode, const std::string& dir) {
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device: %s\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices found");
    return 77;
  }
  setenv("MESHRT_DUMP_PREFIX", (dir + "/fr_").c_str(), 0);
  meshrt::InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.local_rank = 0;
  o.backend = "nccl";
  o.run_id = "gpu_hang_" + mode;
  o.timeout = std::chrono::milliseconds(1000);
  auto world = meshrt::init(o);

  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  meshrt::cuda::StreamGuard guard(s);
  // The flag is mapped host memory: the host can release the spinning kernel.
  unsigned* flag = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(unsigned), cudaHostAllocMapped);
  *flag = 0;
  unsigned* device_flag = nullptr;
  cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), flag, 0);
  float* buf = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&buf), 2 * 16 * sizeof(float));
  const meshrt::BufferView in{buf, 16, meshrt::DType::kF32, meshrt::Device::cuda(0), {}};
  const meshrt::BufferView out{buf + 16, 16, meshrt::DType::kF32, meshrt::Device::cuda(0), {}};
  const auto& kernels = meshrt::testing::TestKernels::get();

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  auto arm = [&] {
    std::ofstream(dir + "/armed") << std::chrono::steady_clock::now().time_since_epoch().count();
  };
  if (mode == "graph") {
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    kernels.spin_until_set(device_flag, s);
    world->all_gather(in, out)->wait();  // Out of place: a real NCCL node at world size 1.
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess ||
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      std::fprintf(stderr, "gpu_hang_worker: capture failed: %s\n",
                   cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    arm();
    cudaGraphLaunch(exec, s);
  } else {
    kernels.spin_until_set(device_flag, s);
    arm();
    world->all_gather(in, out);
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const char* policy = std::getenv("MESHRT_ON_TIMEOUT");
  if (policy != nullptr && std::string(policy) == "abort") {
    std::this_thread::sleep_for(std::chrono::seconds(27));
    std::fprintf(stderr, "gpu_hang_worker: the watchdog did not end the hang\n");
    return 1;
  }
  *flag = 1;
  cudaStreamSynchronize(s);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  world.reset();
  std::printf("gpu_hang_worker: released and torn down\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "stream" && std::string(argv[1]) != "graph")) {
    std::fprintf(stderr, "usage: gpu_hang_worker stream|graph DIR\n");
    return 2;
  }
  try {
    return run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_hang_worker: %s\n", e.what());
    return 1;
  }
}
