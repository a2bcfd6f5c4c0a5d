// kernels/cpu/block_scales_avx2.h: the scales of 8 blocks at once from their amaxes with AVX2,
// block_scales_avx512.h's steps with AVX2's instructions (blends and compares for the masks), bit
// for bit the scalar code of the CPU quantize: E8M0 codes and multipliers (MX) and f32 scales
// with their inverses (IEEE division is correctly rounded in both). The avx2 quantize variant's
// blocks of rows, 1 x N grids and MX, in the row pass and in the transposed copy, where the scalar
// code took a few dozen cycles per block. Only included on x86-64 GCC/clang; the functions carry
// their own target.
// defines: cpu::avx2::e8m0_from_amax_bits, cpu::avx2::e8m0_multiplier,
//          cpu::avx2::f32_scale_from_amax_bits, cpu::avx2::block_scales,
//          cpu::avx2::e8m0_lanes, cpu::avx2::e8m0_multipliers, cpu::avx2::scale_lanes (for tests)
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx2 {

#define OCTET_AVX2_TARGET __attribute__((target("avx2,fma,f16c,bmi2")))
#define OCTET_AVX2_INLINE [[gnu::always_inline]] inline OCTET_AVX2_TARGET

// E8M0 codes of 8 amaxes given as the bits of |x| (NaN above Inf) for a format whose largest
// finite value is fp8_max: block_scales_avx512.h's e8m0_from_amax_bits. Every |x| bit pattern is
// below 2^31, so signed compares serve.
OCTET_AVX2_INLINE __m256i e8m0_from_amax_bits(__m256i m, float fp8_max) {
  const int max_bits = static_cast<int>(f32_bits(fp8_max));
  __m256i e = _mm256_add_epi32(_mm256_srli_epi32(m, 23), _mm256_set1_epi32(127 - (max_bits >> 23)));
  const __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(m, _mm256_set1_epi32(0x007FFFFF)),
                                        _mm256_set1_epi32(max_bits & 0x007FFFFF));
  e = _mm256_sub_epi32(e, up);  // a true lane is -1
  e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_setzero_si256()), _mm256_set1_epi32(254));
  const __m256i zero = _mm256_cmpeq_epi32(m, _mm256_setzero_si256());
  const __m256i below_normal = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), m);
  const __m256i nonfinite = _mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7F7FFFFF));
  e = _mm256_andnot_si256(below_normal, e);  // zero and subnormals: 0, zero fixed below
  return _mm256_blendv_epi8(e, _mm256_set1_epi32(127), _mm256_or_si256(zero, nonfinite));
}

// The multiplier for E8M0 codes e (0..254): exactly 2^(127 - e), the subnormal 2^-127 for 254.
OCTET_AVX2_INLINE __m256 e8m0_multiplier(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23);
  const __m256i last = _mm256_cmpeq_epi32(e, _mm256_set1_epi32(254));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, _mm256_set1_epi32(0x00400000), last));
}

// f32 scales of 8 amaxes given as |x| bits: fp8_max / amax, FLT_MAX where that overflows, 1 where
// amax is zero, Inf or NaN; pow2 keeps only the sign and exponent.
OCTET_AVX2_INLINE __m256 f32_scale_from_amax_bits(__m256i m, float fp8_max, bool pow2) {
  const __m256i invalid = _mm256_or_si256(_mm256_cmpeq_epi32(m, _mm256_setzero_si256()),
                                          _mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7F7FFFFF)));
  __m256 scale = _mm256_div_ps(_mm256_set1_ps(fp8_max), _mm256_castsi256_ps(m));
  scale = _mm256_min_ps(scale, _mm256_set1_ps(3.402823466e38f));
  scale = _mm256_blendv_ps(scale, _mm256_set1_ps(1.0f), _mm256_castsi256_ps(invalid));
  if (pow2) {
    scale = _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(scale),
                                                 _mm256_set1_epi32(static_cast<int>(0xFF800000u))));
  }
  return scale;
}

// The n blocks of amax[0, n): mult[b] their multipliers, scale_inv[b] what the scale_inv tensor
// stores for them (the E8M0 code, or the bits of the f32 1 / scale). Each group of 8 is read
// through a copy and the last one written through copies, so no array is read or written past
// n. The f32 division runs in every lane (zero, Inf and NaN lanes are replaced after it): it may
// raise the divide-by-zero and invalid flags, which nothing here traps.
inline OCTET_AVX2_TARGET void block_scales(const uint32_t* amax, int64_t n, bool e8m0,
                                           float fp8_max, bool pow2, float* mult,
                                           uint32_t* scale_inv) {
  for (int64_t b0 = 0; b0 < n; b0 += 8) {
    const int64_t k = n - b0 < 8 ? n - b0 : 8;
    alignas(32) uint32_t a[8] = {};
    for (int64_t l = 0; l < k; ++l) a[l] = amax[b0 + l];
    __m256 m;
    __m256i inv;
    const __m256i bits = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
    if (e8m0) {
      inv = e8m0_from_amax_bits(bits, fp8_max);
      m = e8m0_multiplier(inv);
    } else {
      m = f32_scale_from_amax_bits(bits, fp8_max, pow2);
      inv = _mm256_castps_si256(_mm256_div_ps(_mm256_set1_ps(1.0f), m));
    }
    if (k == 8) {
      _mm256_storeu_ps(mult + b0, m);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(scale_inv + b0), inv);
    } else {
      alignas(32) float mo[8];
      alignas(32) uint32_t io[8];
      _mm256_store_ps(mo, m);
      _mm256_store_si256(reinterpret_cast<__m256i*>(io), inv);
      for (int64_t l = 0; l < k; ++l) {
        mult[b0 + l] = mo[l];
        scale_inv[b0 + l] = io[l];
      }
    }
  }
}

// For tests: the E8M0 codes and multipliers, or the f32 scales, of 8 amax bit patterns.
inline OCTET_AVX2_TARGET void e8m0_lanes(const uint32_t* amax_bits, float fp8_max, int32_t* codes,
                                         float* mult) {
  const __m256i e =
      e8m0_from_amax_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(amax_bits)), fp8_max);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), e);
  _mm256_storeu_ps(mult, e8m0_multiplier(e));
}
inline OCTET_AVX2_TARGET void e8m0_multipliers(const int32_t* codes, float* mult) {
  _mm256_storeu_ps(mult,
                   e8m0_multiplier(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes))));
}
inline OCTET_AVX2_TARGET void scale_lanes(const uint32_t* amax_bits, float fp8_max, bool pow2,
                                          float* scale) {
  _mm256_storeu_ps(
      scale, f32_scale_from_amax_bits(
                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(amax_bits)), fp8_max, pow2));
}

#undef OCTET_AVX2_INLINE
#undef OCTET_AVX2_TARGET

}  // namespace octet::kernels::cpu::avx2
