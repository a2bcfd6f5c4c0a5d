// kernels/cpu/fp8_encode_avx512.h: f32 -> E4M3/E5M2 for 16 floats at a time with
// AVX-512, bit for bit core/convert.h's f32_to_e4m3/f32_to_e5m2 (every input: NaN,
// ±Inf, ±0, f32 subnormals, FP8 subnormals, ties, the overflow boundary), and the
// quantize kernels' encode loop built on it (kernels/cpu/quantize_cpu.cpp's avx512
// variant), with a 64-value way for bf16 inputs (encode64_bf16). Only included on x86-64
// GCC/clang; the functions carry their own target.
// defines: cpu::avx512::encode16, cpu::avx512::count16, cpu::avx512::encode64_bf16,
//          cpu::avx512::encode_run, cpu::avx512::encode_columns_bf16,
//          cpu::avx512::encode_wide_run
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/convert.h"
#include "kernels/cpu/bf16_round_avx512.h"
#include "kernels/cpu/fp8_encode_vec.h"
#include "kernels/cpu/fp8_widen_avx512.h"
#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx512 {

// The helpers are always inlined into encode_run/encode_tile; those two are real
// calls from the quantize loops (GCC will not inline a function with a wider target
// into the generic always_inline templates those loops are made of), one per run
// of elements or per tile, never per vector.
#define OCTET_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define OCTET_AVX512_INLINE [[gnu::always_inline]] inline OCTET_AVX512_TARGET

// The codes of 16 floats, one in the low byte of each 32-bit lane (the other bits
// are not zero in the FP8-subnormal lanes: callers use the low byte only). `limit`
// is the format's max code (saturate) or max code + 1 (nonfinite: NaN for E4M3,
// Inf for E5M2, both one past the max code).
//
// Normal range: integer round-to-nearest-even of the f32 bits at the FP8 mantissa,
// clamped to `limit` (which also catches ±Inf and is the overflow result).
// Below the smallest normal: |v| + magic, an f32 add whose ulp is the FP8
// subnormal quantum, so the FPU's own rounding gives the code in the low mantissa
// bits (also the smallest normal when it rounds up). NaN: the format's NaN code; !kNan
// leaves that select out, for callers that know the values hold no NaN (their amax is not
// NaN: ±Inf needs no select, the clamp gives it).
// Sign: bit 31 moved to bit 7.
template <bool kE4M3, bool kNan = true>
OCTET_AVX512_INLINE __m512i encode16(__m512 v, __m512i limit) {
  using F = Fp8Vec<kE4M3>;
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  __m512i r = _mm512_add_epi32(mag, _mm512_set1_epi32(static_cast<int>(F::bias)));
  const __mmask16 odd = _mm512_test_epi32_mask(mag, _mm512_set1_epi32(1 << F::shift));
  r = _mm512_mask_add_epi32(r, odd, r, _mm512_set1_epi32(1));
  const __m512i normal = _mm512_min_epu32(_mm512_srli_epi32(r, F::shift), limit);
  const __mmask16 sub =
      _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(static_cast<int>(F::f.min_normal_bits)));
  __m512i code = _mm512_castps_si512(_mm512_mask_add_ps(_mm512_castsi512_ps(normal), sub,
                                                        _mm512_castsi512_ps(mag),
                                                        _mm512_set1_ps(F::f.subnormal_magic)));
  if constexpr (kNan) {
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7F800000));
    code = _mm512_mask_mov_epi32(code, nan, _mm512_set1_epi32(static_cast<int>(F::f.nan_code)));
  }
  // code | ((bits >> 24) & 0x80)
  return _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80),
                                   0xF8);
}

