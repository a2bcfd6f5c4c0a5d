// core/convert.h: bit-exact scalar conversions between f32, bf16, f16, the OCP
// OFP8 formats E4M3/E5M2 and the E8M0 scale format. Inline and branch-free so
// that the array loops in kernels/cpu vectorize them.
// defines: Overflow, ScaleRounding, f32_bits, f32_from_bits, f32_to_e4m3, f32_to_e5m2,
//          e4m3_to_f32, e5m2_to_f32, fp8_to_f32, f32_to_fp8, f32_to_bf16, bf16_to_f32,
//          f32_to_f16, f16_to_f32, f32_to_e8m0, e8m0_to_f32
#pragma once

#include <cstdint>

#include "core/dtype.h"

// The scalar conversions compile for the host and for CUDA devices alike, so the
// CUDA kernels produce the same bits as the CPU ones by construction.
#if defined(__CUDACC__)
#define OCTET_HD __host__ __device__ __forceinline__
#else
#define OCTET_HD inline
#endif

namespace octet {

// What a finite value beyond the format's range, or an infinity, becomes.
enum class Overflow : uint8_t {
  saturate,   // to ±max finite (448 for E4M3, 57344 for E5M2); the default for training
  nonfinite,  // to NaN for E4M3 (it has no infinity), to ±Inf for E5M2
};

// How an E8M0 (power-of-two) scale is chosen for a positive value.
enum class ScaleRounding : uint8_t {
  down,  // largest power of two <= x
  up,    // smallest power of two >= x
};

OCTET_HD constexpr uint32_t f32_bits(float x) {
  return __builtin_bit_cast(uint32_t, x);
}
OCTET_HD constexpr float f32_from_bits(uint32_t u) {
  return __builtin_bit_cast(float, u);
}

namespace detail {

// The constants that make one FP8 format. All conversions share one routine.
struct Fp8Layout {
  uint32_t mantissa_bits;
  uint32_t rebias;           // (127 - bias) << mantissa_bits: f32 exponent to FP8 exponent
  uint32_t min_normal_bits;  // f32 bits of the smallest FP8 normal
  float subnormal_magic;     // 2^(log2(subnormal quantum) + 23): x + magic rounds x to the quantum
  uint32_t subnormal_magic_bits;
  uint32_t max_code;       // largest finite magnitude code
  uint32_t overflow_code;  // magnitude code of a non-saturated overflow (NaN or Inf)
  uint32_t nan_code;       // magnitude code written for NaN inputs (ml_dtypes' choice)
};

OCTET_HD constexpr Fp8Layout e4m3_layout() {
  return {3, (127 - 7) << 3, (127 - 6) << 23, 0x1p14f, (127 + 14) << 23, 0x7E, 0x7F, 0x7F};
}
OCTET_HD constexpr Fp8Layout e5m2_layout() {
  return {2, (127 - 15) << 2, (127 - 14) << 23, 0x1p7f, (127 + 7) << 23, 0x7B, 0x7C, 0x7E};
}

// Round to nearest, ties to even, keeping subnormals. Normal results come from
// integer rounding of the f32 bits; subnormal ones from one float addition of a
// magic number whose ulp is the FP8 subnormal quantum (the FPU rounds to nearest
// even), which also yields the smallest normal when a subnormal rounds up.
OCTET_HD uint8_t f32_to_fp8(float x, Fp8Layout f, bool saturate) {
  const uint32_t bits = f32_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7FFFFFFFu;
  const uint32_t shift = 23 - f.mantissa_bits;

  const uint32_t rounded = mag + ((1u << (shift - 1)) - 1) + ((mag >> shift) & 1u);
  const uint32_t normal = (rounded >> shift) - f.rebias;
  const float sub = f32_from_bits(mag) + f.subnormal_magic;
  const uint32_t subnormal = f32_bits(sub) - f.subnormal_magic_bits;

  uint32_t code = mag < f.min_normal_bits ? subnormal : normal;
  const uint32_t overflowed = saturate ? f.max_code : f.overflow_code;
  code = (mag >= f.min_normal_bits && normal > f.max_code) ? overflowed : code;
  code = mag > 0x7F800000u ? f.nan_code : code;
  return static_cast<uint8_t>(sign | code);
}

// Exact decode by construction of the f32 bits.
OCTET_HD float fp8_decode(uint8_t v, uint32_t mantissa_bits, int bias, bool has_inf) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v & 0x7Fu) >> mantissa_bits;
  const uint32_t man = v & ((1u << mantissa_bits) - 1);
  const uint32_t max_exp = (1u << (7 - mantissa_bits)) - 1;
  float mag;
  if (exp == 0) {
    // subnormal: man * 2^(1 - bias - mantissa_bits), exact in f32
    mag = static_cast<float>(man) *
          f32_from_bits(static_cast<uint32_t>(127 + 1 - bias - static_cast<int>(mantissa_bits))
                        << 23);
  } else if (has_inf && exp == max_exp) {
    mag = man == 0 ? f32_from_bits(0x7F800000u) : f32_from_bits(0x7FC00000u);
  } else if (!has_inf && exp == max_exp && man == (1u << mantissa_bits) - 1) {
    mag = f32_from_bits(0x7FC00000u);
  } else {
    mag = f32_from_bits(((exp + 127 - bias) << 23) | (man << (23 - mantissa_bits)));
  }
  return f32_from_bits(f32_bits(mag) | sign);
}

}  // namespace detail

