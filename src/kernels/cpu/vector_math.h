// kernels/cpu/vector_math.h: SLEEF's vector exp for the AVX-512 variants of the CPU kernels
// (1 ulp, as glibc's expf), where the build found SLEEF (OCTET_HAVE_SLEEF). Internal to
// kernels/cpu.
// defines: OCTET_AVX512, OCTET_CPU_VECTOR_EXP, cpu::exp16, cpu::load16, cpu::store16
#pragma once

#if defined(OCTET_HAVE_SLEEF) && defined(__x86_64__) && defined(__GNUC__)
#include <cstdint>

#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/intrinsics.h"

#define OCTET_CPU_VECTOR_EXP 1
// The target of the functions that use AVX-512 (the machine is checked at run time).
#define OCTET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")))

// sleef.h declares its AVX-512 functions only where the whole file is compiled for AVX-512;
// octet turns AVX-512 on per function, so it declares the one it calls.
extern "C" __attribute__((target("avx512f"))) __m512 Sleef_expf16_u10avx512f(__m512);

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
  const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)), 16);
  return _mm512_mask_blend_ps(m, _mm512_set1_ps(fill), _mm512_castsi512_ps(bits));
}

// The first min(n, 16) lanes of v to y, each rounded once to y's type (from_f32's rounding).
template <typename A>
OCTET_AVX512 inline void store16(A* y, __m512 v, int64_t n) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  const int64_t k = n < 16 ? n : 16;
  for (int64_t i = 0; i < k; ++i) y[i] = from_f32<A>(lanes[i]);
}

}  // namespace octet::kernels::cpu
#endif
