// kernels/cpu/quantize_loops.h: the element helpers, inner loops and flag dispatch shared by
// the CPU quantize kernels (kernels/cpu/quantize_cpu.cpp, kernels/cpu/quantize_fused_cpu.cpp);
// included only by them, after their no-trapping-math pragma, so that each instruction-set
// variant inlines its own copy.
// defines: Job, Stats, load, mag_bits, encode, e8m0_reciprocal, amax_value, block_scale,
//          amax_loop, encode_loop, transpose_tile, dispatch
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/convert.h"
#include "kernels/cpu/byte_transpose.h"
#include "kernels/quantize.h"

namespace octet::kernels::cpu {
namespace {
constexpr uint32_t kInfBits = 0x7F800000u;
constexpr uint32_t kQuietNanBits = 0x7FC00000u;
// Tiles of the transposed copies: kTile x kTile (16 KiB of f32, L1-resident).
constexpr int64_t kTile = 64;

// What the inner loops need to know, fixed for one quantize call.
struct Job {
  bool bf16;      // input bf16, else f32
  bool e4m3;      // output E4M3, else E5M2
  bool saturate;  // Overflow::saturate
  bool count;     // count saturated and flushed values
  bool e8m0;      // MX: E8M0 scale_inv codes, else f32 scale_inv
  bool pow2;      // power_of_two_scales
  float fp8_max;
};

// Per-call reductions. The amax is kept as the bits of |x|: as unsigned integers
// NaN > Inf > every finite value, so an integer max makes NaN win for free.
struct Stats {
  uint32_t amax_bits = 0;
  uint64_t saturated = 0, flushed = 0;
};

// ---- element helpers (inlined into each instruction-set variant) -------------

[[gnu::always_inline]] inline float load(float v) {
  return v;
}
[[gnu::always_inline]] inline float load(uint16_t v) {
  return bf16_to_f32(v);
}
[[gnu::always_inline]] inline uint32_t mag_bits(float v) {
  return f32_bits(v) & 0x7FFFFFFFu;
}
[[gnu::always_inline]] inline uint32_t mag_bits(uint16_t v) {
  return static_cast<uint32_t>(v & 0x7FFFu) << 16;
}

// The overflow mode stays a run-time flag: it only picks a loop-invariant code.
template <bool kE4M3>
[[gnu::always_inline]] inline uint8_t encode(float v, bool saturate) {
  const Overflow overflow = saturate ? Overflow::saturate : Overflow::nonfinite;
  return kE4M3 ? f32_to_e4m3(v, overflow) : f32_to_e5m2(v, overflow);
}

// The multiplier for an E8M0 scale_inv 2^(e-127): exactly 2^(127-e), built from
// the exponent bits (2^-127, for e = 254, is an f32 subnormal).
[[gnu::always_inline]] inline float e8m0_reciprocal(uint8_t e) {
  const int k = 127 - static_cast<int>(e);
  return k >= -126 ? f32_from_bits(static_cast<uint32_t>(k + 127) << 23) : 0x1p-127f;
}

// A NaN amax is kept as one quiet NaN so that it survives a trip through float memory.
[[gnu::always_inline]] inline float amax_value(uint32_t bits) {
  return f32_from_bits(bits > kInfBits ? kQuietNanBits : bits);
}

// The multiplier of one block; stores its scale_inv (f32 1/scale, or the E8M0 code).
[[gnu::always_inline]] inline float block_scale(const Job& j, uint32_t amax_bits, void* scale_inv,
                                                int64_t index) {
  if (j.e8m0) {
    const uint8_t e = e8m0_scale_inv_from_amax(amax_value(amax_bits), j.fp8_max);
    static_cast<uint8_t*>(scale_inv)[index] = e;
    return e8m0_reciprocal(e);
  }
  const float scale = scale_from_amax(amax_value(amax_bits), j.fp8_max, 0, j.pow2);
  static_cast<float*>(scale_inv)[index] = 1.0f / scale;
  return scale;
}

// ---- the loops ---------------------------------------------------------------

template <class In>
[[gnu::always_inline]] inline uint32_t amax_loop(const In* __restrict x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, mag_bits(x[i]));
  return m;
}

// out = encode(x * scale); with kCount, also the values that overflowed the format
// (|x * scale| past the rounding boundary of ±max, x finite: the unsaturated
// conversion would give Inf/NaN) and the nonzero finite values that became ±0.
// The multiplier: one per call, or one per element (runs of narrow blocks).
[[gnu::always_inline]] inline float scale_at(float scale, int64_t) {
  return scale;
}
[[gnu::always_inline]] inline float scale_at(const float* __restrict scale, int64_t i) {
  return scale[i];
}

template <class In, bool kE4M3, bool kCount, class Scale>
[[gnu::always_inline]] inline void encode_loop(const In* __restrict x, uint8_t* __restrict out,
                                               int64_t n, Scale scale, bool saturate, Stats& st) {
  if constexpr (!kCount) {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = encode<kE4M3>(load(x[i]) * scale_at(scale, i), saturate);
    }
  } else {
    // E4M3: 464 (halfway to 480) rounds to even, i.e. down to 448; E5M2: 61440
    // (halfway from 57344 to 65536) rounds to even, i.e. up to Inf.
    constexpr uint32_t overflow_bits = kE4M3 ? f32_bits(464.0f) + 1 : f32_bits(61440.0f);
    constexpr int64_t kChunk = int64_t{1} << 20;  // keeps the 32-bit vector counters exact
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t end = std::min(n, begin + kChunk);
      uint32_t saturated = 0, flushed = 0;
      for (int64_t i = begin; i < end; ++i) {
        const float v = load(x[i]) * scale_at(scale, i);
        const uint8_t code = encode<kE4M3>(v, saturate);
        out[i] = code;
        const uint32_t xm = mag_bits(x[i]);
        saturated += (xm < kInfBits) & ((f32_bits(v) & 0x7FFFFFFFu) >= overflow_bits);
        flushed += (xm - 1u < kInfBits - 1u) & ((code & 0x7Fu) == 0);
      }
      st.saturated += saturated;
      st.flushed += flushed;
    }
  }
}

