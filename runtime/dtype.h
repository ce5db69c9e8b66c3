// Element types of buffers and the 16-bit float storage types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace meshrt {

// Element type of a buffer.
enum class DType : uint8_t {
  kF32,   // float.
  kF64,   // double.
  kF16,   // IEEE 754 binary16, stored as Half.
  kBF16,  // bfloat16, stored as BFloat16.
  kI8,    // int8_t.
  kU8,    // uint8_t.
  kI32,   // int32_t.
  kI64    // int64_t.
};

// Every dtype, for tests and tables.
inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                       DType::kI8,  DType::kU8,  DType::kI32, DType::kI64};

// Size of one element in bytes; 0 for a value outside the enum.
size_t dtype_size_bytes(DType dtype);
// Short lowercase name: "f32", "bf16", ...; "unknown" outside the enum. Static storage.
std::string_view dtype_name(DType dtype);
// True for f32, f64, f16, bf16.
bool is_floating(DType dtype);

// IEEE 754 binary16 storage; arithmetic goes through float.
struct Half {
  uint16_t bits = 0;  // The raw binary16 encoding.
};
// bfloat16 storage (the upper half of a float); arithmetic goes through float.
struct BFloat16 {
  uint16_t bits = 0;  // The upper 16 bits of the float encoding.
};

// The exact float value of `h`.
float to_float(Half h);
// The exact float value of `b`.
float to_float(BFloat16 b);
// `f` rounded to nearest even; overflow gives infinity, NaN stays NaN.
Half to_half(float f);
// `f` rounded to nearest even; NaN stays NaN.
BFloat16 to_bfloat16(float f);

// The DType of a C++ element type, for typed views; specialised only for the types DType lists.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::kF16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::kBF16;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::kI8;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kU8;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}

}  // namespace meshrt
