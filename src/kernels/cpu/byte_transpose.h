// kernels/cpu/byte_transpose.h: an 8 x 8 block of bytes transposed in registers, the step of
// every byte transpose on the CPU (kernels/cpu/transpose_cpu.cpp, the transposed FP8 copies of
// kernels/cpu/quantize_cpu.cpp).
// defines: transpose8x8
#pragma once

#include <cstdint>
#include <cstring>

namespace octet::kernels::cpu {

// dst[c * dst_ld + r] = src[r * src_ld + c] for r, c < 8: eight 64-bit rows, transposed by
// three rounds of swapping 4x4, 2x2 and 1x1 sub-blocks with shifts and masks.
[[gnu::always_inline]] inline void transpose8x8(const uint8_t* __restrict src, int64_t src_ld,
                                                uint8_t* __restrict dst, int64_t dst_ld) {
  uint64_t a[8];
  for (int k = 0; k < 8; ++k) std::memcpy(&a[k], src + k * src_ld, 8);
  for (int i = 0; i < 4; ++i) {
    const uint64_t t = ((a[i] >> 32) ^ a[i + 4]) & 0x00000000FFFFFFFFull;
    a[i] ^= t << 32;
    a[i + 4] ^= t;
  }
  for (int i : {0, 1, 4, 5}) {
    const uint64_t t = ((a[i] >> 16) ^ a[i + 2]) & 0x0000FFFF0000FFFFull;
    a[i] ^= t << 16;
    a[i + 2] ^= t;
  }
  for (int i : {0, 2, 4, 6}) {
    const uint64_t t = ((a[i] >> 8) ^ a[i + 1]) & 0x00FF00FF00FF00FFull;
    a[i] ^= t << 8;
    a[i + 1] ^= t;
  }
  for (int k = 0; k < 8; ++k) std::memcpy(dst + k * dst_ld, &a[k], 8);
}

}  // namespace octet::kernels::cpu
