//===- Float16.h - f16 and bf16 <-> f32 conversions -------------*- C++ -*-===//
//
// The storage dtypes' conversions, for the tools and the tests (the
// compiled kernels convert on their own). Rounding is to nearest, ties to
// even, as arith.truncf, x86's vcvtps2ph and PTX's cvt.rn do; NaNs stay
// NaNs, overflow gives infinity.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_FLOAT16_H
#define ATTN_RUNTIME_FLOAT16_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace attn {

inline uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// IEEE binary16 (f16).
inline uint16_t floatToHalf(float value) {
  uint32_t bits = bitsOf(value);
  uint32_t sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) // inf, NaN (kept quiet)
    return static_cast<uint16_t>(
        sign | 0x7c00u |
        (magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0));
  if (magnitude >= 0x477ff000u) // 65520 and above round to infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) // below 2^-14: a subnormal (or zero)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(
                                            floatOf(magnitude) * 16777216.0f)));
  // Rebias the exponent (127 -> 15) and round 23 mantissa bits to 10.
  magnitude += 0xfffu + ((magnitude >> 13) & 1u);
  magnitude -= (127u - 15u) << 23;
  return static_cast<uint16_t>(sign | (magnitude >> 13));
}

inline float halfToFloat(uint16_t half) {
  uint32_t sign = (half & 0x8000u) << 16, exponent = (half >> 10) & 0x1fu,
           mantissa = half & 0x3ffu;
  if (exponent == 0) {
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31)
    return floatOf(sign | 0x7f800000u | (mantissa << 13));
  return floatOf(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// bfloat16: the upper half of an f32.
inline uint16_t floatToBf16(float value) {
  uint32_t bits = bitsOf(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16ToFloat(uint16_t bf16) {
  return floatOf(static_cast<uint32_t>(bf16) << 16);
}

} // namespace attn

#endif // ATTN_RUNTIME_FLOAT16_H
