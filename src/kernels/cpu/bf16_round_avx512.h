// kernels/cpu/bf16_round_avx512.h: 16 floats rounded to bf16 in AVX-512 lanes, bit for bit
// core/convert.h's f32_to_bf16 (round to nearest even, NaN quieted with its sign and payload
// kept); vcvtneps2bf16 would flush subnormals to zero. And 16 bf16 values widened to f32 lanes.
// Internal to kernels/cpu: the loads and stores of the SwiGLU and loss rows (vector_math.h) and
// of the FP8 encoders (fp8_encode_avx512.h), the block FP8 micro-kernel's C
// (gemm_fp8_block_cpu.cpp), the residual add and the RoPE rotation (bf16_round_avx2.h is the
// AVX2 twin). Only on x86-64 GCC/clang; carries its own target.
// defines: cpu::avx512::round_to_bf16, cpu::avx512::load_bf16, cpu::avx512::load,
//          cpu::avx512::store
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <cstdint>

#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx512 {

// 16 bf16 values as f32 lanes (exact): a plain load, or the lanes of m (the others 0).
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw,avx512vl"))) __m512 load_bf16(
    const uint16_t* x) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw,avx512vl"))) __m512 load_bf16(
    const uint16_t* x, __mmask16 m) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)), 16));
}

[[gnu::always_inline]] inline __attribute__((target("avx512f"))) __m256i round_to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}

// 16 f32 or bf16 values as f32 lanes (plain loads), and back (bf16 rounded as f32_to_bf16; plain
// stores: masked ones are slow on the AMD Zen 4 measured).
[[gnu::always_inline]] inline __attribute__((target("avx512f"))) __m512 load(const float* x) {
  return _mm512_loadu_ps(x);
}
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw,avx512vl"))) __m512 load(
    const uint16_t* x) {
  return load_bf16(x);
}
[[gnu::always_inline]] inline __attribute__((target("avx512f"))) void store(float* y, __m512 v) {
  _mm512_storeu_ps(y, v);
}
[[gnu::always_inline]] inline __attribute__((target("avx512f"))) void store(uint16_t* y, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), round_to_bf16(v));
}

}  // namespace octet::kernels::cpu::avx512
#endif