// 16 inputs (n of them, n <= 16: the rest read as zero) widened to f32. kFull: all 16, by
// plain loads (masked loads and stores cost more, much so on the AMD Zen 5 this was measured on).
template <bool kFull>
OCTET_AVX512_INLINE __m512 load16(const float* x, __mmask16 k) {
  return kFull ? load(x) : _mm512_maskz_loadu_ps(k, x);
}
template <bool kFull>
OCTET_AVX512_INLINE __m512 load16(const uint16_t* x, __mmask16 k) {
  return kFull ? load(x) : load_bf16(x, k);
}
template <bool kFull>
OCTET_AVX512_INLINE __m512 scale16(float scale, int64_t, __mmask16) {
  return _mm512_set1_ps(scale);
}
template <bool kFull>
OCTET_AVX512_INLINE __m512 scale16(const float* scale, int64_t i, __mmask16 k) {
  return kFull ? _mm512_loadu_ps(scale + i) : _mm512_maskz_loadu_ps(k, scale + i);
}
// The 16 codes' low bytes to out: vpmovdb into a register and a plain 16-byte store, or,
// for a tail, the masked store form.
template <bool kFull>
OCTET_AVX512_INLINE void store16(uint8_t* out, __mmask16 k, __m512i code) {
  if constexpr (kFull) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(code));
  } else {
    _mm512_mask_cvtepi32_storeu_epi8(out, k, code);
  }
}

// The counts of encode_run for one vector: x, v = x * scale and v's codes; adds one to
// the lanes of `sat` whose finite x has |v| at or past the format's overflow boundary and
// to those of `flush` whose nonzero finite x got the code ±0 (lanes read as x = 0: neither).
template <bool kE4M3>
OCTET_AVX512_INLINE void count16(__m512 xv, __m512 v, __m512i code, __m512i& sat, __m512i& flush) {
  // E4M3: 464 (halfway to 480) rounds to even, i.e. down to 448; E5M2: 61440 (halfway
  // from 57344 to 65536) rounds to even, i.e. up to Inf.
  constexpr uint32_t overflow_bits = kE4M3 ? f32_bits(464.0f) + 1 : f32_bits(61440.0f);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i xm = _mm512_and_si512(_mm512_castps_si512(xv), abs_mask);
  const __m512i vm = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
  const __mmask16 finite = _mm512_cmplt_epu32_mask(xm, _mm512_set1_epi32(0x7F800000));
  const __mmask16 over =
      _mm512_mask_cmpge_epu32_mask(finite, vm, _mm512_set1_epi32(static_cast<int>(overflow_bits)));
  const __mmask16 nonzero = _mm512_mask_test_epi32_mask(finite, xm, xm);
  const __mmask16 zero = _mm512_mask_testn_epi32_mask(nonzero, code, _mm512_set1_epi32(0x7F));
  sat = _mm512_mask_add_epi32(sat, over, sat, one);
  flush = _mm512_mask_add_epi32(flush, zero, flush, one);
}

// ---- 64 bf16 values a step ------------------------------------------------------------
// encode16 spends 16 vector ops on 16 values, four of them moving data: bf16 -> f32
// (vpmovzxwd, vpslld), the codes to bytes (vpmovdb, two ops) and the sign (a shift and an or).
// From bf16 in pairs of 32-value vectors these are shared: each half of a vector unpacked
// against zeros is its f32 values (vpunpck[lh]wd, one op per 16), whole vectors of codes pack
// back into bytes with two saturating packs (vpackusdw, vpackuswb: per 128-bit lane, in the
// order the unpacks took the values apart) and one qword permute, and the signs are the bf16
// inputs' high bytes, packed the same way. The magnitude is clamped before rounding (vrangeps:
// min(|v|, clamp), sign cleared), so that every code is clean (0..0x7F, which the saturating
// packs need): clamp is the value whose code is `limit` (the format's max, or the overflow code
// one past it), which is what the min of encode16 gives for everything at or above it, and
// below it the rounding is encode16's. Without NaN (callers: an amax that is not NaN, and
// multipliers that are finite and not negative, so that v's sign is x's): 12 ops per 16.
template <bool kE4M3>
OCTET_AVX512_INLINE __m512i encode16_clean(__m512 v, __m512 clamp) {
  using F = Fp8Vec<kE4M3>;
  const __m512i c = _mm512_castps_si512(_mm512_range_ps(v, clamp, 0x0A));  // min |.|, sign 0
  __m512i r = _mm512_add_epi32(c, _mm512_set1_epi32(static_cast<int>(F::bias)));
  const __mmask16 odd = _mm512_test_epi32_mask(c, _mm512_set1_epi32(1 << F::shift));
  r = _mm512_mask_add_epi32(r, odd, r, _mm512_set1_epi32(1));
  const __m512i normal = _mm512_srli_epi32(r, F::shift);
  const __mmask16 sub =
      _mm512_cmplt_epu32_mask(c, _mm512_set1_epi32(static_cast<int>(F::f.min_normal_bits)));
  const __m512 s = _mm512_add_ps(_mm512_castsi512_ps(c), _mm512_set1_ps(F::f.subnormal_magic));
  return _mm512_mask_sub_epi32(normal, sub, _mm512_castps_si512(s),
                               _mm512_set1_epi32(static_cast<int>(F::f.subnormal_magic_bits)));
}

