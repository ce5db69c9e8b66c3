// Element types of buffers and the 16-bit float storage types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace meshrt {

// Element type of a buffer.
enum class DType : uint8_t {
  kF32,     // float.
  kF64,     // double.
  kF16,     // IEEE 754 binary16, stored as Half.
  kBF16,    // bfloat16, stored as BFloat16.
  kI8,      // int8_t.
  kU8,      // uint8_t.
  kI32,     // int32_t.
  kI64,     // int64_t.
  kF8E4M3,  // OCP fp8 E4M3 "fn" (no infinities, max 448), stored as Fp8E4M3; NCCL's ncclFloat8e4m3.
  kF8E5M2   // OCP fp8 E5M2 (IEEE-like, max 57344), stored as Fp8E5M2; NCCL's ncclFloat8e5m2.
};

// Every dtype, for tests and tables.
inline constexpr DType kAllDTypes[] = {DType::kF32,    DType::kF64,   DType::kF16, DType::kBF16,
                                       DType::kI8,     DType::kU8,    DType::kI32, DType::kI64,
                                       DType::kF8E4M3, DType::kF8E5M2};

// Size of one element in bytes; 0 for a value outside the enum. Inline: validation and records
// ask it several times per op.
constexpr size_t dtype_size_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
  }
  return 0;
}
// Short lowercase name: "f32", "bf16", ...; "unknown" outside the enum. Static storage.
std::string_view dtype_name(DType dtype);
// True for f32, f64, f16, bf16 and the fp8 types.
bool is_floating(DType dtype);
// True for the fp8 types, whose 2-3 mantissa bits hold few integers exactly (tests skip them where
// they compare sums of integers).
bool is_fp8(DType dtype);

// IEEE 754 binary16 storage; arithmetic goes through float.
struct Half {
  uint16_t bits = 0;  // The raw binary16 encoding.
};
// bfloat16 storage (the upper half of a float); arithmetic goes through float.
struct BFloat16 {
  uint16_t bits = 0;  // The upper 16 bits of the float encoding.
};

// fp8 E4M3 "fn" storage (PyTorch's Float8_e4m3fn); arithmetic goes through float.
struct Fp8E4M3 {
  uint8_t bits = 0;  // Sign, 4 exponent bits (bias 7), 3 mantissa bits; 0x7f/0xff are NaN.
};
// fp8 E5M2 storage (PyTorch's Float8_e5m2); arithmetic goes through float.
struct Fp8E5M2 {
  uint8_t bits = 0;  // Sign, 5 exponent bits (bias 15), 2 mantissa bits: the top byte of a half.
};

// The exact float value of `h`.
float to_float(Half h);
// The exact float value of `b`.
float to_float(BFloat16 b);
// `f` rounded to nearest even; overflow gives infinity, NaN stays NaN.
Half to_half(float f);
// `f` rounded to nearest even; NaN stays NaN.
BFloat16 to_bfloat16(float f);
// The exact float value of `v`.
float to_float(Fp8E4M3 v);
// The exact float value of `v`.
float to_float(Fp8E5M2 v);
// `f` rounded to nearest even; beyond the largest finite value (448) gives NaN, as E4M3 "fn" has
// no infinity (PyTorch's unsaturated conversion); NaN stays NaN.
Fp8E4M3 to_fp8_e4m3(float f);
// `f` rounded to nearest even; overflow gives infinity, NaN stays NaN.
Fp8E5M2 to_fp8_e5m2(float f);

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
template <>
constexpr DType dtype_of<Fp8E4M3>() {
  return DType::kF8E4M3;
}
template <>
constexpr DType dtype_of<Fp8E5M2>() {
  return DType::kF8E5M2;
}

}  // namespace meshrt
