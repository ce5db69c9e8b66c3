#include "runtime/reduce_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "runtime/error.h"

namespace meshrt {
namespace {

template <typename T, typename F>
void apply(void* out, const void* a, const void* b, size_t n, F f) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

template <typename T>
void reduce_native(ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      // Integer sums wrap like NCCL's: compute in the unsigned type to keep that defined.
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return apply<T>(out, a, b, n, [](T x, T y) { return T(U(x) + U(y)); });
      } else {
        return apply<T>(out, a, b, n, [](T x, T y) { return x + y; });
      }
    case ReduceOp::kProd:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return apply<T>(out, a, b, n, [](T x, T y) { return T(U(x) * U(y)); });
      } else {
        return apply<T>(out, a, b, n, [](T x, T y) { return x * y; });
      }
    case ReduceOp::kMin:
      return apply<T>(out, a, b, n, [](T x, T y) { return std::min(x, y); });
    case ReduceOp::kMax:
      return apply<T>(out, a, b, n, [](T x, T y) { return std::max(x, y); });
    case ReduceOp::kCustom:  // Folded by its Reducer (Reduction), never here.
      return;
  }
}

// 16- and 8-bit floats reduce in float and round once per element, as NCCL does on the host side.
template <typename T, typename ToFloat, typename FromFloat>
void reduce_16(ReduceOp op, void* out, const void* a, const void* b, size_t n, ToFloat to,
               FromFloat from) {
  auto run = [&](auto f) {
    apply<T>(out, a, b, n, [&](T x, T y) { return from(f(to(x), to(y))); });
  };
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return run([](float x, float y) { return x + y; });
    case ReduceOp::kProd:
      return run([](float x, float y) { return x * y; });
    case ReduceOp::kMin:
      return run([](float x, float y) { return std::min(x, y); });
    case ReduceOp::kMax:
      return run([](float x, float y) { return std::max(x, y); });
    case ReduceOp::kCustom:
      return;
  }
}

}  // namespace

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kCustom:
      return "custom";
  }
  return "unknown";
}

void reduce_elements(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (dtype) {
    case DType::kF32:
      return reduce_native<float>(op, out, a, b, n);
    case DType::kF64:
      return reduce_native<double>(op, out, a, b, n);
    case DType::kI8:
      return reduce_native<int8_t>(op, out, a, b, n);
    case DType::kU8:
      return reduce_native<uint8_t>(op, out, a, b, n);
    case DType::kI32:
      return reduce_native<int32_t>(op, out, a, b, n);
    case DType::kI64:
      return reduce_native<int64_t>(op, out, a, b, n);
    case DType::kF16:
      return reduce_16<Half>(
          op, out, a, b, n, [](Half h) { return to_float(h); }, to_half);
    case DType::kBF16:
      return reduce_16<BFloat16>(
          op, out, a, b, n, [](BFloat16 h) { return to_float(h); }, to_bfloat16);
    case DType::kF8E4M3:
      return reduce_16<Fp8E4M3>(
          op, out, a, b, n, [](Fp8E4M3 v) { return to_float(v); }, to_fp8_e4m3);
    case DType::kF8E5M2:
      return reduce_16<Fp8E5M2>(
          op, out, a, b, n, [](Fp8E5M2 v) { return to_float(v); }, to_fp8_e5m2);
  }
}

void divide_elements(DType dtype, void* data, size_t n, size_t divisor) {
  const double d = static_cast<double>(divisor);
  switch (dtype) {
    case DType::kF32: {
      float* p = static_cast<float*>(data);
      const float df = static_cast<float>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] /= df;
      return;
    }
    case DType::kF64: {
      double* p = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) p[i] /= d;
      return;
    }
    case DType::kF16: {
      Half* p = static_cast<Half*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = to_half(to_float(p[i]) / static_cast<float>(d));
      return;
    }
    case DType::kBF16: {
      BFloat16* p = static_cast<BFloat16*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = to_bfloat16(to_float(p[i]) / static_cast<float>(d));
      return;
    }
    case DType::kF8E4M3: {
      Fp8E4M3* p = static_cast<Fp8E4M3*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = to_fp8_e4m3(to_float(p[i]) / static_cast<float>(d));
      return;
    }
    case DType::kF8E5M2: {
      Fp8E5M2* p = static_cast<Fp8E5M2*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = to_fp8_e5m2(to_float(p[i]) / static_cast<float>(d));
      return;
    }
    default:
      return;  // Validation rejects kAvg on integer dtypes.
  }
}

namespace {

thread_local std::optional<std::string> reducer_failure;

// Reducer names outlive every Reducer: records keep string_views of them.
std::string_view intern(std::string_view name) {
  static std::mutex mutex;
  // Never destroyed, not even at exit: the trace sinks write their last records then.
  static std::set<std::string, std::less<>>& names = *new std::set<std::string, std::less<>>();
  const std::lock_guard lock(mutex);
  return *names.emplace(name).first;
}

}  // namespace

std::shared_ptr<const Reducer> Reducer::create(std::string_view name, size_t element_bytes,
                                               ReduceFn fn, std::optional<DType> dtype) {
  std::string why;
  if (name.empty()) {
    why = "its name is empty";
  } else if (!fn) {
    why = "it has no function";
  } else if (element_bytes == 0) {
    why = "its element size is 0 bytes";
  } else if (dtype && dtype_size_bytes(*dtype) != element_bytes) {
    why = fmt::format("its element size is {} bytes but its dtype {} has {}", element_bytes,
                      dtype_name(*dtype), dtype_size_bytes(*dtype));
  }
  if (!why.empty()) {
    throw Error(ErrorCode::kInvalidArgument, {},
                fmt::format("reducer '{}' cannot be created: {}", name, why));
  }
  return std::make_shared<const Reducer>(Key{}, name, element_bytes, std::move(fn), dtype);
}

Reducer::Reducer(Key /*key*/, std::string_view name, size_t element_bytes, ReduceFn fn,
                 std::optional<DType> dtype)
    : name_(intern(name)), element_bytes_(element_bytes), fn_(std::move(fn)), dtype_(dtype) {}

void Reduction::operator()(void* out, const void* a, const void* b, size_t n) const {
  if (custom == nullptr) return reduce_elements(dtype, op, out, a, b, n);
  if (n == 0) return;
  // fold_into computes inout = in (op) inout; the ops commute, so out = b (op) a will do.
  const void* in = b;
  if (out == b) {
    in = a;
  } else if (out != a) {
    std::memmove(out, a, n * element_bytes);
  }
  std::optional<std::string> failure = custom->fold_into(in, out, n);
  if (failure && !reducer_failure) reducer_failure = std::move(failure);
}

std::optional<std::string> Reducer::fold_into(const void* in, void* inout,
                                              size_t count) const noexcept {
  try {
    fn_(in, inout, count);
    return std::nullopt;
  } catch (const std::exception& e) {
    return fmt::format("reducer '{}' threw: {}", name_, e.what());
  } catch (...) {
    return fmt::format("reducer '{}' threw an exception that is not a std::exception", name_);
  }
}

std::optional<std::string> take_reducer_failure() { return std::exchange(reducer_failure, {}); }

}  // namespace meshrt
