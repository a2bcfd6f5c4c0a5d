// kernels/cpu/gemm_fp8_fused_cpu.cpp: FP8 GEMMs as ONE full-K GEMM, where gemm_fp8_cpu.cpp's
// reference path runs one GEMM per K slice (block and MX scales) or hands the scales to the
// engine as alpha (per tensor):
//   - every scale a power of two (MX's E8M0, pow2 recipes): code x scale is exact in bf16,
//     so the scales are folded into the widened bf16 operands (one bf16 GEMM, alpha and
//     beta applied by the engine);
//   - per-tensor scales: one bf16 GEMM of the codes with the reference path's factor
//     alpha (sa sb) as the engine's alpha (gemm_onednn.cpp passes it to oneDNN's brgemm
//     kernels as a post-op, applied as they store C; its run-time output scales, which cost
//     1.7-6.6x on the lent H200's AMX Xeon, only where brgemm declines);
//   - per-row scales (which do not split K): one bf16 GEMM of the codes into f32 with alpha 1,
//     then an epilogue C = (alpha sa_i) sb_j acc + beta C; where the CPU has AVX512_BF16 (AMX
//     or not) the block micro-kernel below with one K slice, C = alpha ((sa_i sb_j) acc) +
//     beta C as it stores;
//   (both with f32 operands instead of bf16 where the engine multiplies f32: onednn-f32;)
//   - other scales that split K (block's f32 scales): where the CPU has AVX512_BF16, the
//     micro-kernel of gemm_fp8_block_cpu.cpp (codes through vdpbf16ps per K slice, the
//     scales applied per slice in fp32); elsewhere code x scale widened to f32 (one
//     rounding, 2^-24 relative) and one f32 GEMM.
// Only the fp32 summation order differs from the reference path. Scales whose range
// could leave those conversions inexact (or products subnormal) make it decline, except
// that finite scales splitting K still take the micro-kernel where it runs (it converts
// no scaled value: its scales meet the slice sums in fp32, as on the reference path).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")  // as quantize_cpu.cpp: lets the selects vectorise
#endif
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/convert.h"
#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/gemm_cpu.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/fp8_widen_avx512.h"
#endif
#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

// Below this K the MX GEMMs leave the AMX kernel (mx_on_amx) to oneDNN's brgemm (on AMX too),
// their operands folded as the other MX GEMMs' are: at `tiny` (K of 64) the kernel's per-tile
// stores and epilogue, over two K steps, took 1.25-1.5x the oneDNN way's time, its widening
// included (docs/perf/cpu-step.md, twenty-third session). The per-row GEMMs keep the kernel:
// there the two ways were within 10% and the step did not gain.
constexpr int64_t kAmxMinK = 128;

// Each operand's scaled values stay within [2^-62, 2^48] in magnitude (smallest
// subnormal code x smallest scale, largest code x largest scale): every folded bf16 or
// f32 value is then normal, every product of two is a normal f32 at least 2^-124 (so
// no flush-to-zero in AVX512_BF16 dot products touches it) and sums of up to 2^30 of
// them stay below 2^127.
constexpr float kMinScaled = 0x1p-62f;
constexpr float kMaxScaled = 0x1p48f;

// One operand's scale_inv on its grid, in the stored [rows, K] layout.
struct OperandScales {
  const void* data = nullptr;  // nullptr: every scale is 1
  bool e8m0 = false;
  int64_t block_rows = 1, block_cols = 1, grid_rows = 1, grid_cols = 1;

  float at(int64_t row, int64_t slice) const { return flat(row / block_rows * grid_cols + slice); }
  // The scale stored at `index` of the [grid_rows, grid_cols] grid.
  float flat(int64_t index) const {
    if (data == nullptr) return 1.0f;
    return e8m0 ? e8m0_to_f32(static_cast<const uint8_t*>(data)[index])
                : static_cast<const float*>(data)[index];
  }
};

OperandScales scales_of(const Tensor& s, ScaleGrid g, int64_t rows, int64_t k) {
  OperandScales o;
  o.data = s.empty() ? nullptr : s.data;
  o.e8m0 = g.e8m0;
  o.block_rows =
      g.block_rows == 0 || g.block_rows > rows ? std::max<int64_t>(rows, 1) : g.block_rows;
  o.block_cols = g.block_cols == 0 || g.block_cols > k ? std::max<int64_t>(k, 1) : g.block_cols;
  o.grid_rows = (rows + o.block_rows - 1) / o.block_rows;
  o.grid_cols = (k + o.block_cols - 1) / o.block_cols;
  return o;
}

// What the scales allow: whether they are all powers of two, and whether they are in range.
struct ScaleRange {
  bool in_range = true;
  bool pow2 = true;
};

// Called for both operands of every FP8 GEMM (45 Ki E8M0 scales for MX's [2048, 1376]
// operand), so the loops are integer min/max reductions that vectorise: E8M0 codes order as
// their values (0xFF, the NaN, is the largest), and so do the bits of positive finite floats
// ([1, 0x7F7FFFFF]; +0, negatives, Inf and NaN fall outside). One scalar loop with
// isfinite and a decode per scale took 1% of an MX training step.
ScaleRange range_of(const OperandScales& s, DType fp8) {
  const float unit = fp8 == DType::e4m3 ? 0x1p-9f : 0x1p-16f;  // smallest subnormal
  const float max = fp8 == DType::e4m3 ? 448.0f : 57344.0f;
  float lo = 1.0f, hi = 1.0f;
  bool pow2 = true, finite = true;
  const int64_t n = s.data != nullptr ? s.grid_rows * s.grid_cols : 0;
  if (s.data != nullptr && n == 0) {
    lo = INFINITY;
    hi = 0.0f;
  } else if (s.data != nullptr && s.e8m0) {
    const auto* e = static_cast<const uint8_t*>(s.data);
    uint8_t e_lo = 0xFF, e_hi = 0;
    for (int64_t i = 0; i < n; ++i) {
      e_lo = std::min(e_lo, e[i]);
      e_hi = std::max(e_hi, e[i]);
    }
    finite = e_hi != 0xFF;
    lo = e8m0_to_f32(e_lo);
    hi = e8m0_to_f32(e_hi);
  } else if (s.data != nullptr) {
    const auto* v = static_cast<const float*>(s.data);
    uint32_t b_lo = 0xFFFFFFFFu, b_hi = 0, mantissas = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = f32_bits(v[i]);
      b_lo = std::min(b_lo, bits);
      b_hi = std::max(b_hi, bits);
      mantissas |= bits;
    }
    finite = b_lo >= 1 && b_hi < 0x7F800000u;
    pow2 = (mantissas & 0x007FFFFFu) == 0;
    lo = f32_from_bits(b_lo);
    hi = f32_from_bits(b_hi);
  }
  // Exact: both sides are powers of two or products of FP8 bounds with floats in range.
  const bool in_range = finite && static_cast<double>(unit) * lo >= kMinScaled &&
                        static_cast<double>(max) * hi <= kMaxScaled;
  return {in_range, pow2 && in_range};
}