// The f32 value whose code is `limit` (encode16_clean's clamp): the code's bits rebiased.
template <bool kE4M3>
OCTET_AVX512_INLINE __m512 encode_clamp(bool saturate) {
  using F = Fp8Vec<kE4M3>;
  const uint32_t code = saturate ? F::f.max_code : F::f.max_code + 1;
  return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>((code + F::f.rebias) << F::shift)));
}

// Multipliers in the order encode64_bf16 takes the values apart: mult[q] for values [16 q, 16 q
// + 16) of the 64 in order becomes the vector of unpacked quarter q (lane 4 L + j of quarter q
// = value 32 (q / 2) + 8 L + 4 (q % 2) + j).
OCTET_AVX512_INLINE void unpacked_order(const __m512 (&in)[4], __m512 (&out)[4]) {
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
  out[0] = _mm512_permutex2var_ps(in[0], lo, in[1]);
  out[1] = _mm512_permutex2var_ps(in[0], hi, in[1]);
  out[2] = _mm512_permutex2var_ps(in[2], lo, in[3]);
  out[3] = _mm512_permutex2var_ps(in[2], hi, in[3]);
}

// The codes of x[0, 64) (bf16) times `mult` (unpacked_order's) into out[0, 64). With `wide`
// (encode_wide_run's copy; it may be x itself: x is read first), also the codes' values as
// bf16 from `table` (load_widen_table's): the codes in 16-bit lanes, after the first pack, are in
// x's order, and a bf16 input's sign sits where its code's value has it.
template <bool kE4M3>
OCTET_AVX512_INLINE void encode64_bf16(const uint16_t* x, uint8_t* __restrict out,
                                       const __m512 (&mult)[4], __m512 clamp,
                                       uint16_t* wide = nullptr, const __m512i* table = nullptr) {
  const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 32);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i f[4] = {_mm512_unpacklo_epi16(zero, x0), _mm512_unpackhi_epi16(zero, x0),
                        _mm512_unpacklo_epi16(zero, x1), _mm512_unpackhi_epi16(zero, x1)};
  __m512i c[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)
    c[q] = encode16_clean<kE4M3>(_mm512_mul_ps(_mm512_castsi512_ps(f[q]), mult[q]), clamp);
  // Codes in 16-bit lanes in x0's and x1's order; then lane L of the bytes: values 8 L .. 8 L + 7,
  // then 32 + 8 L .. 32 + 8 L + 7.
  const __m512i w0 = _mm512_packus_epi32(c[0], c[1]), w1 = _mm512_packus_epi32(c[2], c[3]);
  if (wide != nullptr) {
    const __m512i sign = _mm512_set1_epi16(static_cast<int16_t>(0x8000));
    _mm512_storeu_si512(wide, _mm512_ternarylogic_epi32(widen_magnitudes(w0, table), x0, sign,
                                                        0xD8));  // sign ? x0 : value
    _mm512_storeu_si512(wide + 32,
                        _mm512_ternarylogic_epi32(widen_magnitudes(w1, table), x1, sign, 0xD8));
  }
  const __m512i codes = _mm512_packus_epi16(w0, w1);
  const __m512i signs = _mm512_packus_epi16(_mm512_srli_epi16(x0, 8), _mm512_srli_epi16(x1, 8));
  const __m512i bytes = _mm512_ternarylogic_epi32(codes, signs, _mm512_set1_epi8(char(0x80)),
                                                  0xD8);  // c ? signs : codes, bitwise
  const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi64(order, bytes));
}