// dst = srcᵀ for a kTile x kTile byte tile, in 8 x 8 blocks (kernels/cpu/byte_transpose.h).
[[gnu::always_inline]] inline void transpose_tile(const uint8_t* __restrict src,
                                                  uint8_t* __restrict dst) {
  for (int64_t rb = 0; rb < kTile; rb += 8) {
    for (int64_t cb = 0; cb < kTile; cb += 8) {
      transpose8x8(src + rb * kTile + cb, kTile, dst + cb * kTile + rb, kTile);
    }
  }
}

// Picks K::run<In, kE4M3, kCount> from the job, one branch per flag; everything
// is inlined into the instruction-set variant that calls it.
template <class K, class In, bool kE4M3, class... Args>
[[gnu::always_inline]] inline auto dispatch_count(const Job& j, Args... args) {
  if constexpr (K::kCount) {
    if (j.count) return K::template run<In, kE4M3, true>(j, args...);
  }
  return K::template run<In, kE4M3, false>(j, args...);
}
template <class K, class In, class... Args>
[[gnu::always_inline]] inline auto dispatch_format(const Job& j, Args... args) {
  if constexpr (K::kFormat) {
    if (j.e4m3) return dispatch_count<K, In, true>(j, args...);
    return dispatch_count<K, In, false>(j, args...);
  } else {
    return K::template run<In, false, false>(j, args...);
  }
}
template <class K, class... Args>
[[gnu::always_inline]] inline auto dispatch(const Job& j, Args... args) {
  if (j.bf16) return dispatch_format<K, uint16_t>(j, args...);
  return dispatch_format<K, float>(j, args...);
}

}  // namespace
}  // namespace octet::kernels::cpu