// FP8 -> f32 decode tables (exact).
struct DecodeTables {
  std::array<float, 256> e4m3, e5m2;
};
const float* decode_table(DType fp8) {
  static const DecodeTables t = [] {
    DecodeTables d;
    for (int v = 0; v < 256; ++v) {
      d.e4m3[v] = e4m3_to_f32(static_cast<uint8_t>(v));
      d.e5m2[v] = e5m2_to_f32(static_cast<uint8_t>(v));
    }
    return d;
  }();
  return fp8 == DType::e4m3 ? t.e4m3.data() : t.e5m2.data();
}

// ---- the loops, compiled once per instruction-set level ----------------------

// out[i] = bf16 of table[in[i]] * scale: exact for a power-of-two scale in range (the
// product has the code's <= 4 significant bits, so its low 16 bits are zero).
[[gnu::always_inline]] inline void widen_bf16_loop(const uint8_t* __restrict in,
                                                   uint16_t* __restrict out, int64_t n,
                                                   const float* __restrict table, float scale,
                                                   bool) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<uint16_t>(f32_bits(table[in[i]] * scale) >> 16);
}

// out[i] = table[in[i]] * scale in f32 (one rounding).
[[gnu::always_inline]] inline void widen_f32_loop(const uint8_t* __restrict in,
                                                  float* __restrict out, int64_t n,
                                                  const float* __restrict table, float scale,
                                                  bool) {
  for (int64_t i = 0; i < n; ++i) out[i] = table[in[i]] * scale;
}

// One row of the per-row epilogue: C = row_scale * col_scale[j] * acc[j] (+ beta * C).
[[gnu::always_inline]] inline void epilogue_loop(const float* __restrict acc,
                                                 const float* __restrict col_scale, int64_t n,
                                                 float row_scale, float beta, float* __restrict cf,
                                                 uint16_t* __restrict cb) {
  if (cb != nullptr) {
    if (beta == 0.0f) {
      for (int64_t j = 0; j < n; ++j) cb[j] = f32_to_bf16(row_scale * col_scale[j] * acc[j]);
    } else {
      for (int64_t j = 0; j < n; ++j)
        cb[j] = f32_to_bf16(row_scale * col_scale[j] * acc[j] + beta * bf16_to_f32(cb[j]));
    }
  } else if (beta == 0.0f) {
    for (int64_t j = 0; j < n; ++j) cf[j] = row_scale * col_scale[j] * acc[j];
  } else {
    for (int64_t j = 0; j < n; ++j) cf[j] = row_scale * col_scale[j] * acc[j] + beta * cf[j];
  }
}

// One row of `n` codes in blocks of `block` along K, block b times scales[b] (powers of two
// in range, as widen_bf16_loop), into bf16.
[[gnu::always_inline]] inline void widen_bf16_blocks_loop(const uint8_t* __restrict in,
                                                          uint16_t* __restrict out, int64_t n,
                                                          int64_t block,
                                                          const float* __restrict scales,
                                                          const float* __restrict table) {
  for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b)
    widen_bf16_loop(in + b0, out + b0, std::min(block, n - b0), table, scales[b], true);
}

// The same into f32: exact for the powers of two in range the folded way takes, one rounding per
// value for the other scales (scaled_f32).
[[gnu::always_inline]] inline void widen_f32_blocks_loop(const uint8_t* __restrict in,
                                                         float* __restrict out, int64_t n,
                                                         int64_t block,
                                                         const float* __restrict scales,
                                                         const float* __restrict table) {
  for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b)
    widen_f32_loop(in + b0, out + b0, std::min(block, n - b0), table, scales[b], true);
}

struct Loops {
  void (*widen_bf16)(const uint8_t*, uint16_t*, int64_t, const float*, float, bool);
  void (*widen_bf16_blocks)(const uint8_t*, uint16_t*, int64_t, int64_t, const float*, const float*,
                            bool);
  void (*widen_f32)(const uint8_t*, float*, int64_t, const float*, float, bool);
  void (*widen_f32_blocks)(const uint8_t*, float*, int64_t, int64_t, const float*, const float*,
                           bool);
  void (*epilogue)(const float*, const float*, int64_t, float, float, float*, uint16_t*);
  // Codes in blocks of 32 (the last may be short) with their E8M0 scale codes (MX), all in
  // the folded way's range; nullptr where the level has none (the blocks loop with f32 scales
  // takes them).
  void (*widen_bf16_e8m0)(const uint8_t*, uint16_t*, int64_t, const uint8_t*, bool) = nullptr;
};

#define OCTET_FP8_GEMM_WIDEN(name, attributes)                                                     \
  attributes void widen_bf16_##name(const uint8_t* in, uint16_t* out, int64_t n,                   \
                                    const float* table, float scale, bool e4m3) {                  \
    widen_bf16_loop(in, out, n, table, scale, e4m3);                                               \
  }                                                                                                \
  attributes void widen_bf16_blocks_##name(const uint8_t* in, uint16_t* out, int64_t n,            \
                                           int64_t block, const float* scales, const float* table, \
                                           bool) {                                                 \
    widen_bf16_blocks_loop(in, out, n, block, scales, table);                                      \
  }
// The table loops into f32, for the levels without a vector decode of their own.
#define OCTET_FP8_GEMM_WIDEN_F32(name, attributes)                                                 \
  attributes void widen_f32_##name(const uint8_t* in, float* out, int64_t n, const float* table,   \
                                   float scale, bool e4m3) {                                       \
    widen_f32_loop(in, out, n, table, scale, e4m3);                                                \
  }                                                                                                \
  attributes void widen_f32_blocks_##name(const uint8_t* in, float* out, int64_t n, int64_t block, \
                                          const float* scales, const float* table, bool) {         \
    widen_f32_blocks_loop(in, out, n, block, scales, table);                                       \
  }
#define OCTET_FP8_GEMM_EPILOGUE(name, attributes)                                         \
  attributes void epilogue_##name(const float* acc, const float* col_scale, int64_t n,    \
                                  float row_scale, float beta, float* cf, uint16_t* cb) { \
    epilogue_loop(acc, col_scale, n, row_scale, beta, cf, cb);                            \
  }

OCTET_FP8_GEMM_WIDEN(baseline, )
OCTET_FP8_GEMM_WIDEN_F32(baseline, )
OCTET_FP8_GEMM_EPILOGUE(baseline, )
constexpr Loops kLoops_baseline = {widen_bf16_baseline, widen_bf16_blocks_baseline,
                                   widen_f32_baseline, widen_f32_blocks_baseline,
                                   epilogue_baseline};