// The whole 64-value steps of a bf16 run times one multiplier (encode64_bf16, with `wide` and
// `table` as there); returns how many values they took: 0 for a negative multiplier (whose
// products' signs are not x's), which the 16-value ways take.
template <bool kE4M3>
OCTET_AVX512_INLINE int64_t encode64_steps(const uint16_t* x, uint8_t* __restrict out, int64_t n,
                                           float scale, bool saturate, uint16_t* wide = nullptr,
                                           const __m512i* table = nullptr) {
  if (std::signbit(scale)) return 0;
  const __m512 m = _mm512_set1_ps(scale);
  const __m512 mult[4] = {m, m, m, m};
  const __m512 clamp = encode_clamp<kE4M3>(saturate);
  const int64_t whole = n / 64 * 64;
  for (int64_t i = 0; i < whole; i += 64) {
    encode64_bf16<kE4M3>(x + i, out + i, mult, clamp, wide != nullptr ? wide + i : nullptr, table);
  }
  return whole;
}

// One step of encode_run: 16 values at i (kFull) or the n < 16 of the tail mask k.
template <bool kFull, class In, bool kE4M3, bool kCount, bool kNan, class Scale>
OCTET_AVX512_INLINE void encode_step(const In* __restrict x, uint8_t* __restrict out, int64_t i,
                                     __mmask16 k, Scale scale, __m512i limit, __m512i& sat,
                                     __m512i& flush) {
  const __m512 xv = load16<kFull>(x + i, k);
  const __m512 v = _mm512_mul_ps(xv, scale16<kFull>(scale, i, k));
  const __m512i code = encode16<kE4M3, kNan>(v, limit);
  store16<kFull>(out + i, k, code);
  if constexpr (kCount) count16<kE4M3>(xv, v, code, sat, flush);
}

// encode_run with the NaN select in or out.
template <class In, bool kE4M3, bool kCount, bool kNan, class Scale>
OCTET_AVX512_INLINE void encode_run_as(const In* __restrict x, uint8_t* __restrict out, int64_t n,
                                       Scale scale, bool saturate, uint64_t& saturated,
                                       uint64_t& flushed) {
  constexpr detail::Fp8Layout f = Fp8Vec<kE4M3>::f;
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(saturate ? f.max_code : f.max_code + 1));
  static_assert(f.overflow_code == f.max_code + 1);
  if constexpr (std::is_same_v<In, uint16_t> && std::is_same_v<Scale, float> && !kCount && !kNan) {
    const int64_t done = encode64_steps<kE4M3>(x, out, n, scale, saturate);  // the rest below
    x += done;
    out += done;
    n -= done;
  }
  // Counts per lane, summed every kChunk elements (stays far below 2^31 per sum).
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = n - begin > kChunk ? begin + kChunk : n;
    __m512i sat = _mm512_setzero_si512(), flush = _mm512_setzero_si512();
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) {
      encode_step<true, In, kE4M3, kCount, kNan>(x, out, i, __mmask16{0xFFFF}, scale, limit, sat,
                                                 flush);
    }
    if (i < end) {
      const auto tail = static_cast<__mmask16>((1u << (end - i)) - 1);
      encode_step<false, In, kE4M3, kCount, kNan>(x, out, i, tail, scale, limit, sat, flush);
    }
    if constexpr (kCount) {
      saturated += static_cast<uint64_t>(_mm512_reduce_add_epi32(sat));
      flushed += static_cast<uint64_t>(_mm512_reduce_add_epi32(flush));
    }
  }
}

