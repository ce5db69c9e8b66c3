#include "runtime/backends/nccl/cuda_resources.h"

#include "runtime/backends/nccl/cuda_check.h"

namespace meshrt::cuda {

Stream Stream::create() {
  Stream s;
  check_cuda(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags");
  return s;
}

void Stream::reset() noexcept {
  // Destroying a stream with work queued is allowed: CUDA releases it once the work is done.
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

Event Event::create(bool timing) {
  Event e;
  check_cuda(
      cudaEventCreateWithFlags(&e.event_, timing ? cudaEventDefault : cudaEventDisableTiming),
      "cudaEventCreateWithFlags");
  return e;
}

void Event::reset() noexcept {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
  event_ = nullptr;
}

DeviceMemory DeviceMemory::allocate(size_t bytes) {
  DeviceMemory m;
  check_cuda(cudaMalloc(&m.data_, bytes), "cudaMalloc");
  return m;
}

void DeviceMemory::reset() noexcept {
  if (data_ != nullptr) (void)cudaFree(data_);
  data_ = nullptr;
}

EventPool::EventPool(size_t prefill) {
  for (auto& free : free_) free.reserve(prefill);
  for (size_t i = 0; i < prefill; ++i) {
    free_[0].push_back(Event::create(false));
    free_[1].push_back(Event::create(true));
  }
}

Event EventPool::take(bool timing) {
  {
    std::lock_guard lock(mu_);
    auto& free = free_[timing ? 1 : 0];
    if (!free.empty()) {
      Event e = std::move(free.back());
      free.pop_back();
      return e;
    }
  }
  return Event::create(timing);
}

void EventPool::give(Event event, bool timing) {
  if (event.get() == nullptr) return;
  std::lock_guard lock(mu_);
  free_[timing ? 1 : 0].push_back(std::move(event));
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  if (current == device) return;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

RelaxedCaptureGuard::RelaxedCaptureGuard() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) previous_ = mode;
}

RelaxedCaptureGuard::~RelaxedCaptureGuard() {
  if (previous_ != cudaStreamCaptureModeRelaxed) {
    (void)cudaThreadExchangeStreamCaptureMode(&previous_);
  }
}

}  // namespace meshrt::cuda
