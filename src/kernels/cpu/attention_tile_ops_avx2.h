// kernels/cpu/attention_tile_ops_avx2.h: the fp32 tile primitives of the tiled CPU attention
// (attention_tiled_cpu.cpp) with AVX2, for CPUs without AVX-512 (AMD Zen 2 and 3, Intel's
// client cores since Alder Lake): the functions of attention_tile_ops.h, 8 lanes at a time.
// The score product and the accumulation add the same terms in the same order with one fused
// multiply-add each, so they give the AVX-512 kernels' bits; the softmax rows sum their lanes
// in another order. Internal to kernels/cpu; only where OCTET_CPU_VECTOR_EXP.
// defines: cpu::attn::avx2::tile_scores, causal, accumulate, softmax_row, probabilities_row
#pragma once

#include "kernels/cpu/vector_math.h"

#if defined(OCTET_CPU_VECTOR_EXP)
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace octet::kernels::cpu::attn::avx2 {

constexpr int64_t T = kTile;  // rows and keys per tile (four vectors of 8 lanes)
static_assert(T == 32, "the score kernels hold a tile row in four vectors");

// out[r][j] = (sum_c a[r][c] bt[c][j]) * scale for r, j < T, c in increasing order (one
// fused multiply-add per term): a [T][hd] rows, bt [hd][T] (a block transposed). Two rows at
// a time: 8 accumulators, 4 rows of bt and a broadcast fit AVX2's 16 registers.
OCTET_AVX2 inline void tile_scores(const float* a, const float* bt, int64_t hd, float scale,
                                   float* out, int64_t ld) {
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t r = 0; r < T; r += 2) {
    __m256 acc[2][4];
    for (auto& row : acc)
      for (__m256& v : row) v = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; ++c) {
      const float* b = bt + c * T;
      const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
      const __m256 b2 = _mm256_loadu_ps(b + 16), b3 = _mm256_loadu_ps(b + 24);
      for (int64_t k = 0; k < 2; ++k) {
        const __m256 x = _mm256_set1_ps(a[(r + k) * hd + c]);
        acc[k][0] = _mm256_fmadd_ps(x, b0, acc[k][0]);
        acc[k][1] = _mm256_fmadd_ps(x, b1, acc[k][1]);
        acc[k][2] = _mm256_fmadd_ps(x, b2, acc[k][2]);
        acc[k][3] = _mm256_fmadd_ps(x, b3, acc[k][3]);
      }
    }
    for (int64_t k = 0; k < 2; ++k) {
      for (int64_t q = 0; q < 4; ++q)
        _mm256_storeu_ps(out + (r + k) * ld + 8 * q, _mm256_mul_ps(acc[k][q], s));
    }
  }
}

// The lanes of 8 keys from j that row i may see (j <= i): all ones where it may.
OCTET_AVX2 inline __m256 causal(int64_t j, int64_t i) {
  return _mm256_castsi256_ps(lanes8(std::clamp<int64_t>(i - j + 1, 0, 8)));
}

// 8 floats at `at`, or those of the lanes of m (the others 0, never read).
template <bool kFull>
OCTET_AVX2 inline __m256 load_lanes(const float* at, __m256i m) {
  return kFull ? _mm256_loadu_ps(at) : _mm256_maskload_ps(at, m);
}

// Rows i0..i0+R of accumulate below, V vectors of lanes from c0 (all of them where kFull,
// else those of the masks m), terms t0..t1: R rows at once, so that each load of x feeds
// R x V chains of fused multiply-adds.
template <int R, int V, bool kFull>
OCTET_AVX2 inline void accumulate_rows(float* c, int64_t i0, const float* w, int64_t wi, int64_t wt,
                                       const float* x, int64_t t0, int64_t t1, int64_t hd,
                                       int64_t c0, const __m256i* m) {
  __m256 acc[R * V];
#pragma GCC unroll 8
  for (int e = 0; e < R * V; ++e)
    acc[e] = load_lanes<kFull>(c + (i0 + e / V) * hd + c0 + 8 * (e % V), m[e % V]);
  for (int64_t t = t0; t < t1; ++t) {
    const float* xt = x + t * hd + c0;
    __m256 xv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) xv[v] = load_lanes<kFull>(xt + 8 * v, m[v]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(w[(i0 + r) * wi + t * wt]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[V * r + v] = _mm256_fmadd_ps(s, xv[v], acc[V * r + v]);
    }
  }
#pragma GCC unroll 8
  for (int e = 0; e < R * V; ++e) {
    float* at = c + (i0 + e / V) * hd + c0 + 8 * (e % V);
    if (kFull) {
      _mm256_storeu_ps(at, acc[e]);
    } else {
      _mm256_maskstore_ps(at, m[e % V], acc[e]);
    }
  }
}

