// kernels/cpu/gemm_fp8_block_cpu.cpp: FP8 GEMMs whose f32 scales split K (the block
// recipe's 1x128 tiles and 128x128 blocks) on AVX512_BF16 or AMX, without widening code x
// scale to f32: the codes (exact in bf16) go through vdpbf16ps (or AMX's tdpbf16ps) into a
// per-slice fp32 tile, and at the end of each K slice that tile is added, times
// sa[i,s] * sb[j,s], into the fp32 accumulators (DeepSeek-V3's "promotion"). AMX runs where
// the CPU has it (usable_amx) and the slice is a multiple of 32 (one tile's K): its 16 x 16
// products come 2 x 2 per step from 32-row A tiles and 32-column B panels, stored to L1 at
// the end of each slice and promoted there with AVX-512. gemm_fp8_fused_cpu.cpp calls it
// where the CPU has AVX512_BF16 and OCTET_CPU_ISA allows AVX-512; its one-f32-GEMM way stays
// the fallback. Where f32 FMAs outrun vdpbf16ps (Fp8BlockGemm::f32) the AVX-512 kernel reads
// f32 copies of its bf16 operands and makes vdpbf16ps's sums with two FMAs a K pair: the same
// bits. The result does not depend on the thread count: each element of C is summed
// by one thread in one order.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include <omp.h>

#include "core/convert.h"
#include "core/error.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/bf16_round_avx512.h"
#include "kernels/cpu/byte_transpose_avx512.h"
#include "kernels/cpu/fp8_widen_avx512.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

constexpr int64_t kNr = 32;  // columns of C per panel: two zmm of fp32
// Rows of C per tile: 16 slice accumulators in registers (enough independent vdpbf16ps
// chains for two pipes), the 16 main ones in L1 (touched once per slice). Measured on Zen 5:
// 8 rows beat 6 (all 24 in registers) and 12.
constexpr int64_t kMr = 8;
// AMX: rows of C per tile (two 16-row tiles of A against the panel's two 16-column tiles of
// B: four of the eight tile registers accumulate) and K per step (one tile row: 64 bytes).
constexpr int64_t kAmxRows = 32;
constexpr int64_t kAmxK = 32;
// Rows of A a task of the AVX-512 kernel widens and runs every panel against (block_tasks): one
// 64 x 64 tile of A stored [k, m] wide (widen_a_tile).
constexpr int64_t kBlockRows = 64;
int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

// The workspace: [A bf16, Mp x Kp][B bf16, Np x Kp][B panels, Np x Kp bf16 in K pairs]
// [column scales, Np / 32 panels x S slices x 32][row scales, Mp x S]; where the kernel
// multiplies as f32 (Fp8BlockGemm::f32) also [A f32, Mp x Kp][B panels f32, Np / 32 x Kp x 32].
struct BlockLayout {
  int64_t mp, np, kp, slices;
  int64_t lda;  // A's row stride (bf16 values): kp, or more where kp's would alias in L1
  size_t a_bytes, b_bytes, panel_bytes, scale_bytes, row_scale_bytes;
  size_t a32_bytes = 0, panel32_bytes = 0;  // 0 unless f32
  size_t total() const {
    return kAlign + a_bytes + b_bytes + panel_bytes + scale_bytes + row_scale_bytes + a32_bytes +
           panel32_bytes;
  }
};

// AMX pads M to its 32-row tiles and K to whole tile steps (zeros: they add nothing).
BlockLayout block_layout(int64_t m, int64_t n, int64_t k, int64_t slice, bool amx,
                         bool f32 = false) {
  BlockLayout l{};
  l.mp = round_up(std::max<int64_t>(m, 1), amx ? kAmxRows : kMr);
  l.np = round_up(std::max<int64_t>(n, 1), kNr);
  l.kp = round_up(std::max<int64_t>(k, 1), amx ? kAmxK : 2);
  l.slices = (k + slice - 1) / slice;
  // AMX reads a tile's 16 rows of A at A's row stride: where that is a multiple of 1 KiB (K of
  // 512, 1024, 2048: the weight gradients' K is the tokens) the 32 rows of a task fall into 4, 2
  // or 1 of L1's 64 sets, 8, 16 or 32 lines a set beside the panel's where L1 has 12 ways, and
  // the tile loads miss. One more cache line per row spreads them over the sets.
  l.lda = amx && l.kp * 2 % 1024 == 0 ? l.kp + 32 : l.kp;
  l.a_bytes = align_up(static_cast<size_t>(l.mp * l.lda) * 2);
  l.b_bytes = align_up(static_cast<size_t>(l.np * l.kp) * 2);
  l.panel_bytes = l.b_bytes;
  l.scale_bytes = align_up(static_cast<size_t>(l.np * l.slices) * 4);
  l.row_scale_bytes = align_up(static_cast<size_t>(l.mp * l.slices) * 4);
  if (f32 && !amx) {
    l.a32_bytes = align_up(static_cast<size_t>(l.mp * l.lda) * 4);
    l.panel32_bytes = align_up(static_cast<size_t>(l.np * l.kp) * 4);
  }
  return l;
}

