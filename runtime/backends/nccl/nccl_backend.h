// The NCCL backend: one NCCL communicator per meshrt communicator, created non-blocking so that
// the watchdog can always abort it; ops launched on the caller's thread onto the communicator's
// own stream (ordered after the caller's current stream, cuda_stream.h) and polled through CUDA
// events. docs/gpu.md describes it whole.
#pragma once

#include <memory>

#include "runtime/backend.h"
#include "runtime/backend_factory.h"

namespace meshrt {

// Connects `spec`'s members over NCCL: picks the device (MESHRT_CUDA_DEVICE, else
// spec.local_rank), takes rank 0's ncclUniqueId through spec.store under spec.store_key and
// initialises the communicator named spec.name, bounded by spec.timeout. Throws Error naming the
// rank and communicator: kNotSupported when no CUDA device answers (the message carries CUDA's
// reason), kTimeout when the peers do not arrive, the mapped NCCL error otherwise.
std::unique_ptr<Backend> make_nccl_backend(const GroupSpec& spec);

}  // namespace meshrt
