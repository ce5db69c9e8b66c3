// How a trainer tells meshrt which CUDA stream its work runs on. meshrt has no tensor library to
// ask (PyTorch has getCurrentCUDAStream): NCCL ops are ordered after this stream, and
// Work::wait() makes this stream wait for them.
//
//   cudaStream_t compute;  // The trainer's stream.
//   meshrt::cuda::set_current_stream(compute);
//   tp.all_reduce(grad)->wait();  // `compute` waits for the all_reduce; the host returns at once.
#pragma once

#include <cuda_runtime_api.h>

namespace meshrt::cuda {

// Sets this thread's current stream for meshrt's NCCL ops (thread-local, like PyTorch's).
// Default: the legacy default stream (0), or the per-thread default stream when the program is
// built with --default-stream per-thread.
void set_current_stream(cudaStream_t stream);
// This thread's current stream, as set_current_stream left it.
cudaStream_t current_stream();

// Sets this thread's current stream for its lifetime, then restores the previous one.
class StreamGuard {
 public:
  // Makes `stream` current.
  explicit StreamGuard(cudaStream_t stream) : previous_(current_stream()) {
    set_current_stream(stream);
  }
  // Restores the stream that was current before.
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace meshrt::cuda
