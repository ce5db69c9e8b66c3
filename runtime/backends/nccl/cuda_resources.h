// RAII owners of CUDA streams, events and device memory, and a pool of events: the NCCL backend
// records one or two events per op, and cudaEventCreate per op would cost more than the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace meshrt::cuda {

// A non-blocking stream created on the current device; destroyed with the owner.
class Stream {
 public:
  Stream() = default;
  // Creates the stream (cudaStreamNonBlocking: no implicit sync with the legacy default stream);
  // throws Error on failure.
  static Stream create();
  ~Stream() { reset(); }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      reset();
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }
  // The handle; null when empty.
  cudaStream_t get() const { return stream_; }

 private:
  void reset() noexcept;
  cudaStream_t stream_ = nullptr;
};

// An event; destroyed with the owner.
class Event {
 public:
  Event() = default;
  // Creates an event; `timing` false gives cudaEventDisableTiming (cheaper to record and query).
  // Throws Error on failure.
  static Event create(bool timing);
  ~Event() { reset(); }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      reset();
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  // The handle; null when empty.
  cudaEvent_t get() const { return event_; }

 private:
  void reset() noexcept;
  cudaEvent_t event_ = nullptr;
};

// Device memory of `bytes` bytes (cudaMalloc); freed with the owner.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  // Allocates `bytes` (not initialised); throws Error on failure.
  static DeviceMemory allocate(size_t bytes);
  ~DeviceMemory() { reset(); }
  DeviceMemory(DeviceMemory&& o) noexcept : data_(std::exchange(o.data_, nullptr)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }
  // The memory; null when empty.
  void* get() const { return data_; }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
};

// Reusable events, two kinds (timing or not). Thread-safe; shared by a backend and its pending
// ops, which give their events back when destroyed.
class EventPool {
 public:
  // Creates `prefill` events of each kind now, so that the first ops of a job create none.
  explicit EventPool(size_t prefill = 0);
  // An event of the kind asked for, from the pool or new; throws Error if creating one fails.
  Event take(bool timing);
  // Returns `event` (of kind `timing`) for reuse.
  void give(Event event, bool timing);

 private:
  std::mutex mu_;
  std::vector<Event> free_[2];  // [timing]
};

// Makes `device` current on this thread for the guard's lifetime, then restores the caller's
// device: a trainer driving several GPUs from one thread keeps the device it chose.
class DeviceGuard {
 public:
  // Throws Error if CUDA refuses the device.
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: unchanged, nothing to restore.
};

// Puts this thread in cudaStreamCaptureModeRelaxed for the guard's lifetime. Event and error
// queries are "potentially unsafe" calls: made from a thread in the default (global) mode while
// any thread captures in global mode, they invalidate that capture, and made on a capturing
// thread they are refused. Polls of ops launched outside a capture are safe, so pollers (the
// watchdog, test(), a launch retiring older ops) opt out of the check, as PyTorch's watchdog
// does.
class RelaxedCaptureGuard {
 public:
  RelaxedCaptureGuard();
  ~RelaxedCaptureGuard();
  RelaxedCaptureGuard(const RelaxedCaptureGuard&) = delete;
  RelaxedCaptureGuard& operator=(const RelaxedCaptureGuard&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace meshrt::cuda
