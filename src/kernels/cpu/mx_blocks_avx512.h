// kernels/cpu/mx_blocks_avx512.h: the MX row-wise quantize (1 x 32 blocks, E8M0 scales) of
// one row with AVX-512 vector ops only: sixteen blocks at a time, their amaxes reduced into
// one vector, their E8M0 codes and multipliers computed lane-wise
// (kernels/cpu/block_scales_avx512.h), the avx512 variant's Band::run for MX; the same for
// 1 x N rows with f32 scales (scaled_row; the generic loop stays for the other grids). Only
// included on x86-64 GCC/clang; the functions carry their own target.
// defines: cpu::avx512::mx_row, cpu::avx512::scaled_row
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/convert.h"
#include "kernels/cpu/block_scales_avx512.h"
#include "kernels/cpu/fp8_encode_avx512.h"
#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx512 {

#define OCTET_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define OCTET_AVX512_INLINE [[gnu::always_inline]] inline OCTET_AVX512_TARGET

// Lane i of the result: the max over the 32 lanes of a[2i] and a[2i + 1] (unsigned). Pairs
// of vectors are folded at 256, 128, 64 and 32 bits; the folds leave block 4j + L in lane
// 4L + j, which one permute puts back in order.
// block_max16_of(m): the same from one vector per block (lane i: the max over m[i]'s lanes).
OCTET_AVX512_INLINE __m512i block_max16_of(const __m512i* m) {
  __m512i p[8], q[4], r[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // lanes 0-7: block 2i, 8-15: block 2i + 1
    p[i] = _mm512_max_epu32(_mm512_shuffle_i32x4(m[2 * i], m[2 * i + 1], 0x44),
                            _mm512_shuffle_i32x4(m[2 * i], m[2 * i + 1], 0xEE));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // 128-bit lane L: block 4i + L
    q[i] = _mm512_max_epu32(_mm512_shuffle_i32x4(p[2 * i], p[2 * i + 1], 0x88),
                            _mm512_shuffle_i32x4(p[2 * i], p[2 * i + 1], 0xDD));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {  // lane L: blocks L, 4 + L, L, 4 + L (of the pair's 8)
    r[i] = _mm512_max_epu32(_mm512_unpacklo_epi32(q[2 * i], q[2 * i + 1]),
                            _mm512_unpackhi_epi32(q[2 * i], q[2 * i + 1]));
  }
  const __m512i t =
      _mm512_max_epu32(_mm512_unpacklo_epi64(r[0], r[1]), _mm512_unpackhi_epi64(r[0], r[1]));
  // t[4L + j] = block 4j + L, so block b sits in lane 4 (b % 4) + b / 4.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(order, t);
}
OCTET_AVX512_INLINE __m512i block_max16(const __m512i* a) {
  __m512i m[16];
#pragma GCC unroll 16
  for (int b = 0; b < 16; ++b) m[b] = _mm512_max_epu32(a[2 * b], a[2 * b + 1]);
  return block_max16_of(m);
}

// |x| bits of 16 inputs (masked-off lanes: 0; kFull: all 16, a plain load).
template <bool kFull, class In>
OCTET_AVX512_INLINE __m512i mag16(const In* x, __mmask16 k) {
  return _mm512_and_si512(_mm512_castps_si512(load16<kFull>(x, k)), _mm512_set1_epi32(0x7FFFFFFF));
}

// The encode half of mx_group: each vector times its block's multiplier (lane i / 2 of mult).
template <class In, bool kE4M3, bool kCount, int kVecs, bool kFull, bool kNan>
OCTET_AVX512_INLINE void mx_encode(const In* __restrict x, const __mmask16* k,
                                   uint8_t* __restrict out, __m512 mult, __m512i limit,
                                   __m512i& sat, __m512i& flush) {
#pragma GCC unroll 32
  for (int i = 0; i < kVecs; ++i) {
    const __m512 xv = load16<kFull>(x + 16 * i, k[i]);
    const __m512 v = _mm512_mul_ps(xv, _mm512_permutexvar_ps(_mm512_set1_epi32(i / 2), mult));
    const __m512i code = encode16<kE4M3, kNan>(v, limit);
    store16<kFull>(out + 16 * i, k[i], code);
    if constexpr (kCount) count16<kE4M3>(xv, v, code, sat, flush);
  }
}

// kVecs / 2 blocks (32 or 16 vectors of 16 values; n <= 16 kVecs values, kFull: n == 16 kVecs)
// of mx_row.
template <class In, bool kE4M3, bool kCount, int kVecs, bool kFull>
OCTET_AVX512_INLINE void mx_group(const In* __restrict x, int64_t n, uint8_t* __restrict out,
                                  uint8_t* __restrict scale_inv, float fp8_max, __m512i limit,
                                  __m512i& row_max, __m512i& sat, __m512i& flush) {
  static_assert(kVecs == 32 || kVecs == 16);
  __mmask16 k[kVecs];
#pragma GCC unroll 32
  for (int i = 0; i < kVecs; ++i) {
    const int64_t left = n - 16 * i;
    k[i] = kFull || left >= 16
               ? __mmask16{0xFFFF}
               : (left <= 0 ? __mmask16{0} : static_cast<__mmask16>((1u << left) - 1));
  }
  __m512i mag[32];
#pragma GCC unroll 32
  for (int i = 0; i < 32; ++i)
    mag[i] = i < kVecs ? mag16<kFull>(x + 16 * i, k[i]) : _mm512_setzero_si512();
  const __m512i amax = block_max16(mag);
  row_max = _mm512_max_epu32(row_max, amax);
  const __m512i e = e8m0_from_amax_bits(amax, fp8_max);
  const __mmask16 blocks = kFull ? static_cast<__mmask16>((1u << kVecs / 2) - 1)
                                 : static_cast<__mmask16>((1u << ((n + 31) / 32)) - 1);
  _mm512_mask_cvtepi32_storeu_epi8(scale_inv, blocks, e);
  const __m512 mult = e8m0_multiplier(e);
  // No NaN among the blocks (their amaxes at most Inf's; the multipliers are finite powers of
  // two): the encoder's NaN select is left out.
  if (_mm512_cmpgt_epu32_mask(amax, _mm512_set1_epi32(0x7F800000)) == 0) {
    mx_encode<In, kE4M3, kCount, kVecs, kFull, false>(x, k, out, mult, limit, sat, flush);
  } else {
    mx_encode<In, kE4M3, kCount, kVecs, kFull, true>(x, k, out, mult, limit, sat, flush);
  }
}

// ---- MX from bf16 in 16-bit lanes ------------------------------------------------------
// A block of 32 bf16 values is one vector. Times its block's multiplier 2^k (an E8M0 scale's
// inverse) a bf16 is exact: k added to its exponent field. And the product's code comes from
// its bf16 bits as encode16 gets it from f32 bits (Fp8Vec::bias16: same rounding, same ties),
// so 32 values take the vector ops encode16 spends on 16, with no widening to f32. Lanes this
// does not cover send their vector to the f32 way (mx_encode32_f32, bit for bit mx_encode's):
// x a bf16 subnormal, or a product below FP8's smallest normal (FP8 subnormals and the ±0
// flushes; with E4M3 a value under about amax 2^-14) or past f32's range. Groups holding Inf
// or NaN take mx_group whole.

// 32 values of one block (k: the live lanes) by the f32 way: encode16 on each half.
template <bool kE4M3, bool kFull>
[[gnu::noinline]] OCTET_AVX512_TARGET void mx_encode32_f32(const uint16_t* __restrict x,
                                                           __mmask32 k, uint8_t* __restrict out,
                                                           __m512 mult, __m512i limit) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const auto kh = static_cast<__mmask16>(k >> (16 * h));
    const __m512 v = _mm512_mul_ps(load16<kFull>(x + 16 * h, kh), mult);
    store16<kFull>(out + 16 * h, kh, encode16<kE4M3, false>(v, limit));
  }
}

