// kernels/cpu/bf16_round_avx2.h: bf16 in AVX2 lanes: 8 values widened to f32 lanes, and 8 floats
// rounded to bf16 bit for bit as core/convert.h's f32_to_bf16 (round to nearest even, NaN quieted
// with its sign and payload kept), the AVX2 twin of bf16_round_avx512.h. Internal to kernels/cpu:
// the AVX2 residual add (elementwise_cpu.cpp), RoPE rotation (rope_cpu.cpp), SwiGLU and loss rows
// (vector_math.h) and FP8 encoder (fp8_encode_avx2.h). Only on x86-64 GCC/clang; carries its own
// target.
// defines: cpu::avx2::load_bf16, cpu::avx2::round_to_bf16, cpu::avx2::load, cpu::avx2::store
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <cstdint>

#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx2 {

// 8 bf16 values (a plain 16-byte load) as f32 lanes: exact.
[[gnu::always_inline]] inline __attribute__((target("avx2"))) __m256 load_bf16(const uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 8 floats to bf16, in the low 128 bits (the order of the lanes kept).
[[gnu::always_inline]] inline __attribute__((target("avx2"))) __m128i round_to_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  // |u| and Inf's bits are below 2^31: a signed compare orders them.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane <= 0xFFFF
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// 8 f32 or bf16 values as f32 lanes, and back (bf16 rounded as f32_to_bf16).
[[gnu::always_inline]] inline __attribute__((target("avx2"))) __m256 load(const float* x) {
  return _mm256_loadu_ps(x);
}
[[gnu::always_inline]] inline __attribute__((target("avx2"))) __m256 load(const uint16_t* x) {
  return load_bf16(x);
}
[[gnu::always_inline]] inline __attribute__((target("avx2"))) void store(float* y, __m256 v) {
  _mm256_storeu_ps(y, v);
}
[[gnu::always_inline]] inline __attribute__((target("avx2"))) void store(uint16_t* y, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), round_to_bf16(v));
}

}  // namespace octet::kernels::cpu::avx2
#endif