// Where a layout's parts lie in a workspace (its start aligned up to kAlign).
struct BlockBuffers {
  uint16_t *a16, *b16;
  uint32_t* panels;
  float *col_scales, *row_scales;
  float *a32, *panels32;  // f32 layouts only
};
BlockBuffers block_buffers(const BlockLayout& l, void* workspace) {
  char* base = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(workspace)));
  BlockBuffers b{};
  b.a16 = reinterpret_cast<uint16_t*>(base);
  b.b16 = reinterpret_cast<uint16_t*>(base + l.a_bytes);
  b.panels = reinterpret_cast<uint32_t*>(base + l.a_bytes + l.b_bytes);
  b.col_scales = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes + l.panel_bytes);
  b.row_scales = b.col_scales + l.scale_bytes / 4;
  b.a32 = b.row_scales + l.row_scale_bytes / 4;
  b.panels32 = b.a32 + l.a32_bytes / 4;
  return b;
}

// bf16_amx_gemm's layout: one K slice, K rounded up to AMX's steps (with unit scales part *
// (1 * 1) is part, so C = alpha acc + beta C as store_tile writes it).
int64_t unit_slice(int64_t k) {
  return round_up(std::max<int64_t>(k, 1), kAmxK);
}
// Its shapes: A the larger operand (the tiles over the panels, B's panels kept in L2).
bool a_is_larger(int64_t m, int64_t n) {
  return m > n;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define OCTET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi2")))

bool hardware_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
}

// C[0..rows, 0..cols) of one tile = alpha * acc + beta * C (beta == 0: C only written).
OCTET_AVX512_BF16 inline void store_tile(const __m512 (&acc)[kMr][2], int64_t rows, int64_t cols,
                                         float alpha, float beta, void* c, DType c_dtype,
                                         int64_t ldc) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t j0 = h * 16;
      if (j0 >= cols) break;
      const __mmask16 mask =
          cols - j0 >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (cols - j0)) - 1);
      __m512 v = _mm512_mul_ps(va, acc[r][h]);
      if (c_dtype == DType::f32) {
        float* out = static_cast<float*>(c) + r * ldc + j0;
        if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, out), v);
        _mm512_mask_storeu_ps(out, mask, v);
      } else {
        uint16_t* out = static_cast<uint16_t*>(c) + r * ldc + j0;
        if (beta != 0.0f) v = _mm512_fmadd_ps(vb, avx512::load_bf16(out, mask), v);
        _mm256_mask_storeu_epi16(out, mask, avx512::round_to_bf16(v));
      }
    }
  }
}

// One kMr x 32 tile of C over all K: `a` the tile's first row of A (row stride kp), `panel`
// its 32 columns of B, `sa` the tile's row scales [kMr][slices], `sb` the panel's column scales
// [slices][32]. A in bf16 and the panel as [kp / 2][32] bf16 pairs through vdpbf16ps; or (kF32)
// A in f32 and the panel as [kp][32] f32 through FMAs, odd K before even K in each pair: the
// sums vdpbf16ps makes, two fp32 FMAs per pair in that order (Intel's pseudo-code; the same
// bits on every case tests/kernels/test_gemm_fp8_block_cpu.cpp runs), on CPUs whose vdpbf16ps
// issues at a quarter of their FMAs' rate (f32_fma_outruns_bf16_dot): twice the products a cycle.
template <bool kF32>
OCTET_AVX512_BF16 void block_tile(const void* a, int64_t kp, const void* panel, const float* sa,
                                  const float* sb, int64_t k, int64_t slice, int64_t slices,
                                  __m512 (&main)[kMr][2]) {
  for (int64_t r = 0; r < kMr; ++r) main[r][0] = main[r][1] = _mm512_setzero_ps();
  // These empty asm statements make the compiler keep `main` in memory between slices, so
  // that the slice loop has its 16 accumulators, the 2 B vectors and the broadcast in zmm.
  asm volatile("" : : "r"(&main[0][0]) : "memory");
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t k0 = s * slice;
    const int64_t pairs = (std::min(slice, k - k0) + 1) / 2;
    __m512 acc[kMr][2];
    for (int64_t r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    if constexpr (kF32) {
      const float* b = static_cast<const float*>(panel) + k0 * kNr;
      const float* a_f = static_cast<const float*>(a) + k0;
      for (int64_t p = 0; p < pairs; ++p) {
        for (int64_t kk = 2 * p + 1; kk >= 2 * p; --kk) {
          const __m512 b0 = _mm512_loadu_ps(b + kk * kNr), b1 = _mm512_loadu_ps(b + kk * kNr + 16);
#pragma GCC unroll 16
          for (int64_t r = 0; r < kMr; ++r) {
            const __m512 x = _mm512_set1_ps(a_f[r * kp + kk]);
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
          }
        }
      }
    } else {
      const uint32_t* b = static_cast<const uint32_t*>(panel) + k0 / 2 * kNr;
      const auto* a32 = reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(a) + k0);
      const int64_t lda32 = kp / 2;
      for (int64_t p = 0; p < pairs; ++p) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kNr);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kNr + 16);
#pragma GCC unroll 16
        for (int64_t r = 0; r < kMr; ++r) {
          const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a32[r * lda32 + p]));
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
        }
      }
    }
    // Promotion: main += acc * (sa * sb), the scale product rounded once, then one fma.
    const __m512 sb0 = _mm512_loadu_ps(sb + s * kNr), sb1 = _mm512_loadu_ps(sb + s * kNr + 16);
    for (int64_t r = 0; r < kMr; ++r) {
      const __m512 row = _mm512_set1_ps(sa[r * slices + s]);
      main[r][0] = _mm512_fmadd_ps(acc[r][0], _mm512_mul_ps(row, sb0), main[r][0]);
      main[r][1] = _mm512_fmadd_ps(acc[r][1], _mm512_mul_ps(row, sb1), main[r][1]);
    }
    asm volatile("" : : "r"(&main[0][0]) : "memory");
  }
}