// |code| -> the bf16 bits of its value, for codes 0..127 of E4M3 or E5M2, four registers
// of 32 words each: what vpermt2w looks up. Zero is 0; E4M3's NaN and E5M2's NaNs are
// 0x7FC0, its Inf 0x7F80; every other value is a normal bf16 (FP8 subnormals included).
struct Bf16Table {
  alignas(64) std::array<uint16_t, 128> e4m3, e5m2;
};
const Bf16Table& bf16_table() {
  static const Bf16Table t = [] {
    Bf16Table b;
    for (int v = 0; v < 128; ++v) {
      const float x4 = e4m3_to_f32(static_cast<uint8_t>(v));
      const float x5 = e5m2_to_f32(static_cast<uint8_t>(v));
      b.e4m3[v] = std::isnan(x4) ? uint16_t{0x7FC0} : static_cast<uint16_t>(f32_bits(x4) >> 16);
      b.e5m2[v] = std::isnan(x5) ? uint16_t{0x7FC0} : static_cast<uint16_t>(f32_bits(x5) >> 16);
    }
    return b;
  }();
  return t;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define OCTET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2")))
#define OCTET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")))
OCTET_FP8_GEMM_WIDEN(avx2, OCTET_AVX2)
OCTET_FP8_GEMM_EPILOGUE(avx2, OCTET_AVX2)
OCTET_FP8_GEMM_EPILOGUE(avx512, OCTET_AVX512)

// 8 FP8 codes -> their f32 values times `scale` (one rounding; exact for a power of two in
// range), by way of f16 as decode16_avx512 below does: (code & 0x7F) << 7 as f16 bits is
// |E4M3 value| x 2^-8 for every finite code, code << 8 is the E5M2 value; vcvtph2ps is exact.
// Where the table loop gathers one float per code, this is a handful of vector ops per 8.
OCTET_AVX2 inline __m256 decode8_avx2(const uint8_t* in, __m256 scale, bool e4m3) {
  const __m128i codes = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)));
  if (!e4m3) return _mm256_mul_ps(_mm256_cvtph_ps(_mm_slli_epi16(codes, 8)), scale);
  const __m128i mag = _mm_and_si128(codes, _mm_set1_epi16(0x7F));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(codes, _mm_set1_epi16(0x80)), 8);
  const __m128i half = _mm_or_si128(_mm_slli_epi16(mag, 7), sign);
  const __m256 v =
      _mm256_mul_ps(_mm256_cvtph_ps(half), _mm256_mul_ps(scale, _mm256_set1_ps(256.0f)));
  // E4M3's only NaN magnitude, 0x7F, would decode as 480: make it a quiet NaN.
  const __m256 nan =
      _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F))));
  return _mm256_blendv_ps(v, _mm256_set1_ps(NAN), nan);
}

OCTET_AVX2 inline void widen_f32_run_avx2(const uint8_t* in, float* out, int64_t n,
                                          const float* table, float scale, bool e4m3) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, decode8_avx2(in + i, s, e4m3));
  widen_f32_loop(in + i, out + i, n - i, table, scale, e4m3);
}
OCTET_AVX2 void widen_f32_avx2(const uint8_t* in, float* out, int64_t n, const float* table,
                               float scale, bool e4m3) {
  widen_f32_run_avx2(in, out, n, table, scale, e4m3);
}
OCTET_AVX2 void widen_f32_blocks_avx2(const uint8_t* in, float* out, int64_t n, int64_t block,
                                      const float* scales, const float* table, bool e4m3) {
  for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b)
    widen_f32_run_avx2(in + b0, out + b0, std::min(block, n - b0), table, scales[b], e4m3);
}
constexpr Loops kLoops_avx2 = {widen_bf16_avx2, widen_bf16_blocks_avx2, widen_f32_avx2,
                               widen_f32_blocks_avx2, epilogue_avx2};

// 16 FP8 codes -> their f32 values times `scale` (one rounding; exact for a power of two
// in range), by way of f16: (code & 0x7F) << 7 as f16 bits is |E4M3 value| x 2^-8 for every
// finite code, subnormals included (both formats' mantissas line up, bias 15 vs 7), and
// code << 8 is the E5M2 value itself (E5M2 is f16's upper byte). vcvtph2ps is exact.
OCTET_AVX512 inline __m512 decode16_avx512(const uint8_t* in, __m512 scale, bool e4m3) {
  const __m256i codes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  if (!e4m3) return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_slli_epi16(codes, 8)), scale);
  const __m256i mag = _mm256_and_si256(codes, _mm256_set1_epi16(0x7F));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(codes, _mm256_set1_epi16(0x80)), 8);
  const __m256i half = _mm256_or_si256(_mm256_slli_epi16(mag, 7), sign);
  const __m512 v =
      _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_mul_ps(scale, _mm512_set1_ps(256.0f)));
  // E4M3's only NaN magnitude, 0x7F, would decode as 480: make it a quiet NaN.
  const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F));
  return _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(NAN));
}

// 32 codes (kFull) or the first n < 32 of them -> bf16 of value x 2^shift: the magnitude
// looked up in the table (two vpermt2w for its halves), 2^shift added to the exponent of the
// finite nonzero values (exact: the caller keeps every scaled value a normal bf16, see
// kMinScaled), the sign or-ed in. A tail uses masked loads and stores (nothing past n is read
// or written); full vectors plain ones, which are cheaper (much so on the AMD Zen 5 this was
// measured on). The two are separate instantiations: with one run-time `full` flag GCC
// merged them into the masked form for every vector.
template <bool kFull>
OCTET_AVX512 inline __m512i widened32_avx512(const uint8_t* in, __mmask32 live, const __m512i* t,
                                             __m512i shift) {
  const __m256i bytes = kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in))
                              : _mm256_maskz_loadu_epi8(live, in);
  const __m512i codes = _mm512_cvtepu8_epi16(bytes);
  const __m512i v = avx512::widen_magnitudes(codes, t);
  // Finite and nonzero: the magnitude's bf16 bits nonzero and below Inf's (0x7F80).
  const __mmask32 scaled =
      _mm512_mask_cmplt_epu16_mask(_mm512_test_epi16_mask(v, v), v, _mm512_set1_epi16(0x7F80));
  return avx512::with_sign(_mm512_mask_add_epi16(v, scaled, v, shift), codes);
}
template <bool kFull>
OCTET_AVX512 inline void widen32_avx512(const uint8_t* in, uint16_t* out, int64_t n,
                                        const __m512i* t, __m512i shift) {
  const __mmask32 live = kFull ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
  const __m512i v = widened32_avx512<kFull>(in, live, t, shift);
  if constexpr (kFull) {
    _mm512_storeu_si512(out, v);
  } else {
    _mm512_mask_storeu_epi16(out, live, v);
  }
}
// The same into f32 (the bf16 bits shifted up: exact), for the f32 operands of onednn-f32:
// two table lookups a 32 codes where decode16_avx512 takes about twice the instructions.
template <bool kFull>
OCTET_AVX512 inline void widen32_f32_avx512(const uint8_t* in, float* out, int64_t n,
                                            const __m512i* t, __m512i shift) {
  const __mmask32 live = kFull ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
  const __m512i v = widened32_avx512<kFull>(in, live, t, shift);
  const __m512i lo = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16);
  const __m512i hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16);
  if constexpr (kFull) {
    _mm512_storeu_si512(out, lo);
    _mm512_storeu_si512(out + 16, hi);
  } else {
    _mm512_mask_storeu_epi32(out, static_cast<__mmask16>(live), lo);
    _mm512_mask_storeu_epi32(out + 16, static_cast<__mmask16>(live >> 16), hi);
  }
}

// n codes, all with one shift: full vectors, then the tail.
OCTET_AVX512 inline void widen_run_avx512(const uint8_t* in, uint16_t* out, int64_t n,
                                          const __m512i* t, __m512i shift) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) widen32_avx512<true>(in + i, out + i, 32, t, shift);
  if (i < n) widen32_avx512<false>(in + i, out + i, n - i, t, shift);
}

