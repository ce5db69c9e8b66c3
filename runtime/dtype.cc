#include "runtime/dtype.h"

#include <bit>
#include <cmath>
#include <limits>

namespace meshrt {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF8E4M3:
      return "f8e4m3";
    case DType::kF8E5M2:
      return "f8e5m2";
  }
  return "unknown";
}

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 ||
         dtype == DType::kBF16 || is_fp8(dtype);
}

bool is_fp8(DType dtype) { return dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2; }

namespace {

// Decodes an fp8 value with `mant_bits` mantissa bits and exponent bias `bias`; `e4m3fn` selects
// E4M3's encoding (no infinity; only S.1111.111 is NaN).
float decode_fp8(uint8_t bits, int mant_bits, int bias, bool e4m3fn) {
  const bool neg = (bits & 0x80) != 0;
  const int exp_bits = 7 - mant_bits;
  const int exp = (bits >> mant_bits) & ((1 << exp_bits) - 1);
  const int mant = bits & ((1 << mant_bits) - 1);
  const int exp_max = (1 << exp_bits) - 1;
  float v;
  if (e4m3fn && exp == exp_max && mant == (1 << mant_bits) - 1) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (!e4m3fn && exp == exp_max) {
    v = mant == 0 ? std::numeric_limits<float>::infinity()
                  : std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), 1 - bias - mant_bits);
  } else {
    v = std::ldexp(static_cast<float>(mant + (1 << mant_bits)), exp - bias - mant_bits);
  }
  return neg ? -v : v;
}

// Rounds |f| to the nearest of the positive codes 0..max_code (monotonic in value), ties to the
// even code; returns -1 when |f| lies beyond max_code's value by half an ulp or more.
int encode_magnitude(float a, int max_code, int mant_bits, int bias, bool e4m3fn) {
  int lo = 0, hi = max_code;
  while (lo < hi) {  // The first code whose value is >= a.
    const int mid = (lo + hi) / 2;
    if (decode_fp8(static_cast<uint8_t>(mid), mant_bits, bias, e4m3fn) < a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const float above = decode_fp8(static_cast<uint8_t>(lo), mant_bits, bias, e4m3fn);
  if (above < a) {  // Beyond the largest finite value: overflow unless within half an ulp.
    const float ulp = above - decode_fp8(static_cast<uint8_t>(lo - 1), mant_bits, bias, e4m3fn);
    return a - above < ulp / 2 ? lo : -1;
  }
  if (above == a || lo == 0) return lo;
  const float below = decode_fp8(static_cast<uint8_t>(lo - 1), mant_bits, bias, e4m3fn);
  if (a - below < above - a) return lo - 1;
  if (above - a < a - below) return lo;
  return (lo & 1) == 0 ? lo : lo - 1;
}

}  // namespace

float to_float(Fp8E4M3 v) { return decode_fp8(v.bits, 3, 7, true); }
float to_float(Fp8E5M2 v) { return decode_fp8(v.bits, 2, 15, false); }

Fp8E4M3 to_fp8_e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return Fp8E4M3{static_cast<uint8_t>(sign | 0x7f)};
  const int code = std::isinf(f) ? -1 : encode_magnitude(std::fabs(f), 0x7e, 3, 7, true);
  return Fp8E4M3{static_cast<uint8_t>(sign | (code < 0 ? 0x7f : code))};
}

Fp8E5M2 to_fp8_e5m2(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return Fp8E5M2{static_cast<uint8_t>(sign | 0x7e)};
  const int code = std::isinf(f) ? -1 : encode_magnitude(std::fabs(f), 0x7b, 2, 15, false);
  return Fp8E5M2{static_cast<uint8_t>(sign | (code < 0 ? 0x7c : code))};
}

float to_float(BFloat16 b) { return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16); }

BFloat16 to_bfloat16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

float to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1f;
  uint32_t mant = h.bits & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal half: normalise into a float.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    return std::bit_cast<float>(sign | static_cast<uint32_t>(127 - 15 - e) << 23 |
                                (mant & 0x3ff) << 13);
  }
  return std::bit_cast<float>(sign | (exp + 112) << 23 | mant << 13);
}

Half to_half(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or nan
    return Half{static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0))};
  }
  if (abs >= 0x477ff000) return Half{static_cast<uint16_t>(sign | 0x7c00)};  // overflow to inf
  if (abs < 0x38800000) {  // subnormal or zero half
    if (abs < 0x33000000) return Half{sign};
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half_way = 1u << (shift - 1);
    if (rem > half_way || (rem == half_way && (h & 1))) ++h;
    return Half{static_cast<uint16_t>(sign | h)};
  }
  uint32_t h = ((abs >> 13) - (112 << 10));
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return Half{static_cast<uint16_t>(sign | h)};
}

}  // namespace meshrt
