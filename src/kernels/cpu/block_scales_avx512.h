// kernels/cpu/block_scales_avx512.h: the scales of 16 blocks at once from their amaxes with
// AVX-512, bit for bit the scalar code of the CPU quantize: E8M0 codes and multipliers (MX;
// kernels/quantize.h's e8m0_scale_inv_from_amax, quantize_cpu.cpp's e8m0_reciprocal) and f32
// scales with their inverses (kernels/quantize.h's scale_from_amax with no margin; IEEE
// division is correctly rounded in both). Only included on x86-64 GCC/clang; the functions
// carry their own target.
// defines: cpu::avx512::e8m0_from_amax_bits, cpu::avx512::e8m0_multiplier,
//          cpu::avx512::f32_scale_from_amax_bits, cpu::avx512::block_scales16,
//          cpu::avx512::block_scales,
//          cpu::avx512::e8m0_lanes, cpu::avx512::e8m0_multipliers, cpu::avx512::scale_lanes
//          (the last three for tests)
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx512 {

#define OCTET_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define OCTET_AVX512_INLINE [[gnu::always_inline]] inline OCTET_AVX512_TARGET

// E8M0 codes of 16 amaxes given as the bits of |x| (NaN above Inf, as the quantize loops
// keep them) for a format whose largest finite value is fp8_max (a normal f32):
// zero, Inf and NaN give 127 (2^0), f32 subnormals 0; a normal amax with exponent field E
// and mantissa field M gives E - E(fp8_max) + 127, plus one when M > M(fp8_max) (amax is
// then above fp8_max * 2^(E - E(fp8_max)), whose mantissa is fp8_max's), clamped to
// [0, 254]: the scalar's ceil(log2(amax / fp8_max)) + 127, without its float products.
OCTET_AVX512_INLINE __m512i e8m0_from_amax_bits(__m512i m, float fp8_max) {
  const int max_bits = static_cast<int>(f32_bits(fp8_max));
  const __m512i mant_mask = _mm512_set1_epi32(0x007FFFFF);
  __m512i e = _mm512_add_epi32(_mm512_srli_epi32(m, 23), _mm512_set1_epi32(127 - (max_bits >> 23)));
  const __mmask16 up = _mm512_cmpgt_epi32_mask(_mm512_and_si512(m, mant_mask),
                                               _mm512_set1_epi32(max_bits & 0x007FFFFF));
  e = _mm512_mask_add_epi32(e, up, e, _mm512_set1_epi32(1));
  e = _mm512_min_epi32(_mm512_max_epi32(e, _mm512_setzero_si512()), _mm512_set1_epi32(254));
  const __m512i min_normal = _mm512_set1_epi32(0x00800000);
  const __mmask16 subnormal =
      _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(m, m), m, min_normal);
  const __mmask16 unit = _mm512_kor(_mm512_testn_epi32_mask(m, m),
                                    _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32(0x7F800000)));
  e = _mm512_mask_mov_epi32(e, subnormal, _mm512_setzero_si512());
  return _mm512_mask_mov_epi32(e, unit, _mm512_set1_epi32(127));
}

// The multiplier for E8M0 codes e (0..254): exactly 2^(127 - e), that is the f32 with
// exponent field 254 - e, or the subnormal 2^-127 (bits 0x00400000) for e = 254.
OCTET_AVX512_INLINE __m512 e8m0_multiplier(__m512i e) {
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(254), e), 23);
  const __mmask16 last = _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(254));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(normal, last, _mm512_set1_epi32(0x00400000)));
}

// f32 scales of 16 amaxes given as |x| bits: fp8_max / amax, FLT_MAX where that overflows,
// 1 where amax is zero, Inf or NaN; pow2 keeps only the sign and exponent.
OCTET_AVX512_INLINE __m512 f32_scale_from_amax_bits(__m512i m, float fp8_max, bool pow2) {
  const __mmask16 valid =
      _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(m, m), m, _mm512_set1_epi32(0x7F800000));
  __m512 scale = _mm512_mask_div_ps(_mm512_set1_ps(1.0f), valid, _mm512_set1_ps(fp8_max),
                                    _mm512_castsi512_ps(m));
  scale = _mm512_min_ps(scale, _mm512_set1_ps(3.402823466e38f));
  if (pow2) {
    scale = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(scale),
                                                 _mm512_set1_epi32(static_cast<int>(0xFF800000u))));
  }
  return scale;
}

// The multipliers of 16 blocks from their amax bits; scale_inv gets what the scale_inv
// tensor stores for each: the E8M0 code (e8m0) or the bits of the f32 1 / scale.
OCTET_AVX512_INLINE __m512 block_scales16(__m512i amax, bool e8m0, float fp8_max, bool pow2,
                                          __m512i& scale_inv) {
  if (e8m0) {
    scale_inv = e8m0_from_amax_bits(amax, fp8_max);
    return e8m0_multiplier(scale_inv);
  }
  const __m512 scale = f32_scale_from_amax_bits(amax, fp8_max, pow2);
  scale_inv = _mm512_castps_si512(_mm512_div_ps(_mm512_set1_ps(1.0f), scale));
  return scale;
}

// The n blocks of amax[0, n): mult[b] their multipliers, scale_inv[b] what the scale_inv
// tensor stores for them (the E8M0 code, or the bits of the f32 1 / scale).
inline OCTET_AVX512_TARGET void block_scales(const uint32_t* amax, int64_t n, bool e8m0,
                                             float fp8_max, bool pow2, float* mult,
                                             uint32_t* scale_inv) {
  for (int64_t b0 = 0; b0 < n; b0 += 16) {
    const __mmask16 k =
        n - b0 >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - b0)) - 1);
    __m512i inv;
    const __m512 m =
        block_scales16(_mm512_maskz_loadu_epi32(k, amax + b0), e8m0, fp8_max, pow2, inv);
    _mm512_mask_storeu_ps(mult + b0, k, m);
    _mm512_mask_storeu_epi32(scale_inv + b0, k, inv);
  }
}

// For tests: the E8M0 codes and multipliers, or the f32 scales, of 16 amax bit patterns.
inline OCTET_AVX512_TARGET void e8m0_lanes(const uint32_t* amax_bits, float fp8_max, int32_t* codes,
                                           float* mult) {
  const __m512i e = e8m0_from_amax_bits(_mm512_loadu_si512(amax_bits), fp8_max);
  _mm512_storeu_si512(codes, e);
  _mm512_storeu_ps(mult, e8m0_multiplier(e));
}
inline OCTET_AVX512_TARGET void e8m0_multipliers(const int32_t* codes, float* mult) {
  _mm512_storeu_ps(mult, e8m0_multiplier(_mm512_loadu_si512(codes)));
}
inline OCTET_AVX512_TARGET void scale_lanes(const uint32_t* amax_bits, float fp8_max, bool pow2,
                                            float* scale) {
  _mm512_storeu_ps(scale, f32_scale_from_amax_bits(_mm512_loadu_si512(amax_bits), fp8_max, pow2));
}

#undef OCTET_AVX512_INLINE
#undef OCTET_AVX512_TARGET

}  // namespace octet::kernels::cpu::avx512