// The table of one format in four registers.
OCTET_AVX512 inline void load_table(bool e4m3, __m512i* t) {
  avx512::load_widen_table(e4m3 ? bf16_table().e4m3.data() : bf16_table().e5m2.data(), t);
}

// A power of two's exponent, as the amount added to a bf16's bits.
OCTET_AVX512 inline __m512i exponent_shift(float scale) {
  const int e = static_cast<int>((f32_bits(scale) >> 23) & 0xFF) - 127;
  return _mm512_set1_epi16(static_cast<int16_t>(e * 128));
}

// Whether `scale` is a power of two (f32 normal, mantissa zero): the table way's condition.
inline bool normal_pow2(float scale) {
  const uint32_t b = f32_bits(scale);
  return (b & 0x007FFFFFu) == 0 && ((b >> 23) & 0xFF) != 0 && ((b >> 23) & 0xFF) != 0xFF &&
         (b >> 31) == 0;
}

OCTET_AVX512 void widen_bf16_avx512(const uint8_t* in, uint16_t* out, int64_t n, const float* table,
                                    float scale, bool e4m3) {
  if (!normal_pow2(scale)) {  // not a way the GEMMs call it; kept exact all the same
    widen_bf16_loop(in, out, n, table, scale, e4m3);
    return;
  }
  __m512i t[4];
  load_table(e4m3, t);
  widen_run_avx512(in, out, n, t, exponent_shift(scale));
}

OCTET_AVX512 void widen_bf16_blocks_avx512(const uint8_t* in, uint16_t* out, int64_t n,
                                           int64_t block, const float* scales, const float* table,
                                           bool e4m3) {
  __m512i t[4];
  load_table(e4m3, t);
  const int64_t blocks = (n + block - 1) / block;
  if (block == 32) {
    // MX: one vector per block. The scales are checked first, so that the loop over the
    // blocks is nothing but the vector work (per-block checks and a loop per block cost as
    // much as the widening itself there).
    bool pow2 = true;
    for (int64_t b = 0; b < blocks; ++b) pow2 = pow2 && normal_pow2(scales[b]);
    if (pow2) {
      int64_t b = 0;
      for (; (b + 1) * 32 <= n; ++b)
        widen32_avx512<true>(in + b * 32, out + b * 32, 32, t, exponent_shift(scales[b]));
      if (b * 32 < n)
        widen32_avx512<false>(in + b * 32, out + b * 32, n - b * 32, t, exponent_shift(scales[b]));
      return;
    }
  }
  for (int64_t b0 = 0, b = 0; b < blocks; b0 += block, ++b) {
    const int64_t w = std::min(block, n - b0);
    if (!normal_pow2(scales[b])) {
      widen_bf16_loop(in + b0, out + b0, w, table, scales[b], e4m3);
      continue;
    }
    widen_run_avx512(in + b0, out + b0, w, t, exponent_shift(scales[b]));
  }
}

// Lane j of v in every lane.
OCTET_AVX512 inline __m512i lane(__m512i v, int j) {
  return _mm512_permutexvar_epi32(_mm512_set1_epi32(j), v);
}

// n codes in blocks of 32 (the last may be short), block b times 2^(e8m0[b] - 127): the
// exponent shifts of 16 blocks at a time from their codes in one vector (no decode, no check
// per block: range_of keeps every code of the folded way in range, so every shift leaves a
// normal bf16).
OCTET_AVX512 void widen_bf16_e8m0_avx512(const uint8_t* in, uint16_t* out, int64_t n,
                                         const uint8_t* e8m0, bool e4m3) {
  __m512i t[4];
  load_table(e4m3, t);
  const int64_t blocks = (n + 31) / 32, full = n / 32;
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int64_t count = std::min<int64_t>(16, blocks - b0);
    const auto live = static_cast<__mmask16>((1u << count) - 1);
    const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(live, e8m0 + b0));
    // (e - 127) * 128 in both 16-bit halves of each lane: one vpermd broadcasts it to a block.
    const __m512i lo =
        _mm512_and_si512(_mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(127)), 7),
                         _mm512_set1_epi32(0xFFFF));
    const __m512i shifts = _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16));
    const uint8_t* src = in + b0 * 32;
    uint16_t* dst = out + b0 * 32;
    if (b0 + 16 <= full) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        widen32_avx512<true>(src + j * 32, dst + j * 32, 32, t, lane(shifts, j));
      continue;
    }
    for (int j = 0; j < count; ++j) {
      if (b0 + j < full) {
        widen32_avx512<true>(src + j * 32, dst + j * 32, 32, t, lane(shifts, j));
      } else {
        widen32_avx512<false>(src + j * 32, dst + j * 32, n - (b0 + j) * 32, t, lane(shifts, j));
      }
    }
  }
}

// Whether widen32_f32_avx512 takes a scale: a power of two whose every product with a finite
// nonzero code (2^-16 .. 2^16 in magnitude, E5M2's) is a normal bf16, whatever the caller
// checked: |exponent| <= 100 (bf16 and f32 are normal from 2^-126 to below 2^128).
inline bool table_way_f32(float scale) {
  const int e = static_cast<int>((f32_bits(scale) >> 23) & 0xFF) - 127;
  return normal_pow2(scale) && e >= -100 && e <= 100;
}
OCTET_AVX512 inline void widen_run_f32_avx512(const uint8_t* in, float* out, int64_t n,
                                              const __m512i* t, __m512i shift) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) widen32_f32_avx512<true>(in + i, out + i, 32, t, shift);
  if (i < n) widen32_f32_avx512<false>(in + i, out + i, n - i, t, shift);
}

OCTET_AVX512 void widen_f32_avx512(const uint8_t* in, float* out, int64_t n, const float* table,
                                   float scale, bool e4m3) {
  if (table_way_f32(scale)) {
    __m512i t[4];
    load_table(e4m3, t);
    widen_run_f32_avx512(in, out, n, t, exponent_shift(scale));
    return;
  }
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, decode16_avx512(in + i, s, e4m3));
  widen_f32_loop(in + i, out + i, n - i, table, scale, e4m3);
}
OCTET_AVX512 void widen_f32_blocks_avx512(const uint8_t* in, float* out, int64_t n, int64_t block,
                                          const float* scales, const float* table, bool e4m3) {
  const int64_t blocks = (n + block - 1) / block;
  bool table_way = true;
  for (int64_t b = 0; b < blocks; ++b) table_way = table_way && table_way_f32(scales[b]);
  if (table_way) {
    // MX's blocks (and other powers of two) with the table loaded once, not per block.
    __m512i t[4];
    load_table(e4m3, t);
    for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b) {
      widen_run_f32_avx512(in + b0, out + b0, std::min(block, n - b0), t,
                           exponent_shift(scales[b]));
    }
    return;
  }
  for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b)
    widen_f32_avx512(in + b0, out + b0, std::min(block, n - b0), table, scales[b], e4m3);
}
constexpr Loops kLoops_avx512 = {widen_bf16_avx512, widen_bf16_blocks_avx512,
                                 widen_f32_avx512,  widen_f32_blocks_avx512,
                                 epilogue_avx512,   widen_bf16_e8m0_avx512};