// out[x * ldo + a] = in[a * ld + x] for a 16 x 16 block of 32-bit words: unpacks by 32 and
// 64 bits transpose each 4 x 4 block within 128-bit lanes, two lane shuffles the 4 x 4 lanes.
OCTET_AVX512_BF16 void transpose16(const uint32_t* in, int64_t ld, uint32_t* out, int64_t ldo) {
  __m512i u[4][4];
  for (int g = 0; g < 4; ++g) {
    const __m512i r0 = _mm512_loadu_si512(in + (4 * g) * ld);
    const __m512i r1 = _mm512_loadu_si512(in + (4 * g + 1) * ld);
    const __m512i r2 = _mm512_loadu_si512(in + (4 * g + 2) * ld);
    const __m512i r3 = _mm512_loadu_si512(in + (4 * g + 3) * ld);
    const __m512i t0 = _mm512_unpacklo_epi32(r0, r1), t1 = _mm512_unpackhi_epi32(r0, r1);
    const __m512i t2 = _mm512_unpacklo_epi32(r2, r3), t3 = _mm512_unpackhi_epi32(r2, r3);
    // u[g][j], lane L: column 4L + j of rows 4g .. 4g + 3.
    u[g][0] = _mm512_unpacklo_epi64(t0, t2);
    u[g][1] = _mm512_unpackhi_epi64(t0, t2);
    u[g][2] = _mm512_unpacklo_epi64(t1, t3);
    u[g][3] = _mm512_unpackhi_epi64(t1, t3);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[0][j], u[1][j], 0x44);                // a0 a1 b0 b1
    const __m512i v1 = _mm512_shuffle_i32x4(u[0][j], u[1][j], 0xEE);                // a2 a3 b2 b3
    const __m512i v2 = _mm512_shuffle_i32x4(u[2][j], u[3][j], 0x44);                // c0 c1 d0 d1
    const __m512i v3 = _mm512_shuffle_i32x4(u[2][j], u[3][j], 0xEE);                // c2 c3 d2 d3
    _mm512_storeu_si512(out + j * ldo, _mm512_shuffle_i32x4(v0, v2, 0x88));         // lane 0
    _mm512_storeu_si512(out + (4 + j) * ldo, _mm512_shuffle_i32x4(v0, v2, 0xDD));   // lane 1
    _mm512_storeu_si512(out + (8 + j) * ldo, _mm512_shuffle_i32x4(v1, v3, 0x88));   // lane 2
    _mm512_storeu_si512(out + (12 + j) * ldo, _mm512_shuffle_i32x4(v1, v3, 0xDD));  // lane 3
  }
}

// One panel of B: out[p * 32 + c] = word p of row c of `rows` ([32][pairs] words).
OCTET_AVX512_BF16 void pack_panel(const uint32_t* rows, int64_t pairs, uint32_t* out) {
  int64_t p0 = 0;
  for (; p0 + 16 <= pairs; p0 += 16) {
    transpose16(rows + p0, pairs, out + p0 * kNr, kNr);
    transpose16(rows + 16 * pairs + p0, pairs, out + p0 * kNr + 16, kNr);
  }
  for (int64_t p = p0; p < pairs; ++p)
    for (int64_t c = 0; c < kNr; ++c) out[p * kNr + c] = rows[c * pairs + p];
}

// A stored [k, m] as FP8 codes: the codes [k0, k0 + h) x [m0, m0 + w) as stored (k0 = 64 kt,
// w <= 64) transposed in L1, tile row c widened into columns [k0, k0 + h) of row c of `rows`
// (op(A)'s row m0 + c, at row stride lda).
OCTET_AVX512_BF16 void widen_a_tile(const uint8_t* a, int64_t m, int64_t k, const uint16_t* table,
                                    int64_t m0, int64_t w, int64_t kt, uint16_t* rows,
                                    int64_t lda) {
  alignas(64) uint8_t tile[64 * 64];
  const int64_t k0 = kt * 64, h = std::min<int64_t>(64, k - k0);
  avx512::transpose_tile64(a + k0 * m + m0, m, h, w, tile, 64);
  __m512i t[4];
  avx512::load_widen_table(table, t);
  for (int64_t c = 0; c < w; ++c) {
    uint16_t* out = rows + c * lda + k0;
    for (int64_t i = 0; i < h; i += 32) {
      const __mmask32 mask = h - i >= 32 ? ~__mmask32{0} : (__mmask32{1} << (h - i)) - 1;
      _mm512_mask_storeu_epi16(out + i, mask, avx512::widen32(tile + c * 64 + i, mask, t));
    }
  }
}

