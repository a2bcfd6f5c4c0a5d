// kernels/cpu/attention_dot_bf16.h: the tiled CPU attention's score products (q.k^T and
// dout.v^T of a 32 x 32 tile) from bf16 operands with AVX512_BF16's vdpbf16ps, where the
// machine has it: each product of two bf16 values is exact in fp32 and is added to an fp32
// sum with one rounding (to nearest even; denormals flushed to zero), so the result is an
// fp32 sum of the exact products as tile_scores' fused multiply-adds give, in another
// order. Internal to kernels/cpu (attention_tiled_cpu.cpp).
// defines: OCTET_AVX512_BF16, cpu::attn::bf16_dot_available, cpu::attn::pack_rows16,
//          cpu::attn::pack_pairs16, cpu::attn::tile_scores16
#pragma once

#include "kernels/cpu/vector_math.h"

#if defined(OCTET_CPU_VECTOR_EXP)
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/isa.h"

// The target of the functions that use vdpbf16ps (the machine is checked at run time).
#define OCTET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi2")))

namespace octet::kernels::cpu::attn {

// Whether the tiled kernels may take their bf16 score products from vdpbf16ps.
inline bool bf16_dot_available() {
  static const bool hardware = hardware_has_avx512_bf16();
  return hardware && usable_isa("attention") == Isa::avx512;
}

// rows x hd bf16 values (row stride `stride`) as rows of hd; rows up to kTile zero.
inline void pack_rows16(const uint16_t* src, int64_t stride, int64_t rows, int64_t hd,
                        uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * hd, src + r * stride, hd * 2);
  std::fill(dst + rows * hd, dst + kTile * hd, uint16_t{0});
}

// n rows of hd bf16 values (hd even) as pairs of columns: dst[c / 2 * kTile + j] holds
// row j's columns c (low half) and c + 1; zero for j >= n.
inline void pack_pairs16(const uint16_t* src, int64_t stride, int64_t n, int64_t hd,
                         uint32_t* dst) {
  std::fill(dst, dst + hd / 2 * kTile, 0u);
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t* row = src + j * stride;
    for (int64_t c = 0; c < hd; c += 2)
      dst[c / 2 * kTile + j] = row[c] | static_cast<uint32_t>(row[c + 1]) << 16;
  }
}

// out[r][j] = (sum_c a[r][c] b[j][c]) * scale for r, j < kTile: a [kTile][hd] bf16 rows
// (pack_rows16), b as pack_pairs16 packs it, hd even.
OCTET_AVX512_BF16 inline void tile_scores16(const uint16_t* a, const uint32_t* bp, int64_t hd,
                                            float scale, float* out, int64_t ld) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < kTile; r += 4) {
    __m512 acc[8];
#pragma GCC unroll 8
    for (int e = 0; e < 8; ++e) acc[e] = _mm512_setzero_ps();
    for (int64_t c2 = 0; c2 < hd / 2; ++c2) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + c2 * kTile);
      const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + c2 * kTile + 16);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        uint32_t pair;
        std::memcpy(&pair, a + (r + k) * hd + 2 * c2, 4);
        const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
        acc[2 * k] = _mm512_dpbf16_ps(acc[2 * k], x, b0);
        acc[2 * k + 1] = _mm512_dpbf16_ps(acc[2 * k + 1], x, b1);
      }
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      _mm512_storeu_ps(out + (r + k) * ld, _mm512_mul_ps(acc[2 * k], s));
      _mm512_storeu_ps(out + (r + k) * ld + 16, _mm512_mul_ps(acc[2 * k + 1], s));
    }
  }
}

}  // namespace octet::kernels::cpu::attn
#endif