#undef OCTET_AVX2
#undef OCTET_AVX512
#endif
#undef OCTET_FP8_GEMM_WIDEN
#undef OCTET_FP8_GEMM_WIDEN_F32
#undef OCTET_FP8_GEMM_EPILOGUE

const Loops& pick_loops() {
  const Isa isa = usable_isa("gemm");
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::avx512) return kLoops_avx512;
  if (isa == Isa::avx2) return kLoops_avx2;
#endif
  return kLoops_baseline;
}

// Whether an operand is one run of rows x k codes with one scale (unscaled, or one scale for
// the whole matrix).
bool one_run(const OperandScales& s, bool apply_scales) {
  return !apply_scales || (s.grid_rows == 1 && s.grid_cols == 1);
}

// Runs of codes, each with one scale, widened in one loop over their chunks of 16 Ki codes (32
// KiB of bf16), not a call per row (rows of 64 or 256 codes spent much of it on the calls).
// Given both operands (b_n may be 0), B, often a weight too small to be split on its own (192
// x 64 at tiny), shares the threads with A instead of running on one thread after A's loop.
template <class Out>
void widen_pair(const Loops& l, const uint8_t* a, DType a_dtype, int64_t a_n, float a_scale,
                Out* a_out, const uint8_t* b, DType b_dtype, int64_t b_n, float b_scale,
                Out* b_out) {
  constexpr int64_t kChunk = int64_t{1} << 14;
  const int64_t a_chunks = (a_n + kChunk - 1) / kChunk;
  const int64_t chunks = a_chunks + (b_n + kChunk - 1) / kChunk;
  const float* a_table = decode_table(a_dtype);
  const float* b_table = decode_table(b_dtype);
#pragma omp parallel for schedule(static) if (a_n + b_n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const bool is_a = c < a_chunks;
    const int64_t begin = (is_a ? c : c - a_chunks) * kChunk;
    const int64_t n = std::min(kChunk, (is_a ? a_n : b_n) - begin);
    const uint8_t* in = (is_a ? a : b) + begin;
    Out* out = (is_a ? a_out : b_out) + begin;
    const float* table = is_a ? a_table : b_table;
    const float scale = is_a ? a_scale : b_scale;
    const bool e4m3 = (is_a ? a_dtype : b_dtype) == DType::e4m3;
    if constexpr (sizeof(Out) == 2) {
      l.widen_bf16(in, out, n, table, scale, e4m3);
    } else {
      l.widen_f32(in, out, n, table, scale, e4m3);
    }
  }
}

// Widens the [rows, k] FP8 matrix with its scales into bf16 (fold) or f32, row-parallel.
template <class Out>
void widen(const Loops& l, const uint8_t* src, DType dtype, int64_t rows, int64_t k,
           const OperandScales& s, bool apply_scales, Out* dst) {
  const float* table = decode_table(dtype);
  const bool e4m3 = dtype == DType::e4m3;
  if (one_run(s, apply_scales)) {
    widen_pair(l, src, dtype, rows * k, apply_scales ? s.at(0, 0) : 1.0f, dst, nullptr, dtype, 0,
               1.0f, static_cast<Out*>(nullptr));
    return;
  }
  // From here on the scales are applied (unscaled operands took the run above).
  if constexpr (sizeof(Out) == 2) {
    if (s.e8m0 && s.data != nullptr && s.block_rows == 1 && s.block_cols == 32 &&
        s.block_cols < k && l.widen_bf16_e8m0 != nullptr) {
      // MX with the level's E8M0 loop: rows of whole blocks as one run in pieces of 2048 codes
      // (blocks and scales of consecutive rows follow each other), else row by row.
      const auto* e8m0 = static_cast<const uint8_t*>(s.data);
      if (k % 32 == 0) {
        constexpr int64_t kPiece = 2048;
        const int64_t n = rows * k, pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
        for (int64_t p = 0; p < pieces; ++p) {
          const int64_t c0 = p * kPiece;
          l.widen_bf16_e8m0(src + c0, dst + c0, std::min(kPiece, n - c0), e8m0 + c0 / 32, e4m3);
        }
      } else {
#pragma omp parallel for schedule(static) if (rows * k > kParallelMin)
        for (int64_t r = 0; r < rows; ++r)
          l.widen_bf16_e8m0(src + r * k, dst + r * k, k, e8m0 + r * s.grid_cols, e4m3);
      }
      return;
    }
  }
  // Blocks along K in either output type (bf16: the folded way; f32: the folded way on
  // onednn-f32, or scales that split K).
  const auto blocks_loop = [&l](const uint8_t* in, Out* out, int64_t n, int64_t block,
                                const float* scales, const float* table, bool e4m3) {
    if constexpr (sizeof(Out) == 2) {
      l.widen_bf16_blocks(in, out, n, block, scales, table, e4m3);
    } else {
      l.widen_f32_blocks(in, out, n, block, scales, table, e4m3);
    }
  };
  if (s.block_rows == 1 && s.block_cols < k && k % s.block_cols == 0) {
    // 1 x N blocks that tile each row (MX below AVX-512, power-of-two 1 x N, 1 x 128 in f32):
    // the blocks of all rows are one run and so are their scales (flat index r * grid_cols +
    // slice); pieces of kSlices blocks with their scales gathered, whatever the row boundaries.
    constexpr int64_t kSlices = 64;
    const int64_t blocks = rows * s.grid_cols, pieces = (blocks + kSlices - 1) / kSlices;
#pragma omp parallel for schedule(static) if (rows * k > kParallelMin)
    for (int64_t p = 0; p < pieces; ++p) {
      float scales[kSlices];
      const int64_t b0 = p * kSlices, count = std::min(kSlices, blocks - b0);
      for (int64_t x = 0; x < count; ++x) scales[x] = s.flat(b0 + x);
      const int64_t c0 = b0 * s.block_cols;
      blocks_loop(src + c0, dst + c0, count * s.block_cols, s.block_cols, scales, table, e4m3);
    }
    return;
  }
  if (s.block_cols < k) {
    // Other K-split grids (blocks that do not tile the row, or span rows): each row's block
    // scales gathered, then one call per row and up to kSlices blocks.
    constexpr int64_t kSlices = 64;
#pragma omp parallel for schedule(static) if (rows * k > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      float scales[kSlices];
      for (int64_t x0 = 0; x0 < s.grid_cols; x0 += kSlices) {
        const int64_t count = std::min(kSlices, s.grid_cols - x0);
        for (int64_t x = 0; x < count; ++x) scales[x] = s.at(r, x0 + x);
        const int64_t c0 = x0 * s.block_cols, w = std::min(count * s.block_cols, k - c0);
        blocks_loop(src + r * k + c0, dst + r * k + c0, w, s.block_cols, scales, table, e4m3);
      }
    }
    return;
  }
#pragma omp parallel for schedule(static) if (rows * k > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s0 = 0, slice = 0; s0 < k; s0 += s.block_cols, ++slice) {
      const int64_t w = std::min(s.block_cols, k - s0);
      const float scale = s.at(r, slice);
      if constexpr (sizeof(Out) == 2) {
        l.widen_bf16(src + r * k + s0, dst + r * k + s0, w, table, scale, e4m3);
      } else {
        l.widen_f32(src + r * k + s0, dst + r * k + s0, w, table, scale, e4m3);
      }
    }
  }
}

