// kernels/cpu/byte_transpose_avx512.h: a byte tile of up to 64 x 64 transposed with AVX-512BW
// unpacks (and a 16-bit word tile of up to 32 x 32: MX's transposed copies, the AMX attention's
// q and dout), the avx512 path of every byte transpose on the CPU (kernels/cpu/transpose_cpu.cpp,
// the transposed FP8 copies of kernels/cpu/quantize_cpu.cpp); byte_transpose_avx2.h is the AVX2
// path, byte_transpose.h's 8 x 8 blocks the baseline's. Only included on x86-64 GCC/clang; the
// functions carry their own target.
// defines: cpu::avx512::transpose_tile64, cpu::avx512::transpose32_words
#pragma once

#include <cstdint>

#include "kernels/cpu/intrinsics.h"

namespace octet::kernels::cpu::avx512 {

#define OCTET_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define OCTET_AVX512_INLINE [[gnu::always_inline]] inline OCTET_AVX512_TARGET

// One round of the 16 x 16 transpose in each 128-bit lane: v[i] and v[i + 1] interleaved
// at kBits, the low halves to t[i / 2], the high halves to t[8 + i / 2].
template <int kBits>
OCTET_AVX512_INLINE void unpack_round(__m512i* v) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const __m512i a = v[2 * i], b = v[2 * i + 1];
    if constexpr (kBits == 8) {
      t[i] = _mm512_unpacklo_epi8(a, b);
      t[8 + i] = _mm512_unpackhi_epi8(a, b);
    } else if constexpr (kBits == 16) {
      t[i] = _mm512_unpacklo_epi16(a, b);
      t[8 + i] = _mm512_unpackhi_epi16(a, b);
    } else if constexpr (kBits == 32) {
      t[i] = _mm512_unpacklo_epi32(a, b);
      t[8 + i] = _mm512_unpackhi_epi32(a, b);
    } else {
      t[i] = _mm512_unpacklo_epi64(a, b);
      t[8 + i] = _mm512_unpackhi_epi64(a, b);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = t[i];
}

// dst[c * dst_ld + r] = src[r * src_ld + c] for r < h, c < w (1 <= h, w <= 64; kFull: both
// 64). Sixteen rows of src at a time, one zmm each (its four 128-bit lanes: columns 0-15,
// ..., 48-63), go through four unpack rounds (bytes, words, dwords, qwords) that transpose
// each lane's 16 x 16 block; register k then holds, in lane L, 16 bytes of dst row
// 16 L + bitreverse4(k) (the rounds pair registers 2i, 2i + 1 and put the halves at i and
// 8 + i, which reverses the index bits). The pieces go to an L1 buffer and dst gets whole
// 64-byte rows from it: 16-byte stores straight to 64 rows of dst (a power-of-two stride,
// often) evict one another's lines between the four passes and were slower than the 8 x 8
// path. Reads only the h x w bytes of src, writes only the w x h bytes of dst.
template <bool kFull>
inline OCTET_AVX512_TARGET void transpose_tile64_impl(const uint8_t* __restrict src, int64_t src_ld,
                                                      int64_t h, int64_t w, uint8_t* __restrict dst,
                                                      int64_t dst_ld) {
  constexpr int kBitReverse4[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
  alignas(64) uint8_t tile[64 * 64];
  const __mmask64 wmask = w >= 64 ? ~__mmask64{0} : (__mmask64{1} << w) - 1;
  for (int64_t r0 = 0; r0 < h; r0 += 16) {
    const int64_t n = kFull ? 16 : (h - r0 < 16 ? h - r0 : 16);
    __m512i v[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      if constexpr (kFull) {
        v[k] = _mm512_loadu_si512(src + (r0 + k) * src_ld);
      } else {
        v[k] = k < n ? _mm512_maskz_loadu_epi8(wmask, src + (r0 + k) * src_ld)
                     : _mm512_setzero_si512();
      }
    }
    unpack_round<8>(v);
    unpack_round<16>(v);
    unpack_round<32>(v);
    unpack_round<64>(v);
    uint8_t* out = tile + r0;
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      const int64_t c = kBitReverse4[k];
      auto* p = reinterpret_cast<__m128i*>(out + c * 64);
      _mm_store_si128(p, _mm512_castsi512_si128(v[k]));
      _mm_store_si128(p + 16 * 64 / 16, _mm512_extracti32x4_epi32(v[k], 1));
      _mm_store_si128(p + 32 * 64 / 16, _mm512_extracti32x4_epi32(v[k], 2));
      _mm_store_si128(p + 48 * 64 / 16, _mm512_extracti32x4_epi32(v[k], 3));
    }
  }
  if constexpr (kFull) {
#pragma GCC unroll 8
    for (int64_t c = 0; c < 64; ++c) {
      _mm512_storeu_si512(dst + c * dst_ld, _mm512_load_si512(tile + c * 64));
    }
  } else {
    const __mmask64 hmask = h >= 64 ? ~__mmask64{0} : (__mmask64{1} << h) - 1;
    for (int64_t c = 0; c < w; ++c) {
      _mm512_mask_storeu_epi8(dst + c * dst_ld, hmask, _mm512_load_si512(tile + c * 64));
    }
  }
}

// The entry: full tiles without masks.
inline OCTET_AVX512_TARGET void transpose_tile64(const uint8_t* __restrict src, int64_t src_ld,
                                                 int64_t h, int64_t w, uint8_t* __restrict dst,
                                                 int64_t dst_ld) {
  if (h == 64 && w == 64) return transpose_tile64_impl<true>(src, src_ld, 64, 64, dst, dst_ld);
  transpose_tile64_impl<false>(src, src_ld, h, w, dst, dst_ld);
}

// out[c * ldo + r] = in[r * ld + c] for a block of `rows` x `cols` 16-bit words (both <= 32):
// rows past `rows` read as zero (so out's 32 words of each written row are defined), rows of
// out past `cols` not written. Unpacks by 16, 32 and 64 bits leave, in each 128-bit lane L of
// c[8k + m], rows 8k .. 8k + 7 of column 8L + m; two lane shuffles gather the four lanes of
// a column.
inline OCTET_AVX512_TARGET void transpose32_words(const uint16_t* in, int64_t ld, int64_t rows,
                                                  int64_t cols, uint16_t* out, int64_t ldo) {
  const __mmask32 live = cols >= 32 ? ~__mmask32{0} : (__mmask32{1} << cols) - 1;
  __m512i a[32], b[32];
#pragma GCC unroll 32
  for (int r = 0; r < 32; ++r)
    a[r] = r < rows ? _mm512_maskz_loadu_epi16(live, in + r * ld) : _mm512_setzero_si512();
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) {
    b[2 * k] = _mm512_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
    b[2 * k + 1] = _mm512_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {  // a[4k + j]: columns 8L + 2j, 8L + 2j + 1 of rows 4k .. 4k + 3
    a[4 * k] = _mm512_unpacklo_epi32(b[4 * k], b[4 * k + 2]);
    a[4 * k + 1] = _mm512_unpackhi_epi32(b[4 * k], b[4 * k + 2]);
    a[4 * k + 2] = _mm512_unpacklo_epi32(b[4 * k + 1], b[4 * k + 3]);
    a[4 * k + 3] = _mm512_unpackhi_epi32(b[4 * k + 1], b[4 * k + 3]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {  // b[8k + m]: column 8L + m of rows 8k .. 8k + 7
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      b[8 * k + 2 * j] = _mm512_unpacklo_epi64(a[8 * k + j], a[8 * k + 4 + j]);
      b[8 * k + 2 * j + 1] = _mm512_unpackhi_epi64(a[8 * k + j], a[8 * k + 4 + j]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    const __m512i u0 = _mm512_shuffle_i32x4(b[m], b[8 + m], 0x44);
    const __m512i u1 = _mm512_shuffle_i32x4(b[m], b[8 + m], 0xEE);
    const __m512i u2 = _mm512_shuffle_i32x4(b[16 + m], b[24 + m], 0x44);
    const __m512i u3 = _mm512_shuffle_i32x4(b[16 + m], b[24 + m], 0xEE);
    const __m512i column[4] = {
        _mm512_shuffle_i32x4(u0, u2, 0x88), _mm512_shuffle_i32x4(u0, u2, 0xDD),
        _mm512_shuffle_i32x4(u1, u3, 0x88), _mm512_shuffle_i32x4(u1, u3, 0xDD)};
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) {
      if (8 * l + m < cols) _mm512_storeu_si512(out + (8 * l + m) * ldo, column[l]);
    }
  }
}

#undef OCTET_AVX512_INLINE
#undef OCTET_AVX512_TARGET

}  // namespace octet::kernels::cpu::avx512
