// kernels/cpu/fp8_encode_avx2.h: f32 -> E4M3/E5M2 for 8 floats at a time with AVX2, bit for
// bit core/convert.h's f32_to_e4m3/f32_to_e5m2 (every input class, as the AVX-512 encoder of
// fp8_encode_avx512.h, whose steps it takes with AVX2's instructions: blends for the masks, a
// byte shuffle for the narrowing), and the quantize kernels' encode loop built on it
// (kernels/cpu/quantize_cpu.cpp's avx2 variant). GCC's vectorisation of the scalar encoder
// took about four cycles per value on an AMD Zen 3; this takes about one. Only included on
// x86-64 GCC/clang; the functions carry their own target.
// defines: cpu::avx2::encode8, cpu::avx2::encode_run
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/convert.h"
#include "kernels/cpu/bf16_round_avx2.h"
#include "kernels/cpu/fp8_encode_vec.h"
#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx2 {

// As in fp8_encode_avx512.h: the helpers are inlined into encode_run, a real call from the
// quantize loops once per run of elements.
#define OCTET_AVX2_TARGET __attribute__((target("avx2,fma,f16c,bmi2")))
#define OCTET_AVX2_INLINE [[gnu::always_inline]] inline OCTET_AVX2_TARGET

// The codes of 8 floats, one in the low byte of each 32-bit lane (the other bytes are not
// zero in the FP8-subnormal lanes). `limit`: the max code (saturate) or max code + 1. The
// AVX-512 encoder's steps: round to nearest even at the FP8 mantissa by an integer add, clamp
// to `limit`; below the smallest normal the FPU's rounding of |v| + magic; NaN's code unless
// !kNan; the sign to bit 7. Every |v| bit pattern is below 2^31, so signed compares serve.
template <bool kE4M3, bool kNan>
OCTET_AVX2_INLINE __m256i encode8(__m256 v, __m256i limit) {
  using F = Fp8Vec<kE4M3>;
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  // mag + bias + (the kept lsb), >> shift, at most limit.
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, F::shift), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(static_cast<int>(F::bias))), lsb);
  const __m256i normal = _mm256_min_epu32(_mm256_srli_epi32(r, F::shift), limit);
  const __m256i sub =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(F::f.min_normal_bits)), mag);
  const __m256 small =
      _mm256_add_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(F::f.subnormal_magic));
  __m256i code = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(normal), small, _mm256_castsi256_ps(sub)));
  if constexpr (kNan) {
    const __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7F800000));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(static_cast<int>(F::f.nan_code)), nan);
  }
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
  return _mm256_or_si256(code, sign);
}

// The low bytes of the 8 lanes, in order, in the low 8 bytes of the result.
OCTET_AVX2_INLINE __m128i narrow8(__m256i code) {
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(code, pick);
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}

OCTET_AVX2_INLINE __m256 scale8(float scale, int64_t) {
  return _mm256_set1_ps(scale);
}
OCTET_AVX2_INLINE __m256 scale8(const float* scale, int64_t i) {
  return _mm256_loadu_ps(scale + i);
}

// The counts of encode_run for one vector (fp8_encode_avx512.h's count16): one more in the
// lanes of `sat` whose finite x has |v| at or past the overflow boundary, and in those of
// `flush` whose nonzero finite x got the code ±0 (lanes read as x = 0: neither).
template <bool kE4M3>
OCTET_AVX2_INLINE void count8(__m256 xv, __m256 v, __m256i code, __m256i& sat, __m256i& flush) {
  constexpr uint32_t overflow_bits = kE4M3 ? f32_bits(464.0f) + 1 : f32_bits(61440.0f);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i xm = _mm256_and_si256(_mm256_castps_si256(xv), abs_mask);
  const __m256i vm = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
  const __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000), xm);
  const __m256i over = _mm256_and_si256(
      finite, _mm256_cmpgt_epi32(vm, _mm256_set1_epi32(static_cast<int>(overflow_bits - 1))));
  const __m256i zero_x = _mm256_cmpeq_epi32(xm, _mm256_setzero_si256());
  const __m256i zero_code =
      _mm256_cmpeq_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x7F)), _mm256_setzero_si256());
  const __m256i flushed = _mm256_andnot_si256(zero_x, _mm256_and_si256(finite, zero_code));
  sat = _mm256_sub_epi32(sat, over);  // a true lane is -1
  flush = _mm256_sub_epi32(flush, flushed);
}

