// MESHRT_NAN_CHECK=1: every op whose input holds a NaN or an infinity fails on that rank before it
// is numbered or launched, naming the first bad element, so a diverging job stops at the rank that
// produced the bad value instead of spreading it through every all_reduce. Built on the pre-op
// hook API (runtime/hooks.h). Reads every element of host buffers; device buffers are not checked.
#pragma once

#include <cstddef>
#include <optional>

#include "runtime/buffer.h"
#include "runtime/hooks.h"

namespace meshrt {

// The first element of a buffer that is not finite.
struct NonFinite {
  size_t index = 0;  // Element index.
  bool nan = false;  // NaN; false for an infinity.
};

// The first NaN or infinite element of a host buffer of a floating dtype; nullopt when there is
// none, and for integer dtypes, device buffers and empty views.
std::optional<NonFinite> first_non_finite(const BufferView& buffer);

// The hook: throws Error(kInvalidArgument) "input holds NaN at element 17 of 1024
// (MESHRT_NAN_CHECK)" for the data this rank sends (a broadcast's or scatter's only on the root,
// a batch's send members, never a recv's).
void nan_check_hook(const OpHookArgs& args);

// Whether MESHRT_NAN_CHECK asks for the check (read by every new communicator).
bool nan_check_enabled_from_env();

}  // namespace meshrt
