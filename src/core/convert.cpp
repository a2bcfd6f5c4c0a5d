// core/convert.cpp: the out-of-line conversions.
#include "core/convert.h"

#include <bit>

#include "core/error.h"

namespace octet {

uint8_t f32_to_fp8(float x, DType fp8, Overflow overflow) {
  if (fp8 == DType::e4m3) return f32_to_e4m3(x, overflow);
  if (fp8 == DType::e5m2) return f32_to_e5m2(x, overflow);
  OCTET_FAIL("convert", "f32_to_fp8 takes e4m3 or e5m2, not ", dtype_name(fp8));
}

float fp8_to_f32(uint8_t v, DType fp8) {
  if (fp8 == DType::e4m3) return e4m3_to_f32(v);
  if (fp8 == DType::e5m2) return e5m2_to_f32(v);
  OCTET_FAIL("convert", "fp8_to_f32 takes e4m3 or e5m2, not ", dtype_name(fp8));
}

uint8_t f32_to_e8m0(float x, ScaleRounding rounding) {
  const uint32_t u = f32_bits(x);
  if (!(x > 0.0f) || u >= 0x7F800000u) return 0xFF;
  int exponent;  // floor(log2(x)) + 127, may be < 1 for f32 subnormals
  bool exact;
  if ((u >> 23) == 0) {
    // f32 subnormal: x = m * 2^-149 with m < 2^23
    const int msb = 31 - std::countl_zero(u);  // floor(log2(m))
    exponent = msb - 149 + 127;
    exact = (u & (u - 1)) == 0;
  } else {
    exponent = static_cast<int>(u >> 23);
    exact = (u & 0x7FFFFFu) == 0;
  }
  if (rounding == ScaleRounding::up && !exact) ++exponent;
  if (exponent < 0) exponent = 0;
  if (exponent > 254) exponent = 254;
  return static_cast<uint8_t>(exponent);
}

}  // namespace octet
