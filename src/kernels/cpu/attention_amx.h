// kernels/cpu/attention_amx.h: the tiled CPU attention's fp32 products (P v, dS k, dS^T q,
// P^T dout) on AMX, where its score products are (attention_dot_bf16.h: bf16 data, head_dim a
// multiple of 32, inside an AmxScores scope). The fp32 operand (P or dS) is split into three
// bf16 values, x = hi + mid + lo, each x's remainder cut to its leading 8 significant bits: hi
// takes x's first 8 bits, mid the next 8 of x - hi (at most 16 bits, exact in fp32), lo the rest
// of x - hi - mid (at most 8 bits, so exactly a bf16). The split is exact for |x| >= 2^-103 (lo
// normal; below, each part that is not loses less than 2^-126), and the parts have x's sign, so
// that their magnitudes add to |x|. The bf16 operand (v, k, q, dout) is exact in bf16. tdpbf16ps
// then adds the exact products of each of the three parts to the fp32 accumulator with one rounding
// each, per K step of 32 in increasing order and the three parts in turn: an fp32 sum of 3n exact
// terms whose magnitudes add to those of the n products it stands for. This keeps the CPU
// contract (fp32 math, P and dS never rounded to bf16 as the CUDA flash path rounds them); the
// float64 test holds it to that sum's bound. Internal to kernels/cpu (attention_tiled.inc).
// defines: cpu::attn::split_rows3, cpu::attn::split_pairs3, cpu::attn::pack_row_pairs16,
//          cpu::attn::pack_transposed16, cpu::attn::amx_accumulate
#pragma once

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/attention_cpu.h"

#if defined(OCTET_HAVE_AMX)
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/byte_transpose_avx512.h"

namespace octet::kernels::cpu::attn {

// x = hi + mid + lo (see above), each as fp32 bits with zero low halves.
OCTET_AMX inline void split3(__m512 x, __m512i* parts) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  parts[0] = _mm512_and_si512(_mm512_castps_si512(x), high);
  const __m512 r1 = _mm512_sub_ps(x, _mm512_castsi512_ps(parts[0]));
  parts[1] = _mm512_and_si512(_mm512_castps_si512(r1), high);
  parts[2] = _mm512_castps_si512(_mm512_sub_ps(r1, _mm512_castsi512_ps(parts[1])));
}

// The high halves of a's and then b's 16 lanes: 32 bf16 in order.
OCTET_AMX inline __m512i high_halves(__m512i a, __m512i b) {
  alignas(64) static constexpr uint16_t kOdd[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                    23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                    45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(a, _mm512_load_si512(kOdd), b);
}

// The three parts of rows x cols fp32 values w (row stride ldw; cols a multiple of 32) as AMX
// A operands: part p at out + p * part, row r at r * cols (bf16, K along the row).
OCTET_AMX inline void split_rows3(const float* w, int64_t ldw, int64_t rows, int64_t cols,
                                  uint16_t* out, int64_t part) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 32) {
      __m512i a[3], b[3];
      split3(_mm512_loadu_ps(w + r * ldw + c), a);
      split3(_mm512_loadu_ps(w + r * ldw + c + 16), b);
      for (int p = 0; p < 3; ++p)
        _mm512_storeu_si512(out + p * part + r * cols + c, high_halves(a[p], b[p]));
    }
  }
}

// The three parts of `terms` rows of 32 fp32 values w (row stride ldw) as AMX B operands (K
// along the rows, in pairs): part p at out + p * part, pair row t / 2 at t / 2 * 32, lane j
// holding row t's value in its low half and row t + 1's in its high half; terms even.
OCTET_AMX inline void split_pairs3(const float* w, int64_t ldw, int64_t terms, uint32_t* out,
                                   int64_t part) {
  for (int64_t t = 0; t < terms; t += 2) {
    for (int64_t c = 0; c < 32; c += 16) {
      __m512i a[3], b[3];
      split3(_mm512_loadu_ps(w + t * ldw + c), a);
      split3(_mm512_loadu_ps(w + (t + 1) * ldw + c), b);
      for (int p = 0; p < 3; ++p) {
        const __m512i pair = _mm512_mask_blend_epi16(0x55555555, b[p], _mm512_srli_epi32(a[p], 16));
        _mm512_storeu_si512(out + p * part + t / 2 * 32 + c, pair);
      }
    }
  }
}

// Rows t and t + 1 of n bf16 rows (row stride `stride`), columns c..c + 15, as 16 32-bit lanes:
// row t's value in the low half, row t + 1's in the high half (zero for rows past n).
OCTET_AMX inline __m512i row_pair(const uint16_t* src, int64_t stride, int64_t t, int64_t n,
                                  int64_t c) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i lo =
      t < n ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t * stride + c)) : zero;
  const __m256i hi =
      t + 1 < n ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (t + 1) * stride + c))
                : zero;
  return _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