// One block: x times 2^k (`shift`: k << 7 in every 16-bit lane; `mult`: 2^k in every f32 lane).
template <bool kE4M3, bool kFull>
OCTET_AVX512_INLINE void mx_encode32_bf16(const uint16_t* __restrict x, __mmask32 k,
                                          uint8_t* __restrict out, __m512i shift, __m512 mult,
                                          __m512i limit16, __m512i limit32) {
  using F = Fp8Vec<kE4M3>;
  const __m512i xv = kFull ? _mm512_loadu_si512(x) : _mm512_maskz_loadu_epi16(k, x);
  const __m512i mag = _mm512_and_si512(xv, _mm512_set1_epi16(0x7FFF));
  const __m512i scaled = _mm512_add_epi16(mag, shift);
  const __mmask32 nonzero = _mm512_test_epi16_mask(mag, mag);
  // Signed: a product past f32's range wraps to negative.
  const __mmask32 uncovered =
      _mm512_mask_cmplt_epi16_mask(nonzero, scaled,
                                   _mm512_set1_epi16(static_cast<int16_t>(F::min_normal16))) |
      _mm512_mask_cmplt_epu16_mask(nonzero, mag, _mm512_set1_epi16(0x0080));
  if (uncovered != 0) [[unlikely]] {
    mx_encode32_f32<kE4M3, kFull>(x, k, out, mult, limit32);
    return;
  }
  __m512i r = _mm512_add_epi16(scaled, _mm512_set1_epi16(static_cast<int16_t>(F::bias16)));
  const __mmask32 odd = _mm512_test_epi16_mask(scaled, _mm512_set1_epi16(1 << F::shift16));
  r = _mm512_mask_add_epi16(r, odd, r, _mm512_set1_epi16(1));
  // ±0 stays 0 (its lanes zeroed); the clamp is encode16's (overflow and ±Inf products).
  __m512i code = _mm512_maskz_min_epu16(nonzero, _mm512_srli_epi16(r, F::shift16), limit16);
  code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi16(xv, 8), _mm512_set1_epi16(0x80), 0xF8);
  if constexpr (kFull) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(code));
  } else {
    _mm512_mask_cvtepi16_storeu_epi8(out, k, code);
  }
}