// accumulate below for the lanes c0.. of V vectors: groups of R rows (8 accumulators), then
// one row at a time; each group's terms are those of its rows' bands.
template <int V, bool kFull>
OCTET_AVX2 inline void accumulate_lanes(float* c, int64_t rows, const float* w, int64_t wi,
                                        int64_t wt, const float* x, int64_t n, int64_t hd,
                                        Band band, int64_t c0, const __m256i* m) {
  constexpr int R = 8 / V > 0 ? 8 / V : 1;
  int64_t i = 0;
  for (; i + R <= rows; i += R) {
    const auto [t0, t1] = band.terms(i, R, n);
    if (t0 < t1) accumulate_rows<R, V, kFull>(c, i, w, wi, wt, x, t0, t1, hd, c0, m);
  }
  for (; i < rows; ++i) {
    const auto [t0, t1] = band.terms(i, 1, n);
    if (t0 < t1) accumulate_rows<1, V, kFull>(c, i, w, wi, wt, x, t0, t1, hd, c0, m);
  }
}

template <int V>
OCTET_AVX2 inline void accumulate_chunk(bool full, float* c, int64_t rows, const float* w,
                                        int64_t wi, int64_t wt, const float* x, int64_t n,
                                        int64_t hd, Band band, int64_t c0, const __m256i* m) {
  if (full) return accumulate_lanes<V, true>(c, rows, w, wi, wt, x, n, hd, band, c0, m);
  accumulate_lanes<V, false>(c, rows, w, wi, wt, x, n, hd, band, c0, m);
}

// c[i][:] += sum_t w(i, t) x[t][:] over the terms t < n of row i's band, t in increasing
// order (one fused multiply-add per term) for i < rows, with w(i, t) = w[i * wi + t * wt]: c
// and x rows of hd floats.
OCTET_AVX2 inline void accumulate(float* c, int64_t rows, const float* w, int64_t wi, int64_t wt,
                                  const float* x, int64_t n, int64_t hd, Band band) {
  for (int64_t c0 = 0; c0 < hd; c0 += 32) {
    const int64_t lanes = std::min<int64_t>(32, hd - c0);
    __m256i m[4];
    for (int k = 0; k < 4; ++k) m[k] = lanes8(std::clamp<int64_t>(lanes - 8 * k, 0, 8));
    const bool full = lanes % 8 == 0;
    switch ((lanes + 7) / 8) {
      case 1:
        accumulate_chunk<1>(full, c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
      case 2:
        accumulate_chunk<2>(full, c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
      case 3:
        accumulate_chunk<3>(full, c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
      default:
        accumulate_chunk<4>(full, c, rows, w, wi, wt, x, n, hd, band, c0, m);
        break;
    }
  }
}

// Row i of a forward tile's scores s (keys from 0 to `end`, a multiple of 8), each multiplied by
// `scale` as it is read (1: already scaled): m = max_{j <= i} s_j, then s_j = exp(s_j - m) (0 for
// j > i), l = sum_j s_j.
OCTET_AVX2 inline void softmax_row(float* s, int64_t i, int64_t end, float* m_out, float* l_out,
                                   float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 mv = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j <= i; j += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), sc);
    mv = _mm256_blendv_ps(mv, _mm256_max_ps(mv, x), causal(j, i));
  }
  const float m = reduce_max8(mv);
  const __m256 mb = _mm256_set1_ps(m);
  __m256 lv = _mm256_setzero_ps();
  for (int64_t j = 0; j < end; j += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), sc);
    const __m256 p = _mm256_and_ps(causal(j, i), exp8(_mm256_sub_ps(x, mb)));
    _mm256_storeu_ps(s + j, p);
    lv = _mm256_add_ps(lv, p);
  }
  *m_out = m;
  *l_out = reduce_add8(lv);
}

// Row i of a backward tile against the keys j0..j0 + T: p_j = exp(s_j - lse) (0 for key
// j0 + j > i), given its scores in p (each multiplied by `scale` as it is read; 1: already
// scaled), and ds_j = p_j (ds_j - d), given dout_i . v_j in ds.
OCTET_AVX2 inline void probabilities_row(float* p, float* ds, int64_t j0, int64_t i, float lse,
                                         float d, float scale) {
  const __m256 lse_v = _mm256_set1_ps(lse), d_v = _mm256_set1_ps(d), sc = _mm256_set1_ps(scale);
  for (int64_t j = 0; j < T; j += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(p + j), sc);
    const __m256 pv = _mm256_and_ps(causal(j0 + j, i), exp8(_mm256_sub_ps(x, lse_v)));
    _mm256_storeu_ps(p + j, pv);
    _mm256_storeu_ps(ds + j, _mm256_mul_ps(pv, _mm256_sub_ps(_mm256_loadu_ps(ds + j), d_v)));
  }
}

}  // namespace octet::kernels::cpu::attn::avx2
#endif
