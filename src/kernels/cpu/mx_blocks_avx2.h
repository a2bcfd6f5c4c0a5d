// kernels/cpu/mx_blocks_avx2.h: the MX row-wise quantize (1 x 32 blocks, E8M0 scales) of one
// row with AVX2 vector ops only, mx_blocks_avx512.h's mx_row with eight blocks at a time: their
// amaxes reduced into one vector, their E8M0 codes and multipliers computed lane-wise
// (kernels/cpu/block_scales_avx2.h), each vector's multiplier broadcast by a lane permute. The
// avx2 variant's Band::run for MX, where the generic loop took a call per block for its amax and
// a multiplier per value. Only included on x86-64 GCC/clang; the functions carry their own
// target.
// defines: cpu::avx2::block_max8, cpu::avx2::mx_row, cpu::avx2::block_max8_lanes (for tests)
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/block_scales_avx2.h"
#include "kernels/cpu/fp8_encode_avx2.h"
#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx2 {

#define OCTET_AVX2_TARGET __attribute__((target("avx2,fma,f16c,bmi2")))
#define OCTET_AVX2_INLINE [[gnu::always_inline]] inline OCTET_AVX2_TARGET

// Lane b of the result: the max (unsigned) over the 8 lanes of m[b], block b's amax from the
// fold of its four vectors. Pairs of blocks are folded at 128 bits (block 2i in the low lane,
// 2i + 1 in the high one), 64 bits and 32 bits, which leaves blocks 0, 2, 4, 6 in the low lane
// and 1, 3, 5, 7 in the high one; one permute puts them in order.
OCTET_AVX2_INLINE __m256i block_max8(const __m256i* m) {
  __m256i p[4], q[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // low lane: block 2i, high: block 2i + 1
    p[i] = _mm256_max_epu32(_mm256_permute2x128_si256(m[2 * i], m[2 * i + 1], 0x20),
                            _mm256_permute2x128_si256(m[2 * i], m[2 * i + 1], 0x31));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {  // low lane: 4i, 4i, 4i + 2, 4i + 2; high: 4i + 1, 4i + 3
    q[i] = _mm256_max_epu32(_mm256_unpacklo_epi64(p[2 * i], p[2 * i + 1]),
                            _mm256_unpackhi_epi64(p[2 * i], p[2 * i + 1]));
  }
  const __m256 q0 = _mm256_castsi256_ps(q[0]), q1 = _mm256_castsi256_ps(q[1]);
  const __m256i r =
      _mm256_max_epu32(_mm256_castps_si256(_mm256_shuffle_ps(q0, q1, _MM_SHUFFLE(2, 0, 2, 0))),
                       _mm256_castps_si256(_mm256_shuffle_ps(q0, q1, _MM_SHUFFLE(3, 1, 3, 1))));
  // r: blocks 0, 2, 4, 6, 1, 3, 5, 7.
  return _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// |x| bits of 8 inputs.
template <class In>
OCTET_AVX2_INLINE __m256i mag8(const In* x) {
  return _mm256_and_si256(_mm256_castps_si256(load(x)), _mm256_set1_epi32(0x7FFFFFFF));
}

// The encode half of mx_group8: vector i times its block's multiplier (lane i / 4 of mult);
// the `whole` vectors in place, a last one of `rest` values through the copy xt.
template <class In, bool kE4M3, bool kCount, bool kFull, bool kNan>
OCTET_AVX2_INLINE void mx_encode8(const In* __restrict x, int64_t whole, int64_t rest, const In* xt,
                                  uint8_t* __restrict out, __m256 mult, __m256i limit, __m256i& sat,
                                  __m256i& flush) {
#pragma GCC unroll 32
  for (int i = 0; i < 32; ++i) {
    if (!kFull && i >= whole) break;
    const __m256 s = _mm256_permutevar8x32_ps(mult, _mm256_set1_epi32(i / 4));
    encode_step<In, kE4M3, kCount, kNan>(x + 8 * i, s, out + 8 * i, limit, sat, flush);
  }
  if (!kFull && rest != 0) {
    alignas(16) uint8_t ot[8];
    const __m256 s = _mm256_permutevar8x32_ps(mult, _mm256_set1_epi32(static_cast<int>(whole / 4)));
    encode_step<In, kE4M3, kCount, kNan>(xt, s, ot, limit, sat, flush);
    std::memcpy(out + 8 * whole, ot, static_cast<size_t>(rest));
  }
}

// Up to eight blocks of mx_row, n values (kFull: n == 256): their E8M0 codes into
// scale_inv[0, ceil(n / 32)), the codes into out[0, n). A last vector of fewer than 8 values
// is read and written through zero-filled copies (zeros change no amax and count as neither);
// vectors past n read as zeros.
template <class In, bool kE4M3, bool kCount, bool kFull>
OCTET_AVX2_INLINE void mx_group8(const In* __restrict x, int64_t n, uint8_t* __restrict out,
                                 uint8_t* __restrict scale_inv, float fp8_max, __m256i limit,
                                 __m256i& row_max, __m256i& sat, __m256i& flush) {
  const int64_t whole = kFull ? 32 : n / 8, rest = kFull ? 0 : n % 8;
  alignas(32) In xt[8] = {};
  if (!kFull && rest != 0) std::memcpy(xt, x + 8 * whole, static_cast<size_t>(rest) * sizeof(In));
  __m256i m[8];
#pragma GCC unroll 8
  for (int b = 0; b < 8; ++b) {
    __m256i v[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      v[k] = kFull || i < whole        ? mag8(x + 8 * i)
             : i == whole && rest != 0 ? mag8(xt)
                                       : _mm256_setzero_si256();
    }
    m[b] = _mm256_max_epu32(_mm256_max_epu32(v[0], v[1]), _mm256_max_epu32(v[2], v[3]));
  }
  const __m256i amax = block_max8(m);
  row_max = _mm256_max_epu32(row_max, amax);
  const __m256i e = e8m0_from_amax_bits(amax, fp8_max);
  if constexpr (kFull) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(scale_inv), narrow8(e));
  } else {
    alignas(16) uint8_t codes[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(codes), narrow8(e));
    std::memcpy(scale_inv, codes, static_cast<size_t>((n + 31) / 32));
  }
  const __m256 mult = e8m0_multiplier(e);
  // No NaN among the blocks (their amaxes at most Inf's; the multipliers are finite powers of
  // two): the encoder's NaN select is left out.
  const bool nan = _mm256_movemask_ps(_mm256_castsi256_ps(
                       _mm256_cmpgt_epi32(amax, _mm256_set1_epi32(0x7F800000)))) != 0;
  if (!nan) {
    mx_encode8<In, kE4M3, kCount, kFull, false>(x, whole, rest, xt, out, mult, limit, sat, flush);
  } else {
    mx_encode8<In, kE4M3, kCount, kFull, true>(x, whole, rest, xt, out, mult, limit, sat, flush);
  }
}

