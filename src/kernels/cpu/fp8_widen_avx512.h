// kernels/cpu/fp8_widen_avx512.h: 32 FP8 codes widened to the bf16 bits of their values in one
// AVX-512 register (exact: every E4M3 and E5M2 value is a bf16 value), by the table of the 128
// magnitudes (fp8_bf16_table) held in four registers. Shared by the quantize's wide copies
// (fp8_encode_avx512.h), the FP8 GEMMs' widening loops (gemm_fp8_fused_cpu.cpp) and the panels
// of B that the block micro-kernel packs from codes (gemm_fp8_block_cpu.cpp). Only included on
// x86-64 GCC/clang; the functions carry their own target.
// defines: cpu::avx512::load_widen_table, cpu::avx512::widen_magnitudes, cpu::avx512::with_sign,
//          cpu::avx512::widen32
#pragma once

#include <cstdint>

#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx512 {

// A format's table (|code| -> the bf16 bits of its value, 128 entries) in four registers.
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw"))) void load_widen_table(
    const uint16_t* table, __m512i* t) {
  for (int i = 0; i < 4; ++i) t[i] = _mm512_loadu_si512(table + 32 * i);
}

// The bf16 bits of |value| of 32 codes, one code in each 16-bit lane. vpermt2w reads the low six
// bits of each index and bit 6 picks the half, so the sign and any bits above it are never read.
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw"))) __m512i widen_magnitudes(
    __m512i codes, const __m512i* t) {
  const __m512i lo = _mm512_permutex2var_epi16(t[0], codes, t[1]);
  const __m512i hi = _mm512_permutex2var_epi16(t[2], codes, t[3]);
  return _mm512_mask_mov_epi16(lo, _mm512_test_epi16_mask(codes, _mm512_set1_epi16(0x40)), hi);
}

// v | (code << 8 & 0x8000): each lane's code's sign (bit 7) on its bf16 bits.
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw"))) __m512i with_sign(
    __m512i v, __m512i codes) {
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(codes, 8),
                                   _mm512_set1_epi16(static_cast<int16_t>(0x8000)), 0xF8);
}

// The 32 codes at `in` in the lanes of m (the others read as code 0, whose value is +0) widened.
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw,avx512vl"))) __m512i widen32(
    const uint8_t* in, __mmask32 m, const __m512i* t) {
  const __m512i codes = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, in));
  return with_sign(widen_magnitudes(codes, t), codes);
}

}  // namespace octet::kernels::cpu::avx512
