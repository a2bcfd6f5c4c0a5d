// kernels/cpu/byte_transpose_avx2.h: a byte tile of up to 64 x 64 transposed with AVX2 unpacks,
// the avx2 path of every byte transpose on the CPU (kernels/cpu/transpose_cpu.cpp, the transposed
// FP8 copies of kernels/cpu/quantize_cpu.cpp): byte_transpose_avx512.h's 16 x 16 unpack rounds
// on 256-bit registers (two 128-bit lanes each) where byte_transpose.h's 8 x 8 blocks take about
// four times the instructions per byte.
// Only included on x86-64 GCC/clang; the functions carry their own target. defines:
// cpu::avx2::transpose_tile64, cpu::avx2::transpose64_into
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx2 {

#define OCTET_AVX2_TARGET __attribute__((target("avx2,fma,f16c,bmi2")))
#define OCTET_AVX2_INLINE [[gnu::always_inline]] inline OCTET_AVX2_TARGET

// One round of the 16 x 16 transpose in each 128-bit lane: v[2i] and v[2i + 1] interleaved at
// kBits, the low halves to v[i], the high halves to v[8 + i].
template <int kBits>
OCTET_AVX2_INLINE void unpack_round(__m256i* v) {
  __m256i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const __m256i a = v[2 * i], b = v[2 * i + 1];
    if constexpr (kBits == 8) {
      t[i] = _mm256_unpacklo_epi8(a, b);
      t[8 + i] = _mm256_unpackhi_epi8(a, b);
    } else if constexpr (kBits == 16) {
      t[i] = _mm256_unpacklo_epi16(a, b);
      t[8 + i] = _mm256_unpackhi_epi16(a, b);
    } else if constexpr (kBits == 32) {
      t[i] = _mm256_unpacklo_epi32(a, b);
      t[8 + i] = _mm256_unpackhi_epi32(a, b);
    } else {
      t[i] = _mm256_unpacklo_epi64(a, b);
      t[8 + i] = _mm256_unpackhi_epi64(a, b);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = t[i];
}

// A full 64 x 64 tile (src readable as 64 rows of 64 bytes) into `tile`, its transpose with a
// row stride of 64. Sixteen rows of 32 bytes at a time (lanes: columns half + 0-15, half + 16-31)
// go through four unpack rounds that transpose each lane's 16 x 16 block; register k then holds,
// in lane L, 16 bytes of row half + 16 L + bitreverse4(k) of the transpose (as in
// byte_transpose_avx512.h). A real call from the quantize loops, once per tile.
inline OCTET_AVX2_TARGET void transpose64_into(const uint8_t* __restrict src, int64_t src_ld,
                                               uint8_t* __restrict tile) {
  constexpr int kBitReverse4[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
  for (int64_t half = 0; half < 64; half += 32) {
    for (int64_t r0 = 0; r0 < 64; r0 += 16) {
      __m256i v[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        v[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (r0 + k) * src_ld + half));
      }
      unpack_round<8>(v);
      unpack_round<16>(v);
      unpack_round<32>(v);
      unpack_round<64>(v);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        uint8_t* out = tile + (half + kBitReverse4[k]) * 64 + r0;
        _mm_store_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(v[k]));
        _mm_store_si128(reinterpret_cast<__m128i*>(out + 16 * 64),
                        _mm256_extracti128_si256(v[k], 1));
      }
    }
  }
}

// dst[c * dst_ld + r] = src[r * src_ld + c] for r < h, c < w (1 <= h, w <= 64). The transpose
// goes through an L1 buffer and dst gets whole rows from it (as byte_transpose_avx512.h: 16-byte
// stores straight to 64 rows of dst evict one another's lines); a partial tile is first copied
// into a zeroed one. Reads only the h x w bytes of src, writes only the w x h bytes of dst.
inline OCTET_AVX2_TARGET void transpose_tile64(const uint8_t* __restrict src, int64_t src_ld,
                                               int64_t h, int64_t w, uint8_t* __restrict dst,
                                               int64_t dst_ld) {
  alignas(64) uint8_t tile[64 * 64];
  if (h == 64 && w == 64) {
    transpose64_into(src, src_ld, tile);
#pragma GCC unroll 8
    for (int64_t c = 0; c < 64; ++c) {
      const auto* in = reinterpret_cast<const __m256i*>(tile + c * 64);
      auto* out = reinterpret_cast<__m256i*>(dst + c * dst_ld);
      _mm256_storeu_si256(out, _mm256_load_si256(in));
      _mm256_storeu_si256(out + 1, _mm256_load_si256(in + 1));
    }
    return;
  }
  alignas(64) uint8_t full[64 * 64] = {};
  for (int64_t r = 0; r < h; ++r) std::memcpy(full + r * 64, src + r * src_ld, w);
  transpose64_into(full, 64, tile);
  for (int64_t c = 0; c < w; ++c) std::memcpy(dst + c * dst_ld, tile + c * 64, h);
}

#undef OCTET_AVX2_INLINE
#undef OCTET_AVX2_TARGET

}  // namespace octet::kernels::cpu::avx2