// kBlocks blocks (n <= 32 kBlocks values; kFull: n == 32 kBlocks) as mx_group does them
// (mx_group itself where a block holds Inf or NaN).
template <bool kE4M3, int kBlocks, bool kFull>
OCTET_AVX512_INLINE void mx_group_bf16(const uint16_t* __restrict x, int64_t n,
                                       uint8_t* __restrict out, uint8_t* __restrict scale_inv,
                                       float fp8_max, __m512i limit16, __m512i limit32,
                                       __m512i& row_max) {
  static_assert(kBlocks == 16 || kBlocks == 8);
  __mmask32 k[kBlocks];
#pragma GCC unroll 16
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t left = n - 32 * b;
    k[b] = kFull || left >= 32 ? ~__mmask32{0}
                               : (left <= 0 ? __mmask32{0} : (__mmask32{1} << left) - 1);
  }
  // Lane j of m[b]: the max of the block's values 2j and 2j + 1 in its upper 16 bits.
  __m512i m[16];
#pragma GCC unroll 16
  for (int b = 0; b < 16; ++b) {
    if (b >= kBlocks || (!kFull && k[b] == 0)) {
      m[b] = _mm512_setzero_si512();
      continue;
    }
    const __m512i v =
        kFull ? _mm512_loadu_si512(x + 32 * b) : _mm512_maskz_loadu_epi16(k[b], x + 32 * b);
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7FFF));
    m[b] = _mm512_max_epu32(mag, _mm512_slli_epi32(mag, 16));
  }
  const __m512i amax =
      _mm512_and_si512(block_max16_of(m), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
  if (_mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x7F800000)) != 0) {
    __m512i none = _mm512_setzero_si512();  // no counts
    mx_group<uint16_t, kE4M3, false, 2 * kBlocks, kFull>(x, n, out, scale_inv, fp8_max, limit32,
                                                         row_max, none, none);
    return;
  }
  row_max = _mm512_max_epu32(row_max, amax);
  const __m512i e = e8m0_from_amax_bits(amax, fp8_max);
  const __mmask16 blocks = kFull ? static_cast<__mmask16>((1u << kBlocks) - 1)
                                 : static_cast<__mmask16>((1u << ((n + 31) / 32)) - 1);
  _mm512_mask_cvtepi32_storeu_epi8(scale_inv, blocks, e);
  const __m512 mult = e8m0_multiplier(e);
  // (127 - e) << 7 in both 16-bit halves of each lane: one vpermd broadcasts a block's.
  const __m512i lo = _mm512_and_si512(
      _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127), e), 7), _mm512_set1_epi32(0xFFFF));
  const __m512i shifts = _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16));
#pragma GCC unroll 16
  for (int b = 0; b < kBlocks; ++b) {
    if (!kFull && k[b] == 0) break;
    const __m512i sel = _mm512_set1_epi32(b);
    mx_encode32_bf16<kE4M3, kFull>(x + 32 * b, k[b], out + 32 * b,
                                   _mm512_permutexvar_epi32(sel, shifts),
                                   _mm512_permutexvar_ps(sel, mult), limit16, limit32);
  }
}

