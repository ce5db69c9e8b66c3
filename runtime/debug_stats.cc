#include "runtime/debug_stats.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "trace/env.h"

namespace meshrt {
namespace {

std::atomic<int> enabled_state{-1};  // -1: not read from the environment yet.

template <typename T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> ||
                std::is_same_v<T, Fp8E4M3> || std::is_same_v<T, Fp8E5M2>) {
    return static_cast<double>(to_float(v));
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
trace::TensorStats compute(const T* data, size_t count) {
  trace::TensorStats s;
  s.valid = true;
  s.count = count;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  uint64_t finite = 0;
  for (size_t i = 0; i < count; ++i) {
    const double v = as_double(data[i]);
    if (std::isnan(v)) {
      ++s.nan_count;
      continue;
    }
    if (std::isinf(v)) ++s.inf_count;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    if (std::isfinite(v)) {
      sum += v;
      ++finite;
    }
  }
  s.mean = finite ? sum / static_cast<double>(finite) : std::nan("");
  if (s.nan_count == count) s.min = s.max = std::nan("");
  return s;
}

}  // namespace

void set_debug_tensor_stats(bool enabled) { enabled_state.store(enabled ? 1 : 0); }

bool debug_tensor_stats_enabled() {
  int state = enabled_state.load(std::memory_order_relaxed);
  if (state < 0) {
    state = trace::env::get_flag({"MESHRT_DEBUG_TENSOR_STATS"}) ? 1 : 0;
    int expected = -1;
    enabled_state.compare_exchange_strong(expected, state);
    state = enabled_state.load();
  }
  return state == 1;
}

trace::TensorStats tensor_stats(const BufferView& b) {
  if (b.data == nullptr || b.count == 0 || b.device.kind != Device::Kind::kCpu) return {};
  switch (b.dtype) {
    case DType::kF32:
      return compute(static_cast<const float*>(b.data), b.count);
    case DType::kF64:
      return compute(static_cast<const double*>(b.data), b.count);
    case DType::kF16:
      return compute(static_cast<const Half*>(b.data), b.count);
    case DType::kBF16:
      return compute(static_cast<const BFloat16*>(b.data), b.count);
    case DType::kI8:
      return compute(static_cast<const int8_t*>(b.data), b.count);
    case DType::kU8:
      return compute(static_cast<const uint8_t*>(b.data), b.count);
    case DType::kI32:
      return compute(static_cast<const int32_t*>(b.data), b.count);
    case DType::kI64:
      return compute(static_cast<const int64_t*>(b.data), b.count);
    case DType::kF8E4M3:
      return compute(static_cast<const Fp8E4M3*>(b.data), b.count);
    case DType::kF8E5M2:
      return compute(static_cast<const Fp8E5M2*>(b.data), b.count);
  }
  return {};
}

}  // namespace meshrt
