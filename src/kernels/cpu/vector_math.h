// kernels/cpu/vector_math.h: SLEEF's vector exp for the AVX-512 and AVX2 variants of the CPU
// kernels (1 ulp, as glibc's expf), where the build found SLEEF (OCTET_HAVE_SLEEF), and the
// loads and stores of f32 or bf16 rows with a tail that those variants share. Internal to
// kernels/cpu.
// defines: OCTET_AVX512, OCTET_AVX2, OCTET_CPU_VECTOR_EXP, cpu::exp16, cpu::load16,
//          cpu::store16, cpu::exp8, cpu::lanes8, cpu::load8, cpu::store8,
//          cpu::reduce_max8, cpu::reduce_add8
#pragma once

#if defined(OCTET_HAVE_SLEEF) && defined(__x86_64__) && defined(__GNUC__)
#include <cstdint>

#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/bf16_round_avx2.h"
#include "kernels/cpu/bf16_round_avx512.h"
#include "kernels/cpu/intrinsics.h"

#define OCTET_CPU_VECTOR_EXP 1
// The target of the functions that use AVX-512 (the machine is checked at run time).
#define OCTET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")))

// The target of the AVX2 variants: the isa.h level avx2 (AVX2, FMA, F16C, BMI2).
#define OCTET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2")))

// sleef.h declares its AVX-512 and AVX2 functions only where the whole file is compiled for
// them; octet turns them on per function, so it declares the ones it calls.
extern "C" __attribute__((target("avx512f"))) __m512 Sleef_expf16_u10avx512f(__m512);
extern "C" __attribute__((target("avx2,fma"))) __m256 Sleef_expf8_u10avx2(__m256);

namespace octet::kernels::cpu {

OCTET_AVX512 inline __m512 exp16(__m512 x) {
  return Sleef_expf16_u10avx512f(x);
}

// The first min(n, 16) values of x as f32 lanes; the other lanes are `fill`.
OCTET_AVX512 inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}
OCTET_AVX512 inline __m512 load16(const float* x, int64_t n, float fill = 0.0f) {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(n), x);
}
OCTET_AVX512 inline __m512 load16(const uint16_t* x, int64_t n, float fill = 0.0f) {
  const __mmask16 m = first_lanes(n);
  return _mm512_mask_blend_ps(m, _mm512_set1_ps(fill), avx512::load_bf16(x, m));
}

// The first min(n, 16) lanes of v to y, each rounded once to y's type (from_f32's rounding).
template <typename A>
OCTET_AVX512 inline void store16(A* y, __m512 v, int64_t n) {
  if (n >= 16) {  // whole vectors round in lanes (lane by lane: 7-17% of SwiGLU's time)
    avx512::store(y, v);
    return;
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  const int64_t k = n < 16 ? n : 16;
  for (int64_t i = 0; i < k; ++i) y[i] = from_f32<A>(lanes[i]);
}

OCTET_AVX2 inline __m256 exp8(__m256 x) {
  return Sleef_expf8_u10avx2(x);
}

// Lane l of the result is all ones where l < n (AVX2 has no mask registers).
OCTET_AVX2 inline __m256i lanes8(int64_t n) {
  const int32_t k = n < 8 ? static_cast<int32_t>(n) : 8;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The first min(n, 8) values of x as f32 lanes; the other lanes are `fill`.
OCTET_AVX2 inline __m256 load8(const float* x, int64_t n, float fill = 0.0f) {
  if (n >= 8) return _mm256_loadu_ps(x);
  const __m256i m = lanes8(n);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(x, m), _mm256_castsi256_ps(m));
}
OCTET_AVX2 inline __m256 load8(const uint16_t* x, int64_t n, float fill = 0.0f) {
  alignas(16) uint16_t tail[8] = {};
  const uint16_t* src = x;
  if (n < 8) {
    for (int64_t i = 0; i < n; ++i) tail[i] = x[i];
    src = tail;
  }
  const __m256 v = avx2::load_bf16(src);
  if (n >= 8) return v;
  return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(lanes8(n)));
}

// The largest lane of v, and the sum of its lanes in a fixed order (halves, then pairs).
OCTET_AVX2 inline float reduce_max8(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}
OCTET_AVX2 inline float reduce_add8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

// The first min(n, 8) lanes of v to y, each rounded once to y's type (from_f32's rounding).
template <typename A>
OCTET_AVX2 inline void store8(A* y, __m256 v, int64_t n) {
  if (n >= 8) {  // whole vectors round in lanes, as store16 does
    avx2::store(y, v);
    return;
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  const int64_t k = n < 8 ? n : 8;
  for (int64_t i = 0; i < k; ++i) y[i] = from_f32<A>(lanes[i]);
}

}  // namespace octet::kernels::cpu
#endif