// One row of `cols` values quantized in MX blocks of 32: out[c] the code of x[c] times its
// block's multiplier, scale_inv[b] the block's E8M0 code; amax_bits takes the max |x| bits, and
// with kCount saturated/flushed as encode_run counts them.
template <class In, bool kE4M3, bool kCount>
inline OCTET_AVX2_TARGET void mx_row(const In* __restrict x, int64_t cols, uint8_t* __restrict out,
                                     uint8_t* __restrict scale_inv, float fp8_max, bool saturate,
                                     uint32_t& amax_bits, uint64_t& saturated, uint64_t& flushed) {
  constexpr detail::Fp8Layout f = Fp8Vec<kE4M3>::f;
  const __m256i limit = _mm256_set1_epi32(static_cast<int>(saturate ? f.max_code : f.max_code + 1));
  constexpr int64_t kGroup = 8 * 32;
  __m256i row_max = _mm256_setzero_si256();
  // Counts per lane, summed every kChunk values (at most 2^17 per lane in between).
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (int64_t chunk = 0; chunk < cols; chunk += kChunk) {
    const int64_t end = cols - chunk > kChunk ? chunk + kChunk : cols;
    __m256i sat = _mm256_setzero_si256(), flush = _mm256_setzero_si256();
    int64_t c0 = chunk;
    for (; end - c0 >= kGroup; c0 += kGroup) {
      mx_group8<In, kE4M3, kCount, true>(x + c0, kGroup, out + c0, scale_inv + c0 / 32, fp8_max,
                                         limit, row_max, sat, flush);
    }
    if (c0 < end) {
      mx_group8<In, kE4M3, kCount, false>(x + c0, end - c0, out + c0, scale_inv + c0 / 32, fp8_max,
                                          limit, row_max, sat, flush);
    }
    if constexpr (kCount) {
      saturated += lane_sum(sat);
      flushed += lane_sum(flush);
    }
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), row_max);
  for (uint32_t m : lanes) amax_bits = m > amax_bits ? m : amax_bits;
}

// For tests: out[b] = block_max8 of the 8 vectors in[8 b, 8 b + 8) (lane b: max of in[8 b ..]).
inline OCTET_AVX2_TARGET void block_max8_lanes(const uint32_t* in, uint32_t* out) {
  __m256i m[8];
  for (int b = 0; b < 8; ++b)
    m[b] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 8 * b));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), block_max8(m));
}

#undef OCTET_AVX2_INLINE
#undef OCTET_AVX2_TARGET

}  // namespace octet::kernels::cpu::avx2
