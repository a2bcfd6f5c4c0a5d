// kernels/cpu/fp8_encode_vec.h: the constants of the vector FP8 encoders
// (fp8_encode_avx512.h, fp8_encode_avx2.h), derived from core/convert.h's formats.
// defines: cpu::Fp8Vec
#pragma once

#include <cstdint>

#include "core/convert.h"

namespace octet::kernels::cpu {

// The format's constants for the vector encoders (derived from detail::Fp8Layout).
template <bool kE4M3>
struct Fp8Vec {
  static constexpr detail::Fp8Layout f = kE4M3 ? detail::e4m3_layout() : detail::e5m2_layout();
  static constexpr uint32_t shift = 23 - f.mantissa_bits;
  // mag + kBias (+1 when the kept lsb is odd), >> shift: round to nearest even and
  // rebias in one add; wraps (is garbage) only below the smallest normal, where the
  // subnormal result is taken instead.
  static constexpr uint32_t bias = ((1u << (shift - 1)) - 1) - (f.rebias << shift);
  // The same for a bf16 in a 16-bit lane (f32's upper half: 7 mantissa bits). For a value
  // exact in bf16 (f32's low 16 bits zero) it rounds as the f32 constants do: the low half
  // adds (half - 1)'s low 16 bits, 0xFFFF, plus the odd bit, and carries exactly when the f32
  // add does.
  static constexpr uint32_t shift16 = 7 - f.mantissa_bits;
  static constexpr uint16_t bias16 =
      static_cast<uint16_t>(((1u << (shift16 - 1)) - 1) - (f.rebias << shift16));
  static constexpr uint16_t min_normal16 = static_cast<uint16_t>(f.min_normal_bits >> 16);
};

}  // namespace octet::kernels::cpu
