// How the NCCL backend configures itself: NCCL's ncclConfig_t for a communicator, the CUDA device
// of this process, and the settings read from the environment. Pure functions, tested without a
// GPU.
#pragma once

#include <nccl.h>

#include <string>

namespace meshrt::cuda {

// The ncclConfig_t of meshrt's communicators: non-blocking (blocking = 0, so that ncclCommAbort
// from the watchdog is always safe) and named `comm_name` (the meshrt name, "mesh0/tp"), which
// NCCL's logs, RAS and profiler plugins show. `comm_name` must outlive the NCCL call using it.
ncclConfig_t nccl_config(const std::string& comm_name);

// The CUDA device of a process with `local_rank` (LOCAL_RANK): MESHRT_CUDA_DEVICE when set
// (`env_value`, a device ordinal), else the local rank, else 0. Throws Error(kInvalidArgument)
// for a malformed or negative MESHRT_CUDA_DEVICE.
int cuda_device_for(int local_rank, const char* env_value);

// The backend's settings from the environment, read once per communicator.
struct NcclSettings {
  // MESHRT_NCCL_USE_CALLER_STREAM=1: ops run on the caller's current stream instead of the
  // communicator's own (saves an event record and wait per op; serialises with compute).
  bool use_caller_stream = false;
  // MESHRT_NCCL_CHECK_POINTERS=0 skips cudaPointerGetAttributes on every buffer (default on).
  bool check_pointers = true;
  // MESHRT_NCCL_WATCH_GRAPHS=0 records no watch nodes in captured CUDA graphs (default on).
  bool watch_graphs = true;
};

// Reads NcclSettings; throws Error(kInvalidArgument) naming a malformed variable.
NcclSettings nccl_settings_from_env();

}  // namespace meshrt::cuda
