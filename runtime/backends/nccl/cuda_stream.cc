#include "runtime/backends/nccl/cuda_stream.h"

namespace meshrt::cuda {
namespace {

thread_local cudaStream_t current = nullptr;  // 0: the default stream of the build's mode.

}  // namespace

void set_current_stream(cudaStream_t stream) { current = stream; }

cudaStream_t current_stream() { return current; }

}  // namespace meshrt::cuda