// One panel of B stored [k, n], columns [j0, j0 + 32): out[p * 32 + c] = B[2p][j0 + c] |
// B[2p + 1][j0 + c] << 16 as bf16, zero past row k and column n. B is FP8 codes widened by
// `table`, or bf16 itself where `table` is null (bf16_amx_gemm). Pairs of rows widened in
// registers and interleaved: no transpose (pack_panel's rows are B's columns), and no bf16 copy
// of B written and read back (the weight gradients' B is x's column copy, 2048 x 688 at 256-wide:
// widening it first cost a pass as long as the packing).
OCTET_AVX512_BF16 void pack_panel_kn(const void* b, const uint16_t* table, int64_t k, int64_t n,
                                     int64_t j0, int64_t pairs, uint32_t* out) {
  // Word 2i of the first half from row 2p's column i, word 2i + 1 from row 2p + 1's (index 32 +
  // i of the two-register table); the second half columns 16 + i.
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                   37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                   11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                   53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                   27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_load_si512(kHi);
  __m512i t[4];
  if (table != nullptr) avx512::load_widen_table(table, t);
  const int64_t cols = std::min<int64_t>(kNr, n - j0);
  const __mmask32 mask = cols >= 32 ? ~__mmask32{0} : (__mmask32{1} << cols) - 1;
  const auto* codes = static_cast<const uint8_t*>(b) + j0;
  const auto* words = static_cast<const uint16_t*>(b) + j0;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i r[2];
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t x = 2 * p + h;
      r[h] = x >= k             ? _mm512_setzero_si512()
             : table != nullptr ? avx512::widen32(codes + x * n, mask, t)
                                : _mm512_maskz_loadu_epi16(mask, words + x * n);
    }
    _mm512_storeu_si512(out + p * kNr, _mm512_permutex2var_epi16(r[0], lo, r[1]));
    _mm512_storeu_si512(out + p * kNr + 16, _mm512_permutex2var_epi16(r[0], hi, r[1]));
  }
}

// The f32 kernel's operands (exact: a bf16's bits shifted up): n bf16 values of A's rows by
// convert_cpu.cpp's convert (serial inside a parallel region, over the team outside one),
void rows_to_f32(const uint16_t* in, float* out, int64_t n) {
  convert(Tensor(const_cast<uint16_t*>(in), DType::bf16, {n}), Tensor(out, DType::f32, {n}),
          Overflow::saturate);
}
// and a panel of [pairs][32] bf16 pairs as [2 pairs][32] f32: row 2p of each pair's low half
// (even K), row 2p + 1 of its high half.
OCTET_AVX512_BF16 void panel_to_f32(const uint32_t* in, int64_t pairs, float* out) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t p = 0; p < pairs; ++p) {
    for (int64_t h = 0; h < kNr; h += 16) {
      const __m512i w = _mm512_loadu_si512(in + p * kNr + h);
      _mm512_storeu_si512(out + 2 * p * kNr + h, _mm512_slli_epi32(w, 16));
      _mm512_storeu_si512(out + (2 * p + 1) * kNr + h, _mm512_and_si512(w, high));
    }
  }
}

// Tile `tile` of C against panel `panel`, `a` the tile's kMr rows of A (row stride l.lda):
// bf16 A and pair panels, or (kF32) f32 A and f32 panels (block_tile).
template <bool kF32>
OCTET_AVX512_BF16 void tile_and_store(const Fp8BlockGemm& g, const BlockLayout& l, const void* a,
                                      const void* panels, const float* col_scales,
                                      const float* row_scales, int64_t tile, int64_t panel) {
  __m512 main[kMr][2];
  const int64_t i0 = tile * kMr, j0 = panel * kNr;
  const void* p =
      kF32 ? static_cast<const void*>(static_cast<const float*>(panels) + panel * l.kp * kNr)
           : static_cast<const uint32_t*>(panels) + panel * (l.kp / 2) * kNr;
  block_tile<kF32>(a, l.lda, p, row_scales + i0 * l.slices, col_scales + panel * l.slices * kNr,
                   g.k, g.slice, l.slices, main);
  const size_t element = g.c_dtype == DType::f32 ? 4 : 2;
  void* c = static_cast<char*>(g.c) + static_cast<size_t>(i0 * g.n + j0) * element;
  store_tile(main, std::min(kMr, g.m - i0), std::min(kNr, g.n - j0), g.alpha, g.beta, c, g.c_dtype,
             g.n);
}

// Rows [r0, r0 + kBlockRows) of op(A), FP8 codes stored [m, k] or [k, m], widened into `out` at
// row stride l.lda as block_tile reads them: zeros past K (to l.kp), and zero rows past M (to
// l.mp).
OCTET_AVX512_BF16 void widen_a_block(const Fp8BlockGemm& g, const BlockLayout& l, Fp8ToBf16 widen,
                                     const uint16_t* table, int64_t r0, uint16_t* out) {
  const int64_t rows = std::clamp<int64_t>(g.m - r0, 0, kBlockRows);
  if (g.a_km) {
    for (int64_t kt = 0; kt < (g.k + 63) / 64; ++kt) {
      widen_a_tile(g.a, g.m, g.k, table, r0, rows, kt, out, l.lda);
    }
  } else if (l.lda == g.k) {
    widen(g.a + r0 * g.k, out, rows * g.k);
  } else {
    for (int64_t r = 0; r < rows; ++r) widen(g.a + (r0 + r) * g.k, out + r * l.lda, g.k);
  }
  for (int64_t r = 0; r < rows && l.kp != g.k; ++r) {
    std::fill(out + r * l.lda + g.k, out + r * l.lda + l.kp, uint16_t{0});
  }
  const int64_t padded = std::min(kBlockRows, l.mp - r0);
  if (padded > rows) std::fill_n(out + rows * l.lda, (padded - rows) * l.lda, uint16_t{0});
}