// The sum of the 8 lanes.
OCTET_AVX2_INLINE uint64_t lane_sum(__m256i v) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  uint64_t s = 0;
  for (uint32_t l : lanes) s += l;
  return s;
}

// One step of encode_run: 8 values at x, v = x * s, into 8 bytes at out.
template <class In, bool kE4M3, bool kCount, bool kNan>
OCTET_AVX2_INLINE void encode_step(const In* x, __m256 s, uint8_t* out, __m256i limit, __m256i& sat,
                                   __m256i& flush) {
  const __m256 xv = load(x);  // bf16_round_avx2.h
  const __m256 v = _mm256_mul_ps(xv, s);
  const __m256i code = encode8<kE4M3, kNan>(v, limit);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), narrow8(code));
  if constexpr (kCount) count8<kE4M3>(xv, v, code, sat, flush);
}

template <class In, bool kE4M3, bool kCount, bool kNan, class Scale>
OCTET_AVX2_INLINE void encode_run_as(const In* __restrict x, uint8_t* __restrict out, int64_t n,
                                     Scale scale, bool saturate, uint64_t& saturated,
                                     uint64_t& flushed) {
  constexpr detail::Fp8Layout f = Fp8Vec<kE4M3>::f;
  static_assert(f.overflow_code == f.max_code + 1);
  const __m256i limit = _mm256_set1_epi32(static_cast<int>(saturate ? f.max_code : f.max_code + 1));
  // Counts per lane, summed every kChunk elements (far below 2^31 per lane).
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = n - begin > kChunk ? begin + kChunk : n;
    __m256i sat = _mm256_setzero_si256(), flush = _mm256_setzero_si256();
    int64_t i = begin;
    for (; i + 8 <= end; i += 8)
      encode_step<In, kE4M3, kCount, kNan>(x + i, scale8(scale, i), out + i, limit, sat, flush);
    if (i < end) {
      // The tail through zero-filled copies: lanes past the end read as x = 0 (no counts) and
      // scale 0, and only the tail's bytes are written back.
      const int64_t k = end - i;
      In xt[8] = {};
      float st[8] = {};
      uint8_t ot[8];
      std::memcpy(xt, x + i, static_cast<size_t>(k) * sizeof(In));
      for (int64_t l = 0; l < k; ++l) {
        if constexpr (std::is_same_v<Scale, float>) {
          st[l] = scale;
        } else {
          st[l] = scale[i + l];
        }
      }
      encode_step<In, kE4M3, kCount, kNan>(xt, _mm256_loadu_ps(st), ot, limit, sat, flush);
      std::memcpy(out + i, ot, static_cast<size_t>(k));
    }
    if constexpr (kCount) {
      saturated += lane_sum(sat);
      flushed += lane_sum(flush);
    }
  }
}

// out[i] = code of x[i] * scale (one float, or one per element), with the counts of
// fp8_encode_avx512.h's encode_run (kCount) and its use of `amax_bits`: at most Inf's, x
// holds no NaN and the NaN select is left out.
template <class In, bool kE4M3, bool kCount, class Scale>
inline OCTET_AVX2_TARGET void encode_run(const In* __restrict x, uint8_t* __restrict out, int64_t n,
                                         Scale scale, bool saturate, uint32_t amax_bits,
                                         uint64_t& saturated, uint64_t& flushed) {
  if (amax_bits <= 0x7F800000u) {
    encode_run_as<In, kE4M3, kCount, false>(x, out, n, scale, saturate, saturated, flushed);
  } else {
    encode_run_as<In, kE4M3, kCount, true>(x, out, n, scale, saturate, saturated, flushed);
  }
}

#undef OCTET_AVX2_INLINE
#undef OCTET_AVX2_TARGET

}  // namespace octet::kernels::cpu::avx2