OCTET_HD uint8_t f32_to_e4m3(float x, Overflow overflow = Overflow::saturate) {
  return detail::f32_to_fp8(x, detail::e4m3_layout(), overflow == Overflow::saturate);
}
OCTET_HD uint8_t f32_to_e5m2(float x, Overflow overflow = Overflow::saturate) {
  return detail::f32_to_fp8(x, detail::e5m2_layout(), overflow == Overflow::saturate);
}
OCTET_HD float e4m3_to_f32(uint8_t v) {
  return detail::fp8_decode(v, 3, 7, false);
}
OCTET_HD float e5m2_to_f32(uint8_t v) {
  return detail::fp8_decode(v, 2, 15, true);
}

// Format chosen at run time (dtype must be e4m3 or e5m2).
uint8_t f32_to_fp8(float x, DType fp8, Overflow overflow = Overflow::saturate);
float fp8_to_f32(uint8_t v, DType fp8);

// bf16: round to nearest even; NaN stays NaN (quieted, sign kept).
OCTET_HD uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}
OCTET_HD float bf16_to_f32(uint16_t v) {
  return f32_from_bits(static_cast<uint32_t>(v) << 16);
}

// IEEE binary16, round to nearest even (after Maratyszcza's FP16 library). A NaN is made
// with integer operations (payload kept, quieted): the float multiply below would pass it
// through as x86 does (payload kept) on the CPU but as the canonical NaN 0x7FFFFFFF on a GPU
// (seen on an H100, 2026-11-24), and both must give the same bits.
OCTET_HD float f16_to_f32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  if ((h & 0x7FFFu) > 0x7C00u) return f32_from_bits(sign | 0x7FC00000u | (h & 0x03FFu) << 13);
  const uint32_t two_w = w + w;
  const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1p-112f;
  const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result = two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized);
  return f32_from_bits(sign | result);
}
OCTET_HD uint16_t f32_to_f16(float f) {
  const float abs_f = f32_from_bits(f32_bits(f) & 0x7FFFFFFFu);
  float base = (abs_f * 0x1p112f) * 0x1p-110f;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = f32_bits(base);
  const uint32_t nonsign = ((b >> 13) & 0x7C00u) + (b & 0x0FFFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// E8M0: value 2^(e - 127) for e in 0..254, 0xFF is NaN. Positive finite inputs
// are rounded as asked and clamped to [2^-127, 2^127]; zero, negative and
// non-finite inputs have no E8M0 value and give NaN (0xFF).
uint8_t f32_to_e8m0(float x, ScaleRounding rounding);
OCTET_HD float e8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return f32_from_bits(0x7FC00000u);
  if (e == 0) return 0x1p-127f;
  return f32_from_bits(static_cast<uint32_t>(e) << 23);
}

}  // namespace octet