// One row of `cols` values quantized in MX blocks of 32: out[c] the code of x[c] times its
// block's multiplier, scale_inv[b] the block's E8M0 code; amax_bits takes the max |x| bits,
// and with kCount saturated/flushed as encode_run counts them.
template <class In, bool kE4M3, bool kCount>
inline OCTET_AVX512_TARGET void mx_row(const In* __restrict x, int64_t cols,
                                       uint8_t* __restrict out, uint8_t* __restrict scale_inv,
                                       float fp8_max, bool saturate, uint32_t& amax_bits,
                                       uint64_t& saturated, uint64_t& flushed) {
  constexpr detail::Fp8Layout f = Fp8Vec<kE4M3>::f;
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(saturate ? f.max_code : f.max_code + 1));
  constexpr int64_t kGroup = 16 * 32;  // sixteen blocks
  __m512i row_max = _mm512_setzero_si512();
  if constexpr (std::is_same_v<In, uint16_t> && !kCount) {
    // bf16 without counts: the 16-bit lanes' way.
    const __m512i limit16 =
        _mm512_set1_epi16(static_cast<int16_t>(saturate ? f.max_code : f.max_code + 1));
    int64_t c0 = 0;
    for (; cols - c0 >= kGroup; c0 += kGroup) {
      mx_group_bf16<kE4M3, 16, true>(x + c0, kGroup, out + c0, scale_inv + c0 / 32, fp8_max,
                                     limit16, limit, row_max);
    }
    if (cols - c0 >= kGroup / 2) {
      mx_group_bf16<kE4M3, 8, true>(x + c0, kGroup / 2, out + c0, scale_inv + c0 / 32, fp8_max,
                                    limit16, limit, row_max);
      c0 += kGroup / 2;
    }
    if (c0 < cols) {
      mx_group_bf16<kE4M3, 8, false>(x + c0, cols - c0, out + c0, scale_inv + c0 / 32, fp8_max,
                                     limit16, limit, row_max);
    }
    const uint32_t m = static_cast<uint32_t>(_mm512_reduce_max_epu32(row_max));
    if (m > amax_bits) amax_bits = m;
    return;
  }
  // Counts per lane, summed every kChunk values (at most 2^16 per lane in between).
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (int64_t chunk = 0; chunk < cols; chunk += kChunk) {
    const int64_t end = cols - chunk > kChunk ? chunk + kChunk : cols;
    __m512i sat = _mm512_setzero_si512(), flush = _mm512_setzero_si512();
    int64_t c0 = chunk;
    for (; end - c0 >= kGroup; c0 += kGroup) {
      mx_group<In, kE4M3, kCount, 32, true>(x + c0, kGroup, out + c0, scale_inv + c0 / 32, fp8_max,
                                            limit, row_max, sat, flush);
    }
    // Rows of 256 values (a common width) and the tail: groups of eight blocks.
    if (end - c0 >= kGroup / 2) {
      mx_group<In, kE4M3, kCount, 16, true>(x + c0, kGroup / 2, out + c0, scale_inv + c0 / 32,
                                            fp8_max, limit, row_max, sat, flush);
      c0 += kGroup / 2;
    }
    if (c0 < end) {
      mx_group<In, kE4M3, kCount, 16, false>(x + c0, end - c0, out + c0, scale_inv + c0 / 32,
                                             fp8_max, limit, row_max, sat, flush);
    }
    if constexpr (kCount) {
      saturated += static_cast<uint64_t>(_mm512_reduce_add_epi32(sat));
      flushed += static_cast<uint64_t>(_mm512_reduce_add_epi32(flush));
    }
  }
  const uint32_t m = static_cast<uint32_t>(_mm512_reduce_max_epu32(row_max));
  if (m > amax_bits) amax_bits = m;
}

