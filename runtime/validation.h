// Checks an op against its communicator before anything is sent, so that bad input fails on the
// calling rank with a clear message instead of hanging or corrupting the peers.
#pragma once

#include "runtime/op.h"
#include "trace/op_record.h"

namespace meshrt {

// Throws Error(kInvalidArgument) naming the rank, communicator, op and problem when `op` is not
// valid on `comm`. `accepts_cuda` says whether the backend takes CUDA buffers.
void validate_op(const Op& op, const trace::CommInfo& comm, bool accepts_cuda);

}  // namespace meshrt