// C = row_scale[i] (or `row`) * col_scale[j] * acc + beta * C, rows in parallel.
void epilogue(const Loops& l, const float* acc, const float* row_scale, const float* col_scale,
              float row, float beta, const Tensor& c, GemmDims d) {
  const bool bf16_out = c.dtype == DType::bf16;
#pragma omp parallel for schedule(static) if (d.m * d.n > kParallelMin)
  for (int64_t i = 0; i < d.m; ++i) {
    l.epilogue(acc + i * d.n, col_scale, d.n, row_scale != nullptr ? row_scale[i] : row, beta,
               bf16_out ? nullptr : c.as<float>() + i * d.n,
               bf16_out ? c.as<uint16_t>() + i * d.n : nullptr);
  }
}

bool splits_k(const OperandScales& s, int64_t k) {
  return s.block_cols < k;
}

// The workspace: [slack][A' (bf16 or f32)][B'][acc f32 M x N, or the folded way's staging]
// [row scales M][column scales N]. One call takes one way, so the accumulator (the other ways)
// and the engine's staging (the folded way's) share their bytes.
struct FusedLayout {
  size_t a_bytes, b_bytes, acc_bytes, rows_bytes, cols_bytes, staging_bytes;
  size_t out_bytes() const { return std::max(acc_bytes, staging_bytes); }
  size_t total() const {
    return kAlign + a_bytes + b_bytes + out_bytes() + rows_bytes + cols_bytes;
  }
};

FusedLayout fused_layout(GemmDims d, const GemmOptions& o, DType c_dtype) {
  const bool split = (o.a_grid.block_cols != 0 && o.a_grid.block_cols < d.k) ||
                     (o.b_grid.block_cols != 0 && o.b_grid.block_cols < d.k);
  // f32 operands where K is split, or where the engine multiplies f32.
  const DType wide = matmul_operand_dtype();
  const size_t element = split || wide == DType::f32 ? 4 : 2;
  const auto mn = static_cast<size_t>(d.m * d.n);
  // The folded way's GEMM writes C: the engine's f32 C where it is bf16 on onednn-f32.
  const int64_t staging = matmul_staging_floats(wide, c_dtype, d.m, d.n, d.k);
  return {align_up(static_cast<size_t>(d.m * d.k) * element),
          align_up(static_cast<size_t>(d.n * d.k) * element),
          align_up(mn * 4),
          align_up(static_cast<size_t>(d.m) * 4),
          align_up(static_cast<size_t>(d.n) * 4),
          align_up(static_cast<size_t>(staging) * 4)};
}

// Whether every scale is finite and positive (E8M0: not its NaN, 0xFF).
bool finite_scales(const OperandScales& s) {
  if (s.data == nullptr) return true;
  const int64_t n = s.grid_rows * s.grid_cols;
  for (int64_t i = 0; i < n; ++i) {
    if (s.e8m0) {
      if (static_cast<const uint8_t*>(s.data)[i] == 0xFF) return false;
    } else {
      const float v = static_cast<const float*>(s.data)[i];
      if (!std::isfinite(v) || !(v > 0.0f)) return false;
    }
  }
  return true;
}

// The K slice of the block micro-kernel (gemm_fp8_block_cpu.cpp): every operand that
// splits K splits it into slices of one even width; 0 where the grids do not allow it.
int64_t block_slice(GemmDims d, const GemmOptions& o) {
  int64_t slice = 0;
  for (const ScaleGrid& g : {o.a_grid, o.b_grid}) {
    if (g.block_cols == 0 || g.block_cols >= d.k) continue;
    if (slice != 0 && g.block_cols != slice) return 0;
    slice = g.block_cols;
  }
  return slice % 2 == 0 ? slice : 0;
}

// Scales per row (the row recipe) also take the block kernel where the CPU has AVX512_BF16, with
// one K slice (K rounded up to AMX's 32-wide steps): C = alpha ((sa_i sb_j) acc) + beta C as it
// stores, the reference path's order, with no f32 C and no epilogue pass over it, and x's and
// dy's column copies read as stored (fp8_gemm_reads_k_first). Without AMX it took the row step
// from 1.13x bf16's time to 1.06x at 256-wide once the kernel widened A a task at a time
// (docs/perf/cpu-step.md, twenty-seventh session). 0 where the grids split K or are per tensor.
int64_t row_slice(GemmDims d, const GemmOptions& o) {
  const bool split = (o.a_grid.block_cols != 0 && o.a_grid.block_cols < d.k) ||
                     (o.b_grid.block_cols != 0 && o.b_grid.block_cols < d.k);
  const bool per_row = o.a_grid.block_rows != 0 || o.b_grid.block_rows != 0;
  return split || !per_row ? 0 : (std::max<int64_t>(d.k, 1) + 31) / 32 * 32;
}

// Its workspace: [a_scales m x S][b_scales n x S][the kernel's own], multiplying as f32
// (Fp8BlockGemm::f32) or not.
size_t block_workspace_bytes(GemmDims d, int64_t slice, bool f32) {
  const int64_t slices = (d.k + slice - 1) / slice;
  return kAlign + align_up(static_cast<size_t>(d.m * slices) * 4) +
         align_up(static_cast<size_t>(d.n * slices) * 4) +
         fp8_block_gemm_workspace_bytes(d.m, d.n, d.k, slice, f32);
}
// Room for the kernel as it runs now (fp8_block_gemm_prefers_f32).
size_t block_workspace_bytes(GemmDims d, int64_t slice) {
  return block_workspace_bytes(d, slice, fp8_block_gemm_prefers_f32());
}

// The block way: each operand's scales per (row, slice) as f32, then the micro-kernel.
void run_block_gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o,
                    GemmDims d, const OperandScales& sa, const OperandScales& sb, int64_t slice) {
  const int64_t slices = (d.k + slice - 1) / slice;
  char* base = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(o.workspace.data)));
  auto* a_scales = reinterpret_cast<float*>(base);
  auto* b_scales = reinterpret_cast<float*>(base + align_up(static_cast<size_t>(d.m * slices) * 4));
  void* rest = base + align_up(static_cast<size_t>(d.m * slices) * 4) +
               align_up(static_cast<size_t>(d.n * slices) * 4);
  auto fill = [&](const OperandScales& s, int64_t rows, float* out) {
    const bool split = splits_k(s, d.k);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t x = 0; x < slices; ++x) out[r * slices + x] = s.at(r, split ? x : 0);
  };
  fill(sa, d.m, a_scales);
  fill(sb, d.n, b_scales);
  // f32 FMAs where they are faster and the workspace was sized for them (the engine may have
  // changed since): the same bits either way.
  const bool f32 =
      fp8_block_gemm_prefers_f32() && o.workspace.nbytes() >= block_workspace_bytes(d, slice, true);
  fp8_block_gemm(
      {a.as<const uint8_t>(), a.dtype, b.as<const uint8_t>(), b.dtype, d.m, d.n, d.k, slice,
       a_scales, b_scales, c.data, c.dtype, o.alpha, o.beta, o.trans_a, !o.trans_b, f32},
      rest);
}