// out[i] = code of x[i] * scale (scale: one float, or one per element). With kCount,
// also adds to `saturated` the finite x whose |x * scale| is at or past the
// format's overflow boundary, and to `flushed` the nonzero finite x whose code is ±0
// (quantize_cpu.cpp's encode_loop defines them). `amax_bits`: an upper bound of the |x|
// bits (0xFFFFFFFF where unknown); at most Inf's, x holds no NaN, and as the multipliers are
// finite and positive (every computed scale is; callers pass 0xFFFFFFFF for others) neither
// does x * scale, so the NaN select is left out.
template <class In, bool kE4M3, bool kCount, class Scale>
inline OCTET_AVX512_TARGET void encode_run(const In* __restrict x, uint8_t* __restrict out,
                                           int64_t n, Scale scale, bool saturate,
                                           uint32_t amax_bits, uint64_t& saturated,
                                           uint64_t& flushed) {
  if (amax_bits <= 0x7F800000u) {
    encode_run_as<In, kE4M3, kCount, false>(x, out, n, scale, saturate, saturated, flushed);
  } else {
    encode_run_as<In, kE4M3, kCount, true>(x, out, n, scale, saturate, saturated, flushed);
  }
}

// encode_wide_run's 32 values at i: two vectors encoded as encode_step does, their codes packed
// into 16-bit lanes, stored as bytes, and looked up in `table` (|code| -> the bf16 bits of its
// value, four registers of 32 words: fp8_bf16_table) for their bf16 values, the sign or-ed in.
// vpermt2w reads the low six bits of each index and bit 6 picks the half, so the other bits
// of a lane (not zero in FP8-subnormal lanes, see encode16) are never read.
template <class In, bool kE4M3, bool kCount, bool kNan, class Scale>
OCTET_AVX512_INLINE void encode_wide32(const In* x, uint8_t* __restrict out, uint16_t* wide,
                                       int64_t i, Scale scale, __m512i limit, const __m512i* table,
                                       __m512i& sat, __m512i& flush) {
  const __m512 x0 = load16<true>(x + i, __mmask16{0xFFFF});
  const __m512 x1 = load16<true>(x + i + 16, __mmask16{0xFFFF});
  const __m512 v0 = _mm512_mul_ps(x0, scale16<true>(scale, i, __mmask16{0xFFFF}));
  const __m512 v1 = _mm512_mul_ps(x1, scale16<true>(scale, i + 16, __mmask16{0xFFFF}));
  const __m512i c0 = encode16<kE4M3, kNan>(v0, limit);
  const __m512i c1 = encode16<kE4M3, kNan>(v1, limit);
  if constexpr (kCount) {
    count16<kE4M3>(x0, v0, c0, sat, flush);
    count16<kE4M3>(x1, v1, c1, sat, flush);
  }
  // The low words of c0's lanes, then c1's: words 0, 2, ..., 62 of the pair.
  const __m512i even =
      _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26,
                       24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i codes = _mm512_permutex2var_epi16(c0, even, c1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi16_epi8(codes));
  _mm512_storeu_si512(wide + i, with_sign(widen_magnitudes(codes, table), codes));
}

