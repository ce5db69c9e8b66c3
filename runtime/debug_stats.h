// Debug tensor statistics: off by default; with MESHRT_DEBUG_TENSOR_STATS=1 (or
// set_debug_tensor_stats(true)) every op's record carries min, max, mean and NaN/Inf counts of its
// host input (at enqueue) and output (at completion). It reads every element: debugging only.
#pragma once

#include "runtime/buffer.h"
#include "trace/op_record.h"

namespace meshrt {

// Turns the statistics on or off for ops enqueued from now on (process-wide).
void set_debug_tensor_stats(bool enabled);
// Whether they are on; the first call reads MESHRT_DEBUG_TENSOR_STATS.
bool debug_tensor_stats_enabled();

// The statistics of `buffer`'s elements; invalid for device or empty buffers.
trace::TensorStats tensor_stats(const BufferView& buffer);

}  // namespace meshrt