// Where A is the larger operand (per_task in fp8_block_gemm): tasks of kBlockRows rows of C,
// handed out as threads come; the thread that takes one widens its rows of A into its own
// kBlockRows rows of a16 (32 KiB at K = 256, kept in L1 and L2) and runs every panel against them,
// a panel's tiles in turn. A's bf16 copy is never written whole and read back from memory panel by
// panel, and no pass over A runs before the GEMM. Each element of C is still summed by one thread
// in one order.
// With kF32 each task's rows go on from bf16 into its thread's rows of a32 (f32) and the tiles
// read those and the f32 panels.
template <bool kF32>
OCTET_AVX512_BF16 void block_tasks(const Fp8BlockGemm& g, const BlockLayout& l, Fp8ToBf16 widen_a,
                                   const uint16_t* a_table, uint16_t* a16, float* a32,
                                   const void* panels, const float* col_scales,
                                   const float* row_scales, bool parallel) {
  const int64_t blocks = (l.mp + kBlockRows - 1) / kBlockRows, panel_count = l.np / kNr;
#pragma omp parallel if (parallel)
  {
    uint16_t* mine = a16 + omp_get_thread_num() * kBlockRows * l.lda;
    float* mine32 = kF32 ? a32 + omp_get_thread_num() * kBlockRows * l.lda : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = b * kBlockRows, rows = std::min(kBlockRows, l.mp - r0), tiles = rows / kMr;
      widen_a_block(g, l, widen_a, a_table, r0, mine);
      if constexpr (kF32) rows_to_f32(mine, mine32, rows * l.lda);
      for (int64_t panel = 0; panel < panel_count; ++panel) {
        for (int64_t t = 0; t < tiles; ++t) {
          const void* a =
              kF32 ? static_cast<const void*>(mine32 + t * kMr * l.lda) : mine + t * kMr * l.lda;
          tile_and_store<kF32>(g, l, a, panels, col_scales, row_scales, r0 / kMr + t, panel);
        }
      }
    }
  }
}

// Every (tile, panel) of C from the whole of A (widened in fp8_block_gemm's prologue): bf16, or
// (kF32) f32.
template <bool kF32>
OCTET_AVX512_BF16 void block_tiles(const Fp8BlockGemm& g, const BlockLayout& l, const void* a,
                                   const void* panels, const float* col_scales,
                                   const float* row_scales, bool parallel) {
  const int64_t tiles = l.mp / kMr, panel_count = l.np / kNr;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t panel = 0; panel < panel_count; ++panel) {
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const void* at =
          kF32 ? static_cast<const void*>(static_cast<const float*>(a) + tile * kMr * l.lda)
               : static_cast<const uint16_t*>(a) + tile * kMr * l.lda;
      tile_and_store<kF32>(g, l, at, panels, col_scales, row_scales, tile, panel);
    }
  }
}

#ifdef OCTET_HAVE_AMX
// Rows [r0, r1) of slice p's promotion: main += part * (sa * sb), the scale product rounded
// once, one fma (the first slice: main = part * (sa * sb), the same value as the fma onto
// zeros).
// One row of it: part_row * (sa * sb), plus main_row unless `first`, into o[0], o[1].
OCTET_AMX inline void promoted_row(const float* part_row, const float* main_row, float sa,
                                   __m512 sb0, __m512 sb1, bool first, __m512 (&o)[2]) {
  const __m512 row = _mm512_set1_ps(sa);
  const __m512 s0 = _mm512_mul_ps(row, sb0), s1 = _mm512_mul_ps(row, sb1);
  const __m512 p0 = _mm512_load_ps(part_row), p1 = _mm512_load_ps(part_row + 16);
  if (first) {
    o[0] = _mm512_mul_ps(p0, s0);
    o[1] = _mm512_mul_ps(p1, s1);
  } else {
    o[0] = _mm512_fmadd_ps(p0, s0, _mm512_load_ps(main_row));
    o[1] = _mm512_fmadd_ps(p1, s1, _mm512_load_ps(main_row + 16));
  }
}
OCTET_AMX inline void promote_rows(float (&main)[kAmxRows][kNr], const float (&part)[kAmxRows][kNr],
                                   const float* sa, int64_t slices, const float* sb, int64_t p,
                                   int64_t r0, int64_t r1) {
  const __m512 sb0 = _mm512_loadu_ps(sb + p * kNr), sb1 = _mm512_loadu_ps(sb + p * kNr + 16);
  for (int64_t r = r0; r < r1; ++r) {
    __m512 o[2];
    promoted_row(part[r], main[r], sa[r * slices + p], sb0, sb1, p == 0, o);
    _mm512_store_ps(&main[r][0], o[0]);
    _mm512_store_ps(&main[r][16], o[1]);
  }
}