// encode_wide_run with the NaN select in or out: whole vectors of 32, counts per lane summed
// every 2^20 values (as encode_run_as: exact 32-bit counts).
template <class In, bool kE4M3, bool kCount, bool kNan, class Scale>
OCTET_AVX512_INLINE void encode_wide_run_as(const In* x, uint8_t* __restrict out, uint16_t* wide,
                                            int64_t n, Scale scale, __m512i limit,
                                            const __m512i* table, uint64_t& saturated,
                                            uint64_t& flushed) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = n - begin > kChunk ? begin + kChunk : n;
    __m512i sat = _mm512_setzero_si512(), flush = _mm512_setzero_si512();
    for (int64_t i = begin; i < end; i += 32) {
      encode_wide32<In, kE4M3, kCount, kNan>(x, out, wide, i, scale, limit, table, sat, flush);
    }
    if constexpr (kCount) {
      saturated += static_cast<uint64_t>(_mm512_reduce_add_epi32(sat));
      flushed += static_cast<uint64_t>(_mm512_reduce_add_epi32(flush));
    }
  }
}

// encode_run that also writes each code's value as bf16 into wide[0, n): the bits of
// fp8_to_bf16 (QuantizeOutputs::wide), computed while the codes are still in registers.
// Whole vectors of 32 only: n % 32 == 0 (the caller runs the rest through encode_run). wide
// may be x itself (bf16 x quantized in place): each vector is read before its values are
// written. `table`: |code| -> the bf16 bits of its value, 128 entries (fp8_bf16_table).
template <class In, bool kE4M3, bool kCount, class Scale>
inline OCTET_AVX512_TARGET void encode_wide_run(const In* x, uint8_t* __restrict out,
                                                uint16_t* wide, int64_t n, Scale scale,
                                                bool saturate, uint32_t amax_bits,
                                                const uint16_t* table, uint64_t& saturated,
                                                uint64_t& flushed) {
  constexpr detail::Fp8Layout f = Fp8Vec<kE4M3>::f;
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(saturate ? f.max_code : f.max_code + 1));
  __m512i t[4];
  load_widen_table(table, t);
  if constexpr (std::is_same_v<In, uint16_t> && std::is_same_v<Scale, float> && !kCount) {
    if (amax_bits <= 0x7F800000u) {  // no NaN: bf16's 64-value steps, the rest below
      const int64_t done = encode64_steps<kE4M3>(x, out, n, scale, saturate, wide, t);
      x += done;
      out += done;
      wide += done;
      n -= done;
    }
  }
  if (amax_bits <= 0x7F800000u) {
    encode_wide_run_as<In, kE4M3, kCount, false>(x, out, wide, n, scale, limit, t, saturated,
                                                 flushed);
  } else {
    encode_wide_run_as<In, kE4M3, kCount, true>(x, out, wide, n, scale, limit, t, saturated,
                                                flushed);
  }
}

// Rows of bf16 x (`rows` of `w` values, strides x_stride and out_stride) times per-column
// multipliers mult[0, w) (one set for every row: the column copy's band), no counts.
// `amax_bits` as for encode_run. Without NaN and with no negative multiplier, each whole 64
// columns take encode64_bf16 with their multipliers put in its order once (scratch, at least
// w floats, 64-byte aligned); the rest of a row, and other inputs, encode_run.
template <bool kE4M3>
inline OCTET_AVX512_TARGET void encode_columns_bf16(const uint16_t* x, int64_t x_stride,
                                                    uint8_t* __restrict out, int64_t out_stride,
                                                    int64_t rows, int64_t w, const float* mult,
                                                    bool saturate, uint32_t amax_bits,
                                                    float* scratch) {
  int64_t whole = amax_bits <= 0x7F800000u ? w / 64 * 64 : 0;
  for (int64_t c = 0; c < whole; c += 16) {
    if (_mm512_movepi32_mask(_mm512_castps_si512(_mm512_loadu_ps(mult + c))) != 0) whole = 0;
  }
  for (int64_t c = 0; c < whole; c += 64) {
    __m512 in[4], unpacked[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) in[v] = _mm512_loadu_ps(mult + c + 16 * v);
    unpacked_order(in, unpacked);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_ps(scratch + c + 16 * v, unpacked[v]);
  }
  const __m512 clamp = encode_clamp<kE4M3>(saturate);
  uint64_t unused = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * x_stride;
    uint8_t* outr = out + r * out_stride;
    for (int64_t c = 0; c < whole; c += 64) {
      const __m512 m[4] = {_mm512_load_ps(scratch + c), _mm512_load_ps(scratch + c + 16),
                           _mm512_load_ps(scratch + c + 32), _mm512_load_ps(scratch + c + 48)};
      encode64_bf16<kE4M3>(xr + c, outr + c, m, clamp);
    }
    if (whole < w) {
      encode_run<uint16_t, kE4M3, false>(xr + whole, outr + whole, w - whole, mult + whole,
                                         saturate, amax_bits, unused, unused);
    }
  }
}

