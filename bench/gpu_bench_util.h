// What bench/nccl_bench and bench/cuda_cost_bench share: failing with a message, CUDA and NCCL
// status checks, completing calls on a non-blocking communicator, the hang deadline, the device
// check and the banner lines. Header-only on CUDA and NCCL alone, because cuda_cost_bench links
// no meshrt library. .ci/gpu_run.sh parses what these print: keep the wording as it is.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace meshrt::bench {

// Exit status without a usable device: meson and .ci/gpu_run.sh count it as a skip.
inline constexpr int kExitNoDevice = 77;

// Exit 1 with `<tool>: <what>` on stderr: one line per failure, so that a log's last line says it.
[[noreturn]] inline void fail(const char* tool, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", tool, what.c_str());
  std::exit(1);
}

// Fails on any CUDA error, naming the call: no figure taken after one could be trusted.
inline void check_cuda(const char* tool, cudaError_t error, const char* call) {
  if (error != cudaSuccess) {
    fail(tool, std::string(call) + " failed: " + cudaGetErrorName(error) + ": " +
                   cudaGetErrorString(error));
  }
}

// ncclInProgress is not a failure: a non-blocking communicator returns it while work completes
// in the background (wait_ready).
inline void check_nccl(const char* tool, ncclResult_t result, const char* call, ncclComm_t comm) {
  if (result != ncclSuccess && result != ncclInProgress) {
    fail(tool, std::string(call) + " failed: " + ncclGetErrorString(result) + " (" +
                   ncclGetLastError(comm) + ")");
  }
}

// Polls a non-blocking communicator until its pending `call` finished, as meshrt's
// wait_nccl_ready does.
inline void wait_ready(const char* tool, ncclComm_t comm, const char* call) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    check_nccl(tool, ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) check_nccl(tool, state, call, comm);
    if (std::chrono::steady_clock::now() >= until) {
      fail(tool, std::string(call) + " failed: still in progress after 20 s");
    }
    std::this_thread::yield();
  }
}

// A call on a non-blocking communicator, complete when this returns (as every later call needs);
// polled only when NCCL said it is still in progress.
inline void nonblocking(const char* tool, ncclResult_t result, const char* call, ncclComm_t comm) {
  check_nccl(tool, result, call, comm);
  if (result == ncclInProgress) wait_ready(tool, comm, call);
}

// `code` (ncclGetVersion, NCCL_VERSION_CODE) as a.b.c, the form release notes use.
inline std::string nccl_version_text(int code) {
  // NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z since 2.9; before, X*1000+Y*100+Z.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

// A wedged device or driver must not hold the unattended run: after `seconds`, a line on stderr
// and exit 124, timeout(1)'s status. The line is built now because the handler may only write.
inline void arm_deadline(const char* tool, unsigned seconds) {
  static char message[256];
  static std::size_t length = 0;
  const int n = std::snprintf(message, sizeof(message),
                              "%s: still running after the deadline; giving up\n", tool);
  length = n < 0 ? 0 : std::min(static_cast<std::size_t>(n), sizeof(message) - 1);
  signal(SIGALRM, [](int) {
    (void)!write(2, message, length);
    _exit(124);
  });
  alarm(seconds);
}

// False, with "no CUDA device: <reason>" on stderr, where there is no device to run on: the line
// .ci/gpu_run.sh reports a skip with (the caller exits kExitNoDevice).
inline bool has_cuda_device() {
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device: cudaGetDeviceCount: %s: %s\n", cudaGetErrorName(e),
                 cudaGetErrorString(e));
    return false;
  }
  if (devices == 0) {
    std::fprintf(stderr, "no CUDA device: cudaGetDeviceCount found none\n");
    return false;
  }
  return true;
}

// Makes `device` current and creates its context now, so that no timed call pays for it.
inline void use_device(const char* tool, int device) {
  check_cuda(tool, cudaSetDevice(device), "cudaSetDevice");
  check_cuda(tool, cudaFree(nullptr), "cudaFree(nullptr) (context creation)");
}

// The `<tool> device` and `<tool> versions` lines: a figure is read against the GPU and the
// libraries actually loaded (NCCL's runtime version may differ from the header it was built with).
inline void print_banner(const char* tool, int device) {
  cudaDeviceProp prop{};
  check_cuda(tool, cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  char bus[32] = {};
  check_cuda(tool, cudaDeviceGetPCIBusId(bus, sizeof(bus), device), "cudaDeviceGetPCIBusId");
  int runtime_version = 0, driver_version = 0, nccl_code = 0;
  check_cuda(tool, cudaRuntimeGetVersion(&runtime_version), "cudaRuntimeGetVersion");
  check_cuda(tool, cudaDriverGetVersion(&driver_version), "cudaDriverGetVersion");
  check_nccl(tool, ncclGetVersion(&nccl_code), "ncclGetVersion", nullptr);
  std::printf("%s device %d \"%s\" sm_%d%d pci %s\n", tool, device, prop.name, prop.major,
              prop.minor, bus);
  std::printf("%s versions cuda_runtime %d cuda_driver %d nccl %s nccl_header %s\n", tool,
              runtime_version, driver_version, nccl_version_text(nccl_code).c_str(),
              nccl_version_text(NCCL_VERSION_CODE).c_str());
}

}  // namespace meshrt::bench