// One 32 x 32 tile of C over all K on AMX (the tiles configured): per slice, tmm0..3 =
// A rows [0, 16) and [16, 32) x panel columns [0, 16) and [16, 32), summed over the slice's
// 32-wide K steps (tmm4, 5: A; tmm6, 7: B), stored to `part`, and promoted as block_tile
// does (promote_rows). A slice's promotion runs in pieces between the next slice's K steps, so
// that the vector work overlaps the tile products in the core's window; the next slice is
// stored over `part` only after the last piece. (Done after the slice's tiles, the next ones
// waited for it: in a step's profile the block recipe's kernel took 6% more samples than the
// row recipe's, one slice. Interleaved, the block recipe's twelve layer GEMMs took 0.90-0.91x
// the time, the kernels alternating call by call: docs/perf/emr-2026-11-30/s22-promotions-ab.)
OCTET_AMX void amx_tile_and_store(const Fp8BlockGemm& g, const BlockLayout& l, const uint16_t* a16,
                                  const uint32_t* panels, const float* col_scales,
                                  const float* row_scales, int64_t tile, int64_t panel) {
  alignas(64) float main[kAmxRows][kNr];
  alignas(64) float part[kAmxRows][kNr];
  const int64_t i0 = tile * kAmxRows, j0 = panel * kNr;
  const uint16_t* a = a16 + i0 * l.lda;
  const uint32_t* b = panels + panel * (l.kp / 2) * kNr;
  const float* sa = row_scales + i0 * l.slices;
  const float* sb = col_scales + panel * l.slices * kNr;
  const long a_stride = static_cast<long>(l.lda) * 2, b_stride = kNr * 4;
  for (int64_t s = 0; s < l.slices; ++s) {
    const int64_t k0 = s * g.slice;
    const int64_t steps = (std::min(g.slice, g.k - k0) + kAmxK - 1) / kAmxK;
    const int64_t piece = (kAmxRows + steps - 1) / steps;  // rows of slice s - 1 a step
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint16_t* as = a + k0;
    const uint32_t* bs = b + k0 / 2 * kNr;
    for (int64_t step = 0; step < steps; ++step, as += kAmxK, bs += kAmxK / 2 * kNr) {
      _tile_loadd(4, as, a_stride);
      _tile_loadd(5, as + 16 * l.lda, a_stride);
      _tile_loadd(6, bs, b_stride);
      _tile_loadd(7, bs + 16, b_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
      if (s > 0) {
        promote_rows(main, part, sa, l.slices, sb, s - 1, std::min(kAmxRows, step * piece),
                     std::min(kAmxRows, (step + 1) * piece));
      }
    }
    _tile_stored(0, &part[0][0], b_stride);
    _tile_stored(1, &part[0][16], b_stride);
    _tile_stored(2, &part[16][0], b_stride);
    _tile_stored(3, &part[16][16], b_stride);
  }
  // The last slice's promotion, main += part * (sa * sb) (main = part * (sa * sb) where it is the
  // only one: the row recipe's), made as C is stored: the same operations in the same order, with
  // no pass through main.
  const int64_t last = l.slices - 1;
  const __m512 sb0 = _mm512_loadu_ps(sb + last * kNr), sb1 = _mm512_loadu_ps(sb + last * kNr + 16);
  const size_t element = g.c_dtype == DType::f32 ? 4 : 2;
  const int64_t rows = std::min(kAmxRows, g.m - i0), cols = std::min(kNr, g.n - j0);
  for (int64_t r0 = 0; r0 < rows; r0 += kMr) {
    __m512 acc[kMr][2];
    for (int64_t r = 0; r < kMr; ++r) {
      promoted_row(part[r0 + r], main[r0 + r], sa[(r0 + r) * l.slices + last], sb0, sb1, last == 0,
                   acc[r]);
    }
    void* c = static_cast<char*>(g.c) + static_cast<size_t>((i0 + r0) * g.n + j0) * element;
    store_tile(acc, std::min(kMr, rows - r0), cols, g.alpha, g.beta, c, g.c_dtype, g.n);
  }
}

// Every (tile, panel) of C on AMX, each thread with its own tile configuration. Each thread
// takes a run of tasks that share the larger operand's part: the panels one after another where
// A's bf16 is the larger (a tile's rows stay in L1, or L2 for a long K, while the panels stream
// past them from L2, where B fits), else the tiles (a panel stays in L2 while the tiles stream
// past it). Where B is the larger (the weight gradient of the 256-wide FFN's down projection:
// B 2048 x 688, A 2048 x 256) the panels first read B's 2.9 MB from L3 for every tile.
// The runs are handed out as the threads come for them (at least 16 runs, whole outer rows where
// there are 16 of them): with equal halves, one thread waited for the other's last tasks 4-5% of
// the row and block steps (perf, twenty-first session), whichever vCPU the host slowed down.
// Keeping each thread's first tasks on the rows and panels it widened in the prologue (its static
// share first, then stealing) measured no better.
OCTET_AMX void amx_tiles(const Fp8BlockGemm& g, const BlockLayout& l, const uint16_t* a16,
                         const uint32_t* panels, const float* col_scales, const float* row_scales) {
  const int64_t tiles = l.mp / kAmxRows, panel_count = l.np / kNr;
  const bool tiles_inner = l.b_bytes > l.a_bytes;
  const int64_t outer = tiles_inner ? panel_count : tiles,
                inner = tiles_inner ? tiles : panel_count;
  const int64_t run = std::clamp<int64_t>(outer * inner / 16, 1, inner);
#pragma omp parallel if (g.m * g.n * g.k > (int64_t{1} << 18))
  {
    amx_configure();
#pragma omp for collapse(2) schedule(dynamic, run)
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        amx_tile_and_store(g, l, a16, panels, col_scales, row_scales, tiles_inner ? i : o,
                           tiles_inner ? o : i);
      }
    }
    amx_release();
  }
}
#endif
#undef OCTET_AVX512_BF16
#else
bool hardware_bf16() {
  return false;
}
#endif

}  // namespace

bool fp8_block_gemm_available() {
  static const bool hardware = hardware_bf16();
  return hardware && usable_isa("gemm") == Isa::avx512;
}

bool fp8_block_gemm_prefers_f32() {
  return gemm_impl() == GemmImpl::onednn_f32;
}

bool fp8_block_gemm_uses_amx(int64_t slice) {
#ifdef OCTET_HAVE_AMX
  return slice % kAmxK == 0 && usable_amx("gemm");
#else
  (void)slice;
  return false;
#endif
}

size_t fp8_block_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, int64_t slice, bool f32) {
  // Where the CPU has AMX either kernel may run (OCTET_CPU_ISA is read per call): room for
  // both layouts.
  slice = std::max<int64_t>(slice, 1);
  const size_t avx512 = block_layout(m, n, k, slice, false, f32).total();
  return hardware_has_amx_bf16() ? std::max(avx512, block_layout(m, n, k, slice, true).total())
                                 : avx512;
}

