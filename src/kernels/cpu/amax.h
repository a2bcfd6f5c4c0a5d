// kernels/cpu/amax.h: max |x| as the bits of the f32 |x| (a bf16's in the upper half). As
// unsigned integers NaN > Inf > every finite value, so an integer max makes NaN win for free,
// as the FP8 quantize's amax wants. Plain loops, inlined into each caller's instruction-set
// variant and vectorised there: bf16 runs in 16-bit lanes (twice the values a vector, no
// widening), shifted once at the end.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/convert.h"

namespace octet::kernels::cpu {

[[gnu::always_inline]] inline uint32_t magnitude_bits(float v) {
  return f32_bits(v) & 0x7FFFFFFFu;
}
[[gnu::always_inline]] inline uint32_t magnitude_bits(uint16_t v) {
  return static_cast<uint32_t>(v & 0x7FFFu) << 16;
}

// max over x[0, n).
[[gnu::always_inline]] inline uint32_t max_magnitude_bits(const float* __restrict x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, magnitude_bits(x[i]));
  return m;
}
[[gnu::always_inline]] inline uint32_t max_magnitude_bits(const uint16_t* __restrict x, int64_t n) {
  uint16_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max<uint16_t>(m, x[i] & 0x7FFFu);
  return static_cast<uint32_t>(m) << 16;
}

// col_max[c] = max(col_max[c], max over rows r of |x[r * ld + c]|) for c in [0, w), w <= kW:
// the maxima of columns, read along the rows. bf16 keeps kW 16-bit maxima (two zmm for 64).
template <int64_t kW>
[[gnu::always_inline]] inline void max_column_magnitude_bits(const float* __restrict x, int64_t ld,
                                                             int64_t rows, int64_t w,
                                                             uint32_t* __restrict col_max) {
  alignas(64) uint32_t m[kW] = {};
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * ld;
    for (int64_t c = 0; c < w; ++c) m[c] = std::max(m[c], magnitude_bits(row[c]));
  }
  for (int64_t c = 0; c < w; ++c) col_max[c] = std::max(col_max[c], m[c]);
}
template <int64_t kW>
[[gnu::always_inline]] inline void max_column_magnitude_bits(const uint16_t* __restrict x,
                                                             int64_t ld, int64_t rows, int64_t w,
                                                             uint32_t* __restrict col_max) {
  alignas(64) uint16_t m[kW] = {};
  if (w == kW) {  // whole tiles: a trip count the compiler knows, so the maxima stay in registers
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* __restrict row = x + r * ld;
      for (int64_t c = 0; c < kW; ++c) m[c] = std::max<uint16_t>(m[c], row[c] & 0x7FFFu);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* __restrict row = x + r * ld;
      for (int64_t c = 0; c < w; ++c) m[c] = std::max<uint16_t>(m[c], row[c] & 0x7FFFu);
    }
  }
  for (int64_t c = 0; c < w; ++c)
    col_max[c] = std::max(col_max[c], static_cast<uint32_t>(m[c]) << 16);
}

}  // namespace octet::kernels::cpu
