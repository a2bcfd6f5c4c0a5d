// kernels/cpu/attention_tile_ops.h: the fp32 tile primitives of the tiled CPU attention
// (attention_tiled_cpu.cpp) with AVX-512: the 32 x 32 score product with fused
// multiply-adds, the causal lane mask, the weighted accumulation of rows and the two
// softmax rows (forward, and P and dS of the backward pass). attention_tile_ops_avx2.h has
// the same functions for AVX2. Internal to kernels/cpu; only where OCTET_CPU_VECTOR_EXP.
// defines: cpu::attn::avx512::tile_scores, causal, accumulate, softmax_row, probabilities_row
#pragma once

#include "kernels/cpu/vector_math.h"

#if defined(OCTET_CPU_VECTOR_EXP)
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/attention_cpu.h"

namespace octet::kernels::cpu::attn::avx512 {

constexpr int64_t T = kTile;  // rows and keys per tile (two vectors of 16 lanes)
static_assert(T == 32, "the score kernels hold a tile row in two vectors");

// out[r][j] = (sum_c a[r][c] bt[c][j]) * scale for r, j < T, c in increasing order (one
// fused multiply-add per term): a [T][hd] rows, bt [hd][T] (a block transposed).
OCTET_AVX512 inline void tile_scores(const float* a, const float* bt, int64_t hd, float scale,
                                     float* out, int64_t ld) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < T; r += 4) {
    __m512 acc[4][2];
    for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < hd; ++c) {
      const __m512 b0 = _mm512_loadu_ps(bt + c * T), b1 = _mm512_loadu_ps(bt + c * T + 16);
      for (int64_t k = 0; k < 4; ++k) {
        const __m512 x = _mm512_set1_ps(a[(r + k) * hd + c]);
        acc[k][0] = _mm512_fmadd_ps(x, b0, acc[k][0]);
        acc[k][1] = _mm512_fmadd_ps(x, b1, acc[k][1]);
      }
    }
    for (int64_t k = 0; k < 4; ++k) {
      _mm512_storeu_ps(out + (r + k) * ld, _mm512_mul_ps(acc[k][0], s));
      _mm512_storeu_ps(out + (r + k) * ld + 16, _mm512_mul_ps(acc[k][1], s));
    }
  }
}

// The lanes of 16 keys from j that row i may see (j <= i): a mask.
OCTET_AVX512 inline __mmask16 causal(int64_t j, int64_t i) {
  const int64_t n = std::clamp<int64_t>(i - j + 1, 0, 16);
  return static_cast<__mmask16>((uint32_t{1} << n) - 1);
}

// Rows i0..i0+R of accumulate below, V vectors of lanes from c0 (masks m), terms t0..t1: R
// rows at once, so that each load of x feeds R x V independent chains of fused multiply-adds.
// (The loops are unrolled by the pragmas so that the accumulators stay in registers.)
template <int R, int V>
OCTET_AVX512 inline void accumulate_rows(float* c, int64_t i0, const float* w, int64_t wi,
                                         int64_t wt, const float* x, int64_t t0, int64_t t1,
                                         int64_t hd, int64_t c0, const __mmask16* m) {
  __m512 acc[R * V];
#pragma GCC unroll 16
  for (int e = 0; e < R * V; ++e)
    acc[e] = _mm512_maskz_loadu_ps(m[e % V], c + (i0 + e / V) * hd + c0 + 16 * (e % V));
  for (int64_t t = t0; t < t1; ++t) {
    const float* xt = x + t * hd + c0;
    __m512 xv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) xv[v] = _mm512_maskz_loadu_ps(m[v], xt + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(w[(i0 + r) * wi + t * wt]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[V * r + v] = _mm512_fmadd_ps(s, xv[v], acc[V * r + v]);
    }
  }
#pragma GCC unroll 16
  for (int e = 0; e < R * V; ++e)
    _mm512_mask_storeu_ps(c + (i0 + e / V) * hd + c0 + 16 * (e % V), m[e % V], acc[e]);
}

