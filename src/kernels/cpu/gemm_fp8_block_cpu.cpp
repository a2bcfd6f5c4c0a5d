// kernels/cpu/gemm_fp8_block_cpu.cpp: FP8 GEMMs whose f32 scales split K (the block
// recipe's 1x128 tiles and 128x128 blocks) on AVX512_BF16, without widening code x scale
// to f32: the codes (exact in bf16) go through vdpbf16ps into a per-slice fp32 register
// tile, and at the end of each K slice that tile is added, times sa[i,s] * sb[j,s], into
// the fp32 accumulators (DeepSeek-V3's "promotion"). gemm_fp8_fused_cpu.cpp calls it where
// the CPU has AVX512_BF16 and OCTET_CPU_ISA allows AVX-512; its one-f32-GEMM way stays the
// fallback. The result does not depend on the thread count: each element of C is summed by
// one thread in one order.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/convert.h"
#include "kernels/cpu/bf16_round_avx512.h"
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
int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

// The workspace: [A bf16, Mp x Kp][B bf16, Np x Kp][B panels, Np x Kp bf16 in K pairs]
// [column scales, Np / 32 panels x S slices x 32][row scales, Mp x S].
struct BlockLayout {
  int64_t mp, np, kp, slices;
  size_t a_bytes, b_bytes, panel_bytes, scale_bytes, row_scale_bytes;
  size_t total() const {
    return kAlign + a_bytes + b_bytes + panel_bytes + scale_bytes + row_scale_bytes;
  }
};