// encode_tile's full-width tile (64 columns): four vectors a row, the four scale vectors kept
// in registers while consecutive rows share them (rows of one band).
template <class In, bool kE4M3, bool kNan, class RowScale>
OCTET_AVX512_INLINE void encode_tile64(const In* __restrict x, int64_t x_stride,
                                       uint8_t* __restrict out, int64_t out_stride, int64_t rows,
                                       RowScale row_scale, bool saturate) {
  constexpr detail::Fp8Layout f = Fp8Vec<kE4M3>::f;
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(saturate ? f.max_code : f.max_code + 1));
  const float* current = nullptr;
  __m512 s[4];
  for (int64_t r = 0; r < rows; ++r) {
    const float* scale = static_cast<const float*>(row_scale(r));
    if (scale != current) {
      current = scale;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) s[v] = _mm512_loadu_ps(scale + 16 * v);
    }
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512 xv = load16<true>(x + r * x_stride + 16 * v, __mmask16{0xFFFF});
      const __m512i code = encode16<kE4M3, kNan>(_mm512_mul_ps(xv, s[v]), limit);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r * out_stride + 16 * v),
                       _mm512_cvtepi32_epi8(code));
    }
  }
}

// A tile: rows x cols elements of x (row stride x_stride) into out (row stride
// out_stride), row r multiplied element-wise by row_scale(r) (a const float*, one
// per column); no counts. `amax_bits` as for encode_run.
template <class In, bool kE4M3, class RowScale>
inline OCTET_AVX512_TARGET void encode_tile(const In* __restrict x, int64_t x_stride,
                                            uint8_t* __restrict out, int64_t out_stride,
                                            int64_t rows, int64_t cols, RowScale row_scale,
                                            bool saturate, uint32_t amax_bits) {
  if (cols == 64) {  // the common case
    if constexpr (std::is_same_v<In, uint16_t>) {
      // bf16: encode_columns_bf16 for each run of rows that share their multipliers (a band).
      alignas(64) float scratch[64];
      for (int64_t r0 = 0, r1 = 0; r0 < rows; r0 = r1) {
        const auto* scale = static_cast<const float*>(row_scale(r0));
        for (r1 = r0 + 1; r1 < rows && static_cast<const float*>(row_scale(r1)) == scale;) ++r1;
        encode_columns_bf16<kE4M3>(x + r0 * x_stride, x_stride, out + r0 * out_stride, out_stride,
                                   r1 - r0, 64, scale, saturate, amax_bits, scratch);
      }
      return;
    }
    if (amax_bits <= 0x7F800000u) {
      encode_tile64<In, kE4M3, false>(x, x_stride, out, out_stride, rows, row_scale, saturate);
    } else {
      encode_tile64<In, kE4M3, true>(x, x_stride, out, out_stride, rows, row_scale, saturate);
    }
    return;
  }
  uint64_t unused = 0;
  for (int64_t r = 0; r < rows; ++r) {
    encode_run<In, kE4M3, false>(x + r * x_stride, out + r * out_stride, cols,
                                 static_cast<const float*>(row_scale(r)), saturate, amax_bits,
                                 unused, unused);
  }
}

#undef OCTET_AVX512_INLINE
#undef OCTET_AVX512_TARGET

}  // namespace octet::kernels::cpu::avx512