void fp8_block_gemm(const Fp8BlockGemm& g, void* workspace) {
#if defined(__x86_64__) && defined(__GNUC__)
  const bool amx = fp8_block_gemm_uses_amx(g.slice), f32 = g.f32 && !amx;
  const BlockLayout l = block_layout(g.m, g.n, g.k, g.slice, amx, f32);
  const BlockBuffers buf = block_buffers(l, workspace);
  // Plain locals (OpenMP regions below; clang before 16 captures no structured bindings).
  uint16_t *a16 = buf.a16, *b16 = buf.b16;
  uint32_t* panels = buf.panels;
  float *col_scales = buf.col_scales, *row_scales = buf.row_scales;
  float *a32 = buf.a32, *panels32 = buf.panels32;
  const int64_t pairs = l.kp / 2, panel_count = l.np / kNr;
  const bool big = g.m * g.k + g.n * g.k > (int64_t{1} << 16);
  const bool parallel = g.m * g.n * g.k > (int64_t{1} << 18);
  // A widened by the tasks that read it (block_tasks), where A is the larger operand and a16 has
  // room for each thread's rows; otherwise whole, below.
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  const bool per_task = !amx && l.b_bytes <= l.a_bytes && l.mp >= threads * kBlockRows;

  // A and B widened to bf16 (exact), K padded to even and rows padded with zeros. B stored
  // [k, n] is widened as pack_panel_kn packs it, and padded there.
  const Fp8ToBf16 widen_a = fp8_to_bf16(g.a_dtype), widen_b = fp8_to_bf16(g.b_dtype);
  // A stored [k, m] and B stored [k, n] are widened in registers (widen_a_tile, pack_panel_kn).
  const uint16_t *a_table = fp8_bf16_table(g.a_dtype), *b_table = fp8_bf16_table(g.b_dtype);
  // Where K needs no padding (every FP8 GEMM's K is a multiple of 16, AMX's steps 32) the rows
  // of an operand are one run of codes, widened in chunks rather than a call per row (rows of
  // 256 codes are eight vectors); then the padding rows. Otherwise (and for A where AMX pads its
  // rows: BlockLayout::lda) row by row.
  // A stored [k, m] is transposed by 64 x 64 tiles of codes as it is widened (below).
  const bool a_run = l.kp == g.k && l.lda == l.kp && !g.a_km, b_run = l.kp == g.k && !g.b_kn;
  constexpr int64_t kChunk = 8192;
  const int64_t a_chunks = a_run && !per_task ? (g.m * g.k + kChunk - 1) / kChunk : 0;
  const int64_t chunks = a_chunks + (b_run ? (g.n * g.k + kChunk - 1) / kChunk : 0);
  const int64_t a_rows = a_run || g.a_km || per_task ? 0 : l.mp;
  const int64_t rows = a_rows + (b_run || g.b_kn ? 0 : l.np);
  const int64_t m_tiles = g.a_km && !per_task ? (g.m + 63) / 64 : 0, k_tiles = (g.k + 63) / 64;
#pragma omp parallel if (big)
  {
#pragma omp for schedule(static) nowait
    for (int64_t c = 0; c < chunks; ++c) {
      const bool is_a = c < a_chunks;
      const int64_t begin = (is_a ? c : c - a_chunks) * kChunk;
      const int64_t n = std::min(kChunk, (is_a ? g.m : g.n) * g.k - begin);
      (is_a ? widen_a : widen_b)((is_a ? g.a : g.b) + begin, (is_a ? a16 : b16) + begin, n);
    }
#pragma omp for collapse(2) schedule(static) nowait
    for (int64_t mt = 0; mt < m_tiles; ++mt) {
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        const int64_t m0 = mt * 64;
        widen_a_tile(g.a, g.m, g.k, a_table, m0, std::min<int64_t>(64, g.m - m0), kt,
                     a16 + m0 * l.lda, l.lda);
      }
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const bool is_a = r < a_rows;
      const int64_t row = is_a ? r : r - a_rows;
      uint16_t* out = is_a ? a16 + row * l.lda : b16 + row * l.kp;
      if (row < (is_a ? g.m : g.n)) {
        (is_a ? widen_a : widen_b)((is_a ? g.a : g.b) + row * g.k, out, g.k);
        std::fill(out + g.k, out + l.kp, uint16_t{0});
      } else {
        std::fill_n(out, l.kp, uint16_t{0});
      }
    }
  }
  if ((a_run || g.a_km) && !per_task) std::fill(a16 + g.m * l.lda, a16 + l.mp * l.lda, uint16_t{0});
  if (g.a_km && l.kp != g.k && !per_task) {
    for (int64_t r = 0; r < g.m; ++r) std::fill(a16 + r * l.lda + g.k, a16 + r * l.lda + l.kp, 0);
  }
  if (l.kp == g.k && !g.b_kn) std::fill(b16 + g.n * l.kp, b16 + l.np * l.kp, uint16_t{0});

    // B's rows as panels of 32 columns, each K pair of a column one 32-bit word, and each
    // panel's column scales per slice (0 for padding columns).
