#include "runtime/backends/nccl/cuda_check.h"

#include <fmt/format.h>

#include <string>

namespace meshrt::cuda {

ErrorCode error_code_of(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return ErrorCode::kInternal;  // Not a failure: a caller bug to make an Error of it.
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
      return ErrorCode::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNotSupported:
      return ErrorCode::kNotSupported;
    default:
      return ErrorCode::kBackend;
  }
}

ErrorCode error_code_of(ncclResult_t result) {
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return ErrorCode::kInvalidArgument;
    case ncclRemoteError:
    case ncclSystemError:
      return ErrorCode::kPeerFailure;
    case ncclSuccess:
    case ncclInProgress:
      return ErrorCode::kInternal;  // Not failures.
    default:
      return ErrorCode::kBackend;
  }
}

Error cuda_error(cudaError_t error, std::string_view call, ErrorContext context) {
  (void)cudaGetLastError();
  return Error(error_code_of(error), std::move(context),
               fmt::format("{}: {}: {}", call, cudaGetErrorName(error), cudaGetErrorString(error)));
}

Error nccl_error(ncclResult_t result, std::string_view call, ncclComm_t comm,
                 ErrorContext context) {
  const char* last = ncclGetLastError(comm);
  std::string detail = fmt::format("{}: {}", call, ncclGetErrorString(result));
  if (last != nullptr && *last != '\0') detail += fmt::format(" ({})", last);
  return Error(error_code_of(result), std::move(context), std::move(detail));
}

}  // namespace meshrt::cuda