BlockLayout block_layout(int64_t m, int64_t n, int64_t k, int64_t slice) {
  BlockLayout l{};
  l.mp = round_up(std::max<int64_t>(m, 1), kMr);
  l.np = round_up(std::max<int64_t>(n, 1), kNr);
  l.kp = round_up(std::max<int64_t>(k, 1), 2);
  l.slices = (k + slice - 1) / slice;
  l.a_bytes = align_up(static_cast<size_t>(l.mp * l.kp) * 2);
  l.b_bytes = align_up(static_cast<size_t>(l.np * l.kp) * 2);
  l.panel_bytes = l.b_bytes;
  l.scale_bytes = align_up(static_cast<size_t>(l.np * l.slices) * 4);
  l.row_scale_bytes = align_up(static_cast<size_t>(l.mp * l.slices) * 4);
  return l;
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

// One kMr x 32 tile of C over all K: `a` the tile's first row of bf16 A (row stride kp),
// `panel` its 32 columns of B as [kp / 2][32] bf16 pairs, `sa` the tile's row scales
// [kMr][slices], `sb` the panel's column scales [slices][32].
OCTET_AVX512_BF16 void block_tile(const uint16_t* a, int64_t kp, const uint32_t* panel,
                                  const float* sa, const float* sb, int64_t k, int64_t slice,
                                  int64_t slices, __m512 (&main)[kMr][2]) {
  for (int64_t r = 0; r < kMr; ++r) main[r][0] = main[r][1] = _mm512_setzero_ps();
  // These empty asm statements make the compiler keep `main` in memory between slices, so
  // that the slice loop has its 16 accumulators, the 2 B vectors and the broadcast in zmm.
  asm volatile("" : : "r"(&main[0][0]) : "memory");
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t k0 = s * slice;
    const int64_t pairs = (std::min(slice, k - k0) + 1) / 2;
    __m512 acc[kMr][2];
    for (int64_t r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint32_t* b = panel + k0 / 2 * kNr;
    const auto* a32 = reinterpret_cast<const uint32_t*>(a + k0);
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

OCTET_AVX512_BF16 void tile_and_store(const Fp8BlockGemm& g, const BlockLayout& l,
                                      const uint16_t* a16, const uint32_t* panels,
                                      const float* col_scales, const float* row_scales,
                                      int64_t tile, int64_t panel) {
  __m512 main[kMr][2];
  const int64_t i0 = tile * kMr, j0 = panel * kNr;
  block_tile(a16 + i0 * l.kp, l.kp, panels + panel * (l.kp / 2) * kNr, row_scales + i0 * l.slices,
             col_scales + panel * l.slices * kNr, g.k, g.slice, l.slices, main);
  const size_t element = g.c_dtype == DType::f32 ? 4 : 2;
  void* c = static_cast<char*>(g.c) + static_cast<size_t>(i0 * g.n + j0) * element;
  store_tile(main, std::min(kMr, g.m - i0), std::min(kNr, g.n - j0), g.alpha, g.beta, c, g.c_dtype,
             g.n);
}
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

size_t fp8_block_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, int64_t slice) {
  return block_layout(m, n, k, std::max<int64_t>(slice, 1)).total();
}

void fp8_block_gemm(const Fp8BlockGemm& g, void* workspace) {
#if defined(__x86_64__) && defined(__GNUC__)
  const BlockLayout l = block_layout(g.m, g.n, g.k, g.slice);
  char* base = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(workspace)));
  auto* a16 = reinterpret_cast<uint16_t*>(base);
  auto* b16 = reinterpret_cast<uint16_t*>(base + l.a_bytes);
  auto* panels = reinterpret_cast<uint32_t*>(base + l.a_bytes + l.b_bytes);
  auto* col_scales = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes + l.panel_bytes);
  auto* row_scales = col_scales + l.scale_bytes / 4;
  const int64_t pairs = l.kp / 2, tiles = l.mp / kMr, panel_count = l.np / kNr;
  const bool big = g.m * g.k + g.n * g.k > (int64_t{1} << 16);

  // A and B widened to bf16 (exact), K padded to even and rows padded with zeros.
  const Fp8ToBf16 widen_a = fp8_to_bf16(g.a_dtype), widen_b = fp8_to_bf16(g.b_dtype);
  if (l.kp == g.k) {
    // Even K (every FP8 GEMM's K is a multiple of 16): the rows of A and of B are each one
    // run of codes, widened in chunks rather than a call per row (rows of 256 codes are
    // eight vectors); then the padding rows.
    constexpr int64_t kChunk = 8192;
    const int64_t a_chunks = (g.m * g.k + kChunk - 1) / kChunk;
    const int64_t chunks = a_chunks + (g.n * g.k + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (big)
    for (int64_t c = 0; c < chunks; ++c) {
      const bool is_a = c < a_chunks;
      const int64_t begin = (is_a ? c : c - a_chunks) * kChunk;
      const int64_t n = std::min(kChunk, (is_a ? g.m : g.n) * g.k - begin);
      (is_a ? widen_a : widen_b)((is_a ? g.a : g.b) + begin, (is_a ? a16 : b16) + begin, n);
    }
    std::fill(a16 + g.m * l.kp, a16 + l.mp * l.kp, uint16_t{0});
    std::fill(b16 + g.n * l.kp, b16 + l.np * l.kp, uint16_t{0});
  } else {
#pragma omp parallel for schedule(static) if (big)
    for (int64_t r = 0; r < l.mp + l.np; ++r) {
      const bool is_a = r < l.mp;
      const int64_t row = is_a ? r : r - l.mp;
      uint16_t* out = is_a ? a16 + row * l.kp : b16 + row * l.kp;
      if (row < (is_a ? g.m : g.n)) {
        (is_a ? widen_a : widen_b)((is_a ? g.a : g.b) + row * g.k, out, g.k);
        if (l.kp > g.k) out[g.k] = 0;
      } else {
        std::fill_n(out, l.kp, uint16_t{0});
      }
    }
  }
  // B's rows as panels of 32 columns, each K pair of a column one 32-bit word, and each
  // panel's column scales per slice (0 for padding columns).
#pragma omp parallel for schedule(static) if (big)
  for (int64_t panel = 0; panel < panel_count; ++panel) {
    uint32_t* out = panels + panel * pairs * kNr;
    const auto* rows = reinterpret_cast<const uint32_t*>(b16 + panel * kNr * l.kp);
    pack_panel(rows, pairs, out);
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
#pragma omp parallel for collapse(2) schedule(static) if (g.m * g.n * g.k > (int64_t{1} << 18))
  for (int64_t panel = 0; panel < panel_count; ++panel) {
    for (int64_t tile = 0; tile < tiles; ++tile)
      tile_and_store(g, l, a16, panels, col_scales, row_scales, tile, panel);
  }
#else
  (void)g;
  (void)workspace;
#endif
}

}  // namespace octet::kernels::cpu