// n rows of hd bf16 values (row stride `stride`, hd a multiple of 16) as an AMX B operand with
// K along the rows: dst[t / 2 * hd + c] = row_pair(t, c), for pair rows up to `rows_pad` / 2.
OCTET_AMX inline void pack_row_pairs16(const uint16_t* src, int64_t stride, int64_t n,
                                       int64_t rows_pad, int64_t hd, uint32_t* dst) {
  for (int64_t t = 0; t < rows_pad; t += 2) {
    for (int64_t c = 0; c < hd; c += 16)
      _mm512_storeu_si512(dst + t / 2 * hd + c, row_pair(src, stride, t, n, c));
  }
}

// rows x hd bf16 values (row stride `stride`, rows <= kTile) transposed: dst[c * ld + r] for
// r < kTile (zero for r >= rows), an AMX A operand with K along src's rows; 32 columns at a
// time by the quantize's word transpose.
OCTET_AMX inline void pack_transposed16(const uint16_t* src, int64_t stride, int64_t rows,
                                        int64_t hd, uint16_t* dst, int64_t ld) {
  static_assert(kTile == 32, "transpose32_words writes 32 words a row");
  for (int64_t c = 0; c < hd; c += 32)
    avx512::transpose32_words(src + c, stride, rows, std::min<int64_t>(32, hd - c), dst + c * ld,
                              ld);
}

// One K step of 32 into C tile `ct` (column tile ct of the group; a literal: the tile
// intrinsics take register numbers): with kSplitA, A's three parts are in tmm4-6 and B's column
// tile is loaded into tmm7; otherwise A is in tmm4 and B's three parts go into tmm5-7. The three
// parts are added in turn.
#define OCTET_AMX_STEP(ct)                                 \
  do {                                                     \
    if constexpr (kSplitA) {                               \
      _tile_loadd(7, bk + 16 * ct, b_stride);              \
      _tile_dpbf16ps(ct, 4, 7);                            \
      _tile_dpbf16ps(ct, 5, 7);                            \
      _tile_dpbf16ps(ct, 6, 7);                            \
    } else {                                               \
      _tile_loadd(5, bk + 16 * ct, b_stride);              \
      _tile_loadd(6, bk + b_part + 16 * ct, b_stride);     \
      _tile_loadd(7, bk + 2 * b_part + 16 * ct, b_stride); \
      _tile_dpbf16ps(ct, 4, 5);                            \
      _tile_dpbf16ps(ct, 4, 6);                            \
      _tile_dpbf16ps(ct, 4, 7);                            \
    }                                                      \
  } while (false)

// c [m][n] += sum_k a[m][k] b[k][n] for m < M, n < N, k < K (multiples of 16, 16 and 32) on
// AMX: fp32 c (row stride ldc floats); a bf16 rows (stride lda; with kSplitA three parts at a,
// a + a_part, a + 2 a_part); b in K pairs (uint32 rows of N, stride ldb; without kSplitA three
// parts, b_part apart). Per element of c: K steps of 32 in increasing order, in each the three
// parts in turn (the header's order). The caller's AmxScores has configured the tiles.
template <bool kSplitA>
OCTET_AMX inline void amx_accumulate(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                                     int64_t a_part, const uint32_t* b, int64_t ldb, int64_t b_part,
                                     int64_t M, int64_t N, int64_t K) {
  const long c_stride = static_cast<long>(ldc) * 4, a_stride = static_cast<long>(lda) * 2;
  const long b_stride = static_cast<long>(ldb) * 4;
  for (int64_t m = 0; m < M; m += 16) {
    for (int64_t n0 = 0; n0 < N; n0 += 64) {
      const int64_t tiles = std::min<int64_t>(4, (N - n0) / 16);
      float* cm = c + m * ldc + n0;
      _tile_loadd(0, cm, c_stride);
      if (tiles > 1) _tile_loadd(1, cm + 16, c_stride);
      if (tiles > 2) _tile_loadd(2, cm + 32, c_stride);
      if (tiles > 3) _tile_loadd(3, cm + 48, c_stride);
      for (int64_t k = 0; k < K; k += 32) {
        const uint16_t* ak = a + m * lda + k;
        const uint32_t* bk = b + k / 2 * ldb + n0;
        _tile_loadd(4, ak, a_stride);
        if constexpr (kSplitA) {
          _tile_loadd(5, ak + a_part, a_stride);
          _tile_loadd(6, ak + 2 * a_part, a_stride);
        }
        OCTET_AMX_STEP(0);
        if (tiles > 1) OCTET_AMX_STEP(1);
        if (tiles > 2) OCTET_AMX_STEP(2);
        if (tiles > 3) OCTET_AMX_STEP(3);
      }
      _tile_stored(0, cm, c_stride);
      if (tiles > 1) _tile_stored(1, cm + 16, c_stride);
      if (tiles > 2) _tile_stored(2, cm + 32, c_stride);
      if (tiles > 3) _tile_stored(3, cm + 48, c_stride);
    }
  }
}

#undef OCTET_AMX_STEP

}  // namespace octet::kernels::cpu::attn
#endif