#pragma omp parallel for schedule(static) if (big)
  for (int64_t panel = 0; panel < panel_count; ++panel) {
    uint32_t* out = panels + panel * pairs * kNr;
    if (g.b_kn) {
      pack_panel_kn(g.b, b_table, g.k, g.n, panel * kNr, pairs, out);
    } else {
      pack_panel(reinterpret_cast<const uint32_t*>(b16 + panel * kNr * l.kp), pairs, out);
    }
    if (f32) panel_to_f32(out, pairs, panels32 + panel * l.kp * kNr);
    float* scales = col_scales + panel * l.slices * kNr;
    for (int64_t s = 0; s < l.slices; ++s) {
      for (int64_t c = 0; c < kNr; ++c) {
        const int64_t j = panel * kNr + c;
        scales[s * kNr + c] = j < g.n ? g.b_scales[j * l.slices + s] : 0.0f;
      }
    }
  }
  // Row scales padded with zeros to whole tiles (padding rows of A are zero, never stored).
  std::copy_n(g.a_scales, g.m * l.slices, row_scales);
  std::fill(row_scales + g.m * l.slices, row_scales + l.mp * l.slices, 0.0f);
#ifdef OCTET_HAVE_AMX
  if (amx) return amx_tiles(g, l, a16, panels, col_scales, row_scales);
#endif
  if (per_task && f32) {
    return block_tasks<true>(g, l, widen_a, a_table, a16, a32, panels32, col_scales, row_scales,
                             parallel);
  }
  if (per_task) {
    return block_tasks<false>(g, l, widen_a, a_table, a16, nullptr, panels, col_scales, row_scales,
                              parallel);
  }
  if (!f32) return block_tiles<false>(g, l, a16, panels, col_scales, row_scales, parallel);
  rows_to_f32(a16, a32, l.mp * l.lda);
  block_tiles<true>(g, l, a32, panels32, col_scales, row_scales, parallel);
#else
  (void)g;
  (void)workspace;
#endif
}

bool bf16_amx_gemm_takes(int64_t m, int64_t n, int64_t k) {
  return a_is_larger(m, n) && k > 0 && fp8_block_gemm_uses_amx(kAmxK);
}

size_t bf16_amx_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k) {
  if (!hardware_has_amx_bf16() || !a_is_larger(m, n)) return 0;
  return block_layout(m, n, k, unit_slice(k), true).total();
}

Bf16AmxOperands bf16_amx_operands(int64_t m, int64_t n, int64_t k, void* workspace) {
  const BlockLayout l = block_layout(m, n, k, unit_slice(k), true);
  const BlockBuffers b = block_buffers(l, workspace);
  return {b.a16, l.lda, b.b16, l.kp};
}

void bf16_amx_gemm(const Bf16AmxGemm& g, void* workspace) {
#ifdef OCTET_HAVE_AMX
  const int64_t slice = unit_slice(g.k);
  const BlockLayout l = block_layout(g.m, g.n, g.k, slice, true);
  const BlockBuffers u = block_buffers(l, workspace);
  const int64_t m_blocks = g.a != nullptr ? (g.m + 31) / 32 : 0, k_blocks = l.kp / 32;
  const int64_t panel_count = l.np / kNr, pairs = l.kp / 2;
  // Operands the caller widened into the workspace: zeros past K in their rows, and B's padding
  // rows (pack_panel reads whole panels).
  const int64_t a_pad = g.a == nullptr && l.kp != g.k ? g.m : 0;
  const int64_t b_pad = g.b == nullptr ? l.np : 0;
#pragma omp parallel if (g.m * g.k + g.n * g.k > (int64_t{1} << 16))
  {
    // A stored [k, m]: its 32 x 32 blocks transposed into a16's rows (zeros past K).
#pragma omp for collapse(2) schedule(static) nowait
    for (int64_t mb = 0; mb < m_blocks; ++mb) {
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        avx512::transpose32_words(
            g.a + kb * 32 * g.m + mb * 32, g.m, std::min<int64_t>(32, g.k - kb * 32),
            std::min<int64_t>(32, g.m - mb * 32), u.a16 + mb * 32 * l.lda + kb * 32, l.lda);
      }
    }
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < a_pad; ++r) {
      std::fill(u.a16 + r * l.lda + g.k, u.a16 + r * l.lda + l.kp, uint16_t{0});
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < b_pad; ++r) {
      uint16_t* row = u.b16 + r * l.kp;
      std::fill(row + (r < g.n ? g.k : 0), row + l.kp, uint16_t{0});
    }
    // B's panels: from B stored [k, n] by pairs of rows, or from the rows widened into b16.
#pragma omp for schedule(static)
    for (int64_t panel = 0; panel < panel_count; ++panel) {
      uint32_t* out = u.panels + panel * pairs * kNr;
      if (g.b != nullptr) {
        pack_panel_kn(g.b, nullptr, g.k, g.n, panel * kNr, pairs, out);
      } else {
        pack_panel(reinterpret_cast<const uint32_t*>(u.b16 + panel * kNr * l.kp), pairs, out);
      }
      std::fill_n(u.col_scales + panel * kNr, kNr, 1.0f);
    }
  }
  std::fill(u.a16 + g.m * l.lda, u.a16 + l.mp * l.lda, uint16_t{0});  // padding rows
  std::fill_n(u.row_scales, l.mp, 1.0f);
  const Fp8BlockGemm unit{nullptr, DType::bf16, nullptr, DType::bf16, g.m,       g.n,     g.k,
                          slice,   nullptr,     nullptr, g.c,         g.c_dtype, g.alpha, g.beta};
  amx_tiles(unit, l, u.a16, u.panels, u.col_scales, u.row_scales);
#else
  (void)g;
  (void)workspace;
  OCTET_FAIL("gemm", "this build has no AMX kernel (bf16_amx_gemm_takes is false)");
#endif
}

}  // namespace octet::kernels::cpu