// accumulate below for the lanes c0.. of V vectors: groups of R rows (16 accumulators),
// then one row at a time; each group's terms are those of its rows' bands.
template <int V>
OCTET_AVX512 inline void accumulate_lanes(float* c, int64_t rows, const float* w, int64_t wi,
                                          int64_t wt, const float* x, int64_t n, int64_t hd,
                                          Band band, int64_t c0, const __mmask16* m) {
  constexpr int R = 16 / V;
  int64_t i = 0;
  for (; i + R <= rows; i += R) {
    const auto [t0, t1] = band.terms(i, R, n);
    if (t0 < t1) accumulate_rows<R, V>(c, i, w, wi, wt, x, t0, t1, hd, c0, m);
  }
  for (; i < rows; ++i) {
    const auto [t0, t1] = band.terms(i, 1, n);
    if (t0 < t1) accumulate_rows<1, V>(c, i, w, wi, wt, x, t0, t1, hd, c0, m);
  }
}

// c[i][:] += sum_t w(i, t) x[t][:] over the terms t < n of row i's band, t in increasing
// order (one fused multiply-add per term) for i < rows, with w(i, t) = w[i * wi + t * wt]: c
// and x rows of hd floats.
OCTET_AVX512 inline void accumulate(float* c, int64_t rows, const float* w, int64_t wi, int64_t wt,
                                    const float* x, int64_t n, int64_t hd, Band band) {
  for (int64_t c0 = 0; c0 < hd; c0 += 64) {
    const int64_t lanes = std::min<int64_t>(64, hd - c0);
    __mmask16 m[4];
    for (int k = 0; k < 4; ++k) m[k] = causal(k * 16, lanes - 1);
    switch ((lanes + 15) / 16) {
      case 1:
        accumulate_lanes<1>(c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
      case 2:
        accumulate_lanes<2>(c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
      case 3:
        accumulate_lanes<3>(c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
      default:
        accumulate_lanes<4>(c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
    }
  }
}

// Row i of a forward tile's scores s (keys from 0 to `end`, a multiple of 16), each multiplied
// by `scale` as it is read (1: already scaled): m = max_{j <= i} s_j, then s_j = exp(s_j - m) (0
// for j > i), l = sum_j s_j.
OCTET_AVX512 inline void softmax_row(float* s, int64_t i, int64_t end, float* m_out, float* l_out,
                                     float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mv = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j <= i; j += 16)
    mv = _mm512_mask_max_ps(mv, causal(j, i), mv, _mm512_mul_ps(_mm512_loadu_ps(s + j), sc));
  const float m = _mm512_reduce_max_ps(mv);
  const __m512 mb = _mm512_set1_ps(m);
  __m512 lv = _mm512_setzero_ps();
  for (int64_t j = 0; j < end; j += 16) {
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + j), sc);
    const __m512 p = _mm512_maskz_mov_ps(causal(j, i), exp16(_mm512_sub_ps(x, mb)));
    _mm512_storeu_ps(s + j, p);
    lv = _mm512_add_ps(lv, p);
  }
  *m_out = m;
  *l_out = _mm512_reduce_add_ps(lv);
}

// Row i of a backward tile against the keys j0..j0 + T: p_j = exp(s_j - lse) (0 for key
// j0 + j > i), given its scores in p (each multiplied by `scale` as it is read; 1: already
// scaled), and ds_j = p_j (ds_j - d), given dout_i . v_j in ds.
OCTET_AVX512 inline void probabilities_row(float* p, float* ds, int64_t j0, int64_t i, float lse,
                                           float d, float scale) {
  const __m512 lse_v = _mm512_set1_ps(lse), d_v = _mm512_set1_ps(d), sc = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < T; j += 16) {
    const __mmask16 m = causal(j0 + j, i);
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(p + j), sc);
    const __m512 pv = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(x, lse_v)));
    _mm512_storeu_ps(p + j, pv);
    _mm512_storeu_ps(ds + j, _mm512_mul_ps(pv, _mm512_sub_ps(_mm512_loadu_ps(ds + j), d_v)));
  }
}

}  // namespace octet::kernels::cpu::attn::avx512
#endif