// ---- 1 x N blocks with f32 scales ------------------------------------------------------
// `rows` rows of `cols` values in blocks of bc values (32 <= bc < 256, a multiple of 16: rows
// of 64-176 values, 1 x 128), each row's last block short where bc does not divide cols, with
// f32 scales (fp8_max / amax, pow2: its power of two), as mx_row does MX: sixteen blocks'
// amaxes reduced into one vector, their scales lane-wise (block_scales16), then each block's
// run encoded with its multiplier broadcast. The sixteen blocks may span rows, so that rows of
// two or three blocks (176 or 352 values in 1 x 128) fill the vector as long rows do. The
// generic loop it replaces wrote a multiplier per value and read it back in the encode.
// scale_inv[b]: the bits of the f32 1 / scale of block b, the blocks of row r after those of
// rows 0 .. r - 1 (ceil(cols / bc) a row); amax_bits, saturated and flushed as encode_run has
// them.
template <class In, bool kE4M3, bool kCount>
inline OCTET_AVX512_TARGET void scaled_row(const In* __restrict x, int64_t rows, int64_t cols,
                                           int64_t bc, uint8_t* __restrict out,
                                           uint32_t* __restrict scale_inv, float fp8_max, bool pow2,
                                           bool saturate, uint32_t& amax_bits, uint64_t& saturated,
                                           uint64_t& flushed) {
  const int64_t per_row = (cols + bc - 1) / bc, total = rows * per_row;
  int64_t row = 0, in_row = 0;  // of block i0
  for (int64_t i0 = 0; i0 < total; i0 += 16) {
    const int64_t blocks = std::min<int64_t>(16, total - i0);
    int64_t start[16], width[16];
    for (int64_t b = 0; b < blocks; ++b) {
      start[b] = row * cols + in_row * bc;
      width[b] = std::min(bc, cols - in_row * bc);
      if (++in_row == per_row) {
        in_row = 0;
        ++row;
      }
    }
    __m512i m[16];
#pragma GCC unroll 16
    for (int b = 0; b < 16; ++b) {
      __m512i v = _mm512_setzero_si512();
      if (b < blocks) {
        const In* xb = x + start[b];
        const int64_t w = width[b];
        int64_t i = 0;
        if constexpr (std::is_same_v<In, uint16_t>) {
          // bf16: |x| bits 32 at a time in 16-bit lanes (a bf16 magnitude orders as its f32's),
          // then widened to f32 bits in two halves (the lane order does not matter to a max).
          const __m512i abs16 = _mm512_set1_epi16(0x7FFF);
          __m512i v16 = _mm512_setzero_si512();
          for (; i + 32 <= w; i += 32)
            v16 = _mm512_max_epu16(v16, _mm512_and_si512(_mm512_loadu_si512(xb + i), abs16));
          if (i < w) {
            const auto tail = static_cast<__mmask32>((uint64_t{1} << (w - i)) - 1);
            v16 = _mm512_max_epu16(v16,
                                   _mm512_and_si512(_mm512_maskz_loadu_epi16(tail, xb + i), abs16));
          }
          const __m512i zero = _mm512_setzero_si512();
          v = _mm512_max_epu32(_mm512_unpacklo_epi16(zero, v16), _mm512_unpackhi_epi16(zero, v16));
        } else {
          for (; i + 16 <= w; i += 16)
            v = _mm512_max_epu32(v, mag16<true>(xb + i, __mmask16{0xFFFF}));
          if (i < w)
            v = _mm512_max_epu32(v,
                                 mag16<false>(xb + i, static_cast<__mmask16>((1u << (w - i)) - 1)));
        }
      }
      m[b] = v;
    }
    const __m512i amax = block_max16_of(m);  // lanes past `blocks`: 0
    const uint32_t group_max = static_cast<uint32_t>(_mm512_reduce_max_epu32(amax));
    if (group_max > amax_bits) amax_bits = group_max;
    __m512i inv;
    alignas(64) float mult[16];
    _mm512_store_ps(mult, block_scales16(amax, false, fp8_max, pow2, inv));
    _mm512_mask_storeu_epi32(scale_inv + i0, static_cast<__mmask16>((1u << blocks) - 1), inv);
    for (int64_t b = 0; b < blocks; ++b) {
      if (group_max <= 0x7F800000u) {  // no NaN: encode_run's select left out
        encode_run_as<In, kE4M3, kCount, false>(x + start[b], out + start[b], width[b], mult[b],
                                                saturate, saturated, flushed);
      } else {
        encode_run_as<In, kE4M3, kCount, true>(x + start[b], out + start[b], width[b], mult[b],
                                               saturate, saturated, flushed);
      }
    }
  }
}

#undef OCTET_AVX512_INLINE
#undef OCTET_AVX512_TARGET

}  // namespace octet::kernels::cpu::avx512