// MX operands (every scale an E8M0 per 32 of K) of a GEMM shaped as bf16_amx_gemm_takes has it
// (A the larger operand: the weight gradients of qkv and gate/up), K at least kAmxMinK: their rows
// are folded straight into that kernel's layout, A's at its padded stride, and the bf16 GEMM runs
// as bf16's own weight gradients do, on the AMX kernel rather than oneDNN's brgemm.
bool mx_on_amx(const OperandScales& sa, const OperandScales& sb, GemmDims d, const Loops& l) {
  const auto mx = [](const OperandScales& s) {
    return s.e8m0 && s.data != nullptr && s.block_rows == 1 && s.block_cols == 32;
  };
  return mx(sa) && mx(sb) && d.k % 32 == 0 && d.k >= kAmxMinK && l.widen_bf16_e8m0 != nullptr &&
         gemm_impl() == GemmImpl::onednn && bf16_amx_gemm_takes(d.m, d.n, d.k);
}

void run_mx_on_amx(const uint8_t* a8, DType a_dtype, const OperandScales& sa, const uint8_t* b8,
                   DType b_dtype, const OperandScales& sb, GemmDims d, const Loops& l,
                   const Tensor& c, float alpha, float beta, void* workspace) {
  const Bf16AmxOperands ops = bf16_amx_operands(d.m, d.n, d.k, workspace);
  // An operand whose rows lie at stride K with its scales at stride K / 32 (B always: K % 32 ==
  // 0; A unless padded, BlockLayout::lda) is one run of blocks, widened in pieces of kPiece codes;
  // other rows one by one. (A call per row of 64 codes cost as much as the widening at `tiny`.)
  struct Operand {
    const uint8_t* codes;
    uint16_t* out;
    int64_t rows, ld;
    const uint8_t* e8m0;
    int64_t grid_cols;
    bool e4m3;
  };
  constexpr int64_t kPiece = 2048;
  const Operand ops_ab[2] = {{a8, ops.a, d.m, ops.lda, static_cast<const uint8_t*>(sa.data),
                              sa.grid_cols, a_dtype == DType::e4m3},
                             {b8, ops.b, d.n, ops.ldb, static_cast<const uint8_t*>(sb.data),
                              sb.grid_cols, b_dtype == DType::e4m3}};
  const auto run = [&](const Operand& o) { return o.ld == d.k && o.grid_cols * 32 == d.k; };
  const auto tasks = [&](const Operand& o) {
    return run(o) ? (o.rows * d.k + kPiece - 1) / kPiece : o.rows;
  };
  const int64_t a_tasks = tasks(ops_ab[0]), all = a_tasks + tasks(ops_ab[1]);
#pragma omp parallel for schedule(static) if ((d.m + d.n) * d.k > kParallelMin)
  for (int64_t t = 0; t < all; ++t) {
    const Operand& o = ops_ab[t < a_tasks ? 0 : 1];
    const int64_t i = t < a_tasks ? t : t - a_tasks;
    if (run(o)) {
      const int64_t c0 = i * kPiece;
      l.widen_bf16_e8m0(o.codes + c0, o.out + c0, std::min(kPiece, o.rows * d.k - c0),
                        o.e8m0 + c0 / 32, o.e4m3);
    } else {
      l.widen_bf16_e8m0(o.codes + i * d.k, o.out + i * o.ld, d.k, o.e8m0 + i * o.grid_cols, o.e4m3);
    }
  }
  bf16_amx_gemm({nullptr, nullptr, d.m, d.n, d.k, c.data, c.dtype, alpha, beta}, workspace);
}

}  // namespace

Fp8ToBf16 fp8_to_bf16(DType dtype) {
  return {pick_loops().widen_bf16, decode_table(dtype), dtype == DType::e4m3};
}

const uint16_t* fp8_bf16_table(DType dtype) {
  return dtype == DType::e4m3 ? bf16_table().e4m3.data() : bf16_table().e5m2.data();
}

Fp8ToF32 fp8_to_f32(DType dtype) {
  return {pick_loops().widen_f32, decode_table(dtype), dtype == DType::e4m3};
}

size_t fp8_gemm_fused_workspace_bytes(GemmDims d, const GemmOptions& o, DType c_dtype) {
  // The block micro-kernel's too, where the grids allow it (whether it runs is decided per call).
  // Per-row grids take it with AVX512_BF16: no room for it on a CPU without.
  const int64_t slice = block_slice(d, o), rows = hardware_has_avx512_bf16() ? row_slice(d, o) : 0;
  const size_t block = slice == 0 ? 0 : block_workspace_bytes(d, slice);
  const size_t row = rows == 0 ? 0 : block_workspace_bytes(d, rows);
  // MX on AMX (mx_on_amx; 0 without AMX or where A is not the larger operand).
  const size_t mx =
      o.a_grid.e8m0 && o.b_grid.e8m0 ? bf16_amx_gemm_workspace_bytes(d.m, d.n, d.k) : 0;
  return std::max({fused_layout(d, o, c_dtype).total(), block, row, mx});
}

bool fp8_gemm_reads_k_first(ScaleGrid grid) {
  // 1xN f32 grids: block_slice's way (scaled_f32); per row: row_slice's.
  return grid.block_rows == 1 && !grid.e8m0 && fp8_block_gemm_available();
}

Fp8FusedKind fp8_gemm_fused_kind(const Tensor& a, const Tensor& b, const GemmOptions& o,
                                 GemmDims d) {
  const OperandScales sa = scales_of(o.a_scale_inv, o.a_grid, d.m, d.k);
  const OperandScales sb = scales_of(o.b_scale_inv, o.b_grid, d.n, d.k);
  if (d.k == 0) return Fp8FusedKind::none;  // C = beta C: the reference path has it
  const ScaleRange ra = range_of(sa, a.dtype), rb = range_of(sb, b.dtype);
  if (!ra.in_range || !rb.in_range) return Fp8FusedKind::none;
  if (ra.pow2 && rb.pow2) return Fp8FusedKind::folded;
  if (splits_k(sa, d.k) || splits_k(sb, d.k)) return Fp8FusedKind::scaled_f32;
  return Fp8FusedKind::row_epilogue;
}

