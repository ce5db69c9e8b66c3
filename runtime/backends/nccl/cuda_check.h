// CUDA and NCCL failures as meshrt::Error: each library code mapped to an ErrorCode, with the
// call that failed and the library's own text, so that what() says what went wrong where.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string_view>

#include "runtime/error.h"

namespace meshrt::cuda {

// The meshrt code of a CUDA runtime error: bad values/pointers are kInvalidArgument, no usable
// device or driver is kNotSupported, everything else kBackend.
ErrorCode error_code_of(cudaError_t error);
// The meshrt code of an NCCL result: invalid argument/usage is kInvalidArgument, a remote or
// system (network) failure kPeerFailure, the rest kBackend (ncclInProgress: kInternal, it is
// not a failure and never reaches an Error on purpose).
ErrorCode error_code_of(ncclResult_t result);

// "cudaSetDevice: cudaErrorInsufficientDriver: CUDA driver version is insufficient ...". Clears
// CUDA's last (non-sticky) error so that a later call does not see it again.
Error cuda_error(cudaError_t error, std::string_view call, ErrorContext context = {});
// "ncclAllReduce: unhandled system error (<NCCL's last message for `comm`>)".
Error nccl_error(ncclResult_t result, std::string_view call, ncclComm_t comm = nullptr,
                 ErrorContext context = {});

// Throws cuda_error unless `error` is cudaSuccess.
inline void check_cuda(cudaError_t error, std::string_view call, const ErrorContext& context = {}) {
  if (error != cudaSuccess) throw cuda_error(error, call, context);
}
// Throws nccl_error unless `result` is ncclSuccess or ncclInProgress (non-blocking comms return
// it while the call completes in the background; see wait_nccl_ready).
inline void check_nccl(ncclResult_t result, std::string_view call, ncclComm_t comm = nullptr,
                       const ErrorContext& context = {}) {
  if (result != ncclSuccess && result != ncclInProgress) {
    throw nccl_error(result, call, comm, context);
  }
}

}  // namespace meshrt::cuda
