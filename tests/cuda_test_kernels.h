// Two tiny CUDA kernels for the GPU tests, as PTX loaded through the runtime's library API, so
// that the tests need no nvcc (the driver compiles the PTX for whatever GPU it finds):
//  - spin_until_set(flag): spins until *flag != 0, the "stuck kernel" ahead of a collective
//    (a hang the host cannot see, unlike a blocking host function);
//  - add_one_f32(data, n): data[i] += 1, so that each graph replay changes what its collective
//    reduces.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace meshrt::testing {

inline constexpr char kTestKernelsPtx[] = R"(
.version 7.0
.target sm_75
.address_size 64

.visible .entry spin_until_set(.param .u64 flag)
{
  .reg .pred %p;
  .reg .b32 %v;
  .reg .b64 %a;
  ld.param.u64 %a, [flag];
  cvta.to.global.u64 %a, %a;
SPIN:
  ld.volatile.global.u32 %v, [%a];
  setp.eq.u32 %p, %v, 0;
  @%p bra SPIN;
  ret;
}

.visible .entry add_one_f32(.param .u64 data, .param .u32 n)
{
  .reg .pred %p;
  .reg .b32 %i, %n, %t, %nt, %c;
  .reg .b64 %a, %off;
  .reg .f32 %f;
  ld.param.u64 %a, [data];
  ld.param.u32 %n, [n];
  cvta.to.global.u64 %a, %a;
  mov.u32 %t, %tid.x;
  mov.u32 %nt, %ntid.x;
  mov.u32 %c, %ctaid.x;
  mad.lo.u32 %i, %c, %nt, %t;
  setp.ge.u32 %p, %i, %n;
  @%p bra DONE;
  mul.wide.u32 %off, %i, 4;
  add.u64 %a, %a, %off;
  ld.global.f32 %f, [%a];
  add.f32 %f, %f, 0f3F800000;
  st.global.f32 [%a], %f;
DONE:
  ret;
}
)";

// The kernels, loaded once per process on the current device. Throws std::runtime_error.
class TestKernels {
 public:
  static const TestKernels& get() {
    static const TestKernels k;
    return k;
  }
  // Launches spin_until_set(flag) on `stream` (one thread).
  cudaError_t spin_until_set(const unsigned* flag, cudaStream_t stream) const {
    void* args[] = {&flag};
    return cudaLaunchKernel(reinterpret_cast<const void*>(spin_), dim3(1), dim3(1), args, 0,
                            stream);
  }
  // Launches add_one_f32(data, n) on `stream`.
  cudaError_t add_one(float* data, unsigned n, cudaStream_t stream) const {
    void* args[] = {&data, &n};
    return cudaLaunchKernel(reinterpret_cast<const void*>(add_one_), dim3((n + 255) / 256),
                            dim3(256), args, 0, stream);
  }

 private:
  TestKernels() {
    check(cudaLibraryLoadData(&library_, kTestKernelsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cudaLibraryLoadData");
    check(cudaLibraryGetKernel(&spin_, library_, "spin_until_set"), "cudaLibraryGetKernel");
    check(cudaLibraryGetKernel(&add_one_, library_, "add_one_f32"), "cudaLibraryGetKernel");
  }
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t spin_ = nullptr;
  cudaKernel_t add_one_ = nullptr;
};

}  // namespace meshrt::testing