bool fp8_gemm_fused(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o,
                    GemmDims d) {
  const Fp8FusedKind kind = fp8_gemm_fused_kind(a, b, o, d);
  const OperandScales sa = scales_of(o.a_scale_inv, o.a_grid, d.m, d.k);
  const OperandScales sb = scales_of(o.b_scale_inv, o.b_grid, d.n, d.k);
  if (kind == Fp8FusedKind::none) {
    // Out of the widening ways' range (e.g. a block's scale_inv of 1 / FLT_MAX where its amax
    // was tiny) but finite: the block micro-kernel widens the codes unscaled and applies the
    // scales in fp32 per slice, as the per-slice path does, only faster.
    const int64_t slice = block_slice(d, o);
    if (d.k == 0 || slice == 0 || !fp8_block_gemm_available() || !finite_scales(sa) ||
        !finite_scales(sb))
      return false;
    run_block_gemm(a, b, c, o, d, sa, sb, slice);
    return true;
  }

  const FusedLayout l = fused_layout(d, o, c.dtype);
  char* base = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(o.workspace.data)));
  const Loops& loops = pick_loops();
  const auto* a8 = a.as<const uint8_t>();
  const auto* b8 = b.as<const uint8_t>();

  const DType wide = matmul_operand_dtype();
  // The operands widened into the engine's dtype (bf16, or f32 on onednn-f32), with their
  // scales or without.
  auto widen_both = [&](bool apply_scales) {
    if (one_run(sa, apply_scales) && one_run(sb, apply_scales)) {
      const float a_scale = apply_scales ? sa.at(0, 0) : 1.0f;
      const float b_scale = apply_scales ? sb.at(0, 0) : 1.0f;
      if (wide == DType::f32) {
        widen_pair(loops, a8, a.dtype, d.m * d.k, a_scale, reinterpret_cast<float*>(base), b8,
                   b.dtype, d.n * d.k, b_scale, reinterpret_cast<float*>(base + l.a_bytes));
      } else {
        widen_pair(loops, a8, a.dtype, d.m * d.k, a_scale, reinterpret_cast<uint16_t*>(base), b8,
                   b.dtype, d.n * d.k, b_scale, reinterpret_cast<uint16_t*>(base + l.a_bytes));
      }
      return;
    }
    if (wide == DType::f32) {
      widen(loops, a8, a.dtype, d.m, d.k, sa, apply_scales, reinterpret_cast<float*>(base));
      widen(loops, b8, b.dtype, d.n, d.k, sb, apply_scales,
            reinterpret_cast<float*>(base + l.a_bytes));
    } else {
      widen(loops, a8, a.dtype, d.m, d.k, sa, apply_scales, reinterpret_cast<uint16_t*>(base));
      widen(loops, b8, b.dtype, d.n, d.k, sb, apply_scales,
            reinterpret_cast<uint16_t*>(base + l.a_bytes));
    }
  };
  // A stored [K, M] or B stored [K, N] (trans_a, trans_b false): only the block micro-kernel
  // takes them as they are (it transposes A's tiles as it widens them; its panels are pairs of
  // B's rows); the other ways decline them, and fp8_gemm makes them K-major first, so that
  // every way gives the K-major call's bits.
  const bool kmajor = !o.trans_a && o.trans_b;
  if (kind == Fp8FusedKind::folded) {
    if (!kmajor) return false;
    if (mx_on_amx(sa, sb, d, loops) &&
        o.workspace.nbytes() >= bf16_amx_gemm_workspace_bytes(d.m, d.n, d.k)) {
      run_mx_on_amx(a8, a.dtype, sa, b8, b.dtype, sb, d, loops, c, o.alpha, o.beta,
                    o.workspace.data);
      return true;
    }
    // Every scale folds exactly into the bf16 (or f32) operands: C = alpha A' B'ᵀ + beta C.
    widen_both(true);
    auto* staging = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes);
    run_matmul({base, base + l.a_bytes, c.data, wide, c.dtype, d.m, d.n, d.k, false, true, o.alpha,
                o.beta, l.staging_bytes > 0 ? staging : nullptr});
    return true;
  }
  if (kind == Fp8FusedKind::scaled_f32) {
    // Scales per K slice that are not powers of two: on AVX512_BF16 the block micro-kernel,
    // else f32 operands and one f32 GEMM.
    const int64_t slice = block_slice(d, o);
    if (slice != 0 && fp8_block_gemm_available()) {
      run_block_gemm(a, b, c, o, d, sa, sb, slice);
      return true;
    }
    if (!kmajor) return false;
    auto* a32 = reinterpret_cast<float*>(base);
    auto* b32 = reinterpret_cast<float*>(base + l.a_bytes);
    widen(loops, a8, a.dtype, d.m, d.k, sa, true, a32);
    widen(loops, b8, b.dtype, d.n, d.k, sb, true, b32);
    if (c.dtype == DType::f32) {
      run_matmul(
          {a32, b32, c.data, DType::f32, DType::f32, d.m, d.n, d.k, false, true, o.alpha, o.beta});
      return true;
    }
    // oneDNN's own engine gives only an f32 C from f32 operands: a bf16 C takes alpha A' B'ᵀ in
    // f32, then the epilogue with unit scales (exact multiplications) adds beta C and rounds
    // once to bf16.
    auto* acc = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes);
    auto* ones =
        reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes + l.out_bytes() + l.rows_bytes);
    run_matmul({a32, b32, acc, DType::f32, DType::f32, d.m, d.n, d.k, false, true, o.alpha, 0.0f});
    std::fill_n(ones, d.n, 1.0f);
    epilogue(loops, acc, nullptr, ones, 1.0f, o.beta, c, d);
    return true;
  }
  const bool per_tensor = sa.grid_rows == 1 && sb.grid_rows == 1;
  const int64_t rows = row_slice(d, o);
  // The workspace has room for it where fp8_gemm_fused_workspace_bytes saw AVX512_BF16
  // (hardware_has_avx512_bf16, false in clang < 16 builds, where the kernel may still run):
  // checked, so that a short one takes the epilogue way instead.
  if (!per_tensor && rows != 0 && fp8_block_gemm_available() &&
      o.workspace.nbytes() >= block_workspace_bytes(d, rows, false)) {
    run_block_gemm(a, b, c, o, d, sa, sb, rows);
    return true;
  }
  if (!kmajor) return false;
  widen_both(false);
  if (per_tensor) {
    // One scale each: one GEMM of the codes with one factor, rounded once, as the reference path
    // gives the engine, as its alpha (oneDNN applies it as it stores C: no pass of its own).
    auto* staging = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes);
    run_matmul({base, base + l.a_bytes, c.data, wide, c.dtype, d.m, d.n, d.k, false, true,
                o.alpha * (sa.flat(0) * sb.flat(0)), o.beta,
                l.staging_bytes > 0 ? staging : nullptr});
    return true;
  }
  // Scales per row (or per block of rows): one bf16 (or f32) GEMM of the codes, then the scales.
  auto* acc = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes);
  auto* row_scale = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes + l.out_bytes());
  auto* col_scale =
      reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes + l.out_bytes() + l.rows_bytes);
  run_matmul(
      {base, base + l.a_bytes, acc, wide, DType::f32, d.m, d.n, d.k, false, true, 1.0f, 0.0f});
  // Per-row scales are stored one per row: read them directly (at() divides per row).
  auto per_row = [](const OperandScales& x) -> const float* {
    const bool flat = x.block_rows == 1 && x.grid_cols == 1 && !x.e8m0 && x.data != nullptr;
    return flat ? static_cast<const float*>(x.data) : nullptr;
  };
  const float* sa_rows = per_row(sa);
  const float* sb_rows = per_row(sb);
  for (int64_t i = 0; i < d.m; ++i)
    row_scale[i] = o.alpha * (sa_rows != nullptr ? sa_rows[i] : sa.at(i, 0));  // 1 rounding
  for (int64_t j = 0; j < d.n; ++j) col_scale[j] = sb_rows != nullptr ? sb_rows[j] : sb.at(j, 0);
  epilogue(loops, acc, row_scale, col_scale, 1.0f, o.beta, c, d);
  return true;
}

}  // namespace octet::kernels::cpu
