// kernels/cpu/quantize_cpu.cpp: FP8 quantization and dequantization on the CPU, every grid.

// Two passes over each block (block amaxes, then scale and encode), with the inner
// loops compiled once per x86 instruction-set level like kernels/cpu/convert_cpu.cpp;
// OpenMP runs over row bands, or over chunks of the tensor for per-tensor scales, and
// the per-row-scaled transposed copy of a narrow x over slabs of its rows as well.
// No allocation: per-block amaxes live in the scale_inv output until they become
// scales, tiles live on the stack.

// As in convert_cpu.cpp: without -fno-trapping-math GCC leaves the encoders'
// selects as branches and the AVX2/baseline loops scalar. No result changes (the
// tests compare every bit); the pragma must precede the includes.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/byte_transpose.h"
#include "kernels/cpu/gemm_cpu.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/block_scales_avx2.h"
#include "kernels/cpu/block_scales_avx512.h"
#include "kernels/cpu/byte_transpose_avx2.h"
#include "kernels/cpu/byte_transpose_avx512.h"
#include "kernels/cpu/fp8_encode_avx2.h"
#include "kernels/cpu/fp8_encode_avx512.h"
#include "kernels/cpu/mx_blocks_avx2.h"
#include "kernels/cpu/mx_blocks_avx512.h"
#endif
#include "kernels/cpu/amax.h"
#include "kernels/cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

constexpr uint32_t kInfBits = 0x7F800000u;
constexpr uint32_t kQuietNanBits = 0x7FC00000u;
// Tensors up to kParallelMin elements (gemm_cpu.h) run on one thread, bigger ones over the team.
// Per-tensor passes cut a tensor into chunks of up to kParallelElements, one or more a thread
// (chunk_size); the results do not depend on the cut.
constexpr int64_t kParallelElements = int64_t{1} << 16;
// Transposed copy: x is read in kTile x kTile tiles (16 KiB of f32, L1-resident).
constexpr int64_t kTile = 64;
// The transposed copy by rows of xᵀ (avx512, bf16, 1 x N grids): rows of x per task.
constexpr int64_t kTransposeRows = 512;
// Blocks of one row narrower than this are encoded in runs of several blocks.
constexpr int64_t kNarrowBlock = 256;
// Below AVX-512 the bf16 widening (QuantizeOutputs::wide) follows the per-tensor encode this
// many values at a time, while their codes are still in L1 (AVX-512 writes both from registers:
// Kernels::encode_wide).
constexpr int64_t kWidenPiece = 4096;

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

// One block of the transposed copy's work: x rows [r0, r0 + h) x x columns
// [c0, c0 + w), holding whole blocks of xᵀ that are `block_w` columns of x wide.
struct TransposedTask {
  const void* x;
  int64_t rows, cols;  // x's
  int64_t r0, h, c0, w, block_w;
  int64_t block_h;     // rows of x per band: h spans several bands when they are short
  uint8_t* data_t;     // [cols, rows]
  void* scale_inv_t;   // [ceil(cols / block_w), scale_cols]
  int64_t scale_cols;  // number of xᵀ block columns (= row bands of x)
  int64_t band;        // this task's xᵀ block column
  // One band (block_h >= rows: per-row scales of xᵀ) split over slabs of rows, for shapes
  // whose columns alone are too few tasks for the threads (quantize_transposed_slabs):
  // `maxima` max-es the task's column maxima into col_max and stops; `encode` takes its
  // blocks' amaxes from col_max ([cols], every row's) and writes scale_inv_t only where
  // writes_scales (one slab), the other slabs computing the same scales for themselves.
  enum class Split : uint8_t { none, maxima, encode } split = Split::none;
  uint32_t* col_max = nullptr;
  bool writes_scales = true;
};

// One piece of the column copy (QuantizeOutputs::data_t_in_x_layout): rows [r0, r0 + h) of x,
// all in band `band` of block_h rows, x columns [c0, c0 + w) (w <= kColumnChunk).
struct ColumnsTask {
  const void* x;
  int64_t cols;  // x's
  int64_t r0, h, c0, w;
  uint8_t* data_t;    // [rows, cols], x's layout
  void* scale_inv_t;  // [cols, bands]
  int64_t bands, band;
  // One band split over slabs of rows (the row grid): `maxima` max-es the slab's column maxima
  // into col_max (column c0 + i at col_max[c0 - col_max_c0 + i]), a thread's own array that no
  // other thread touches until the thread max-es it into the band's (max_into_shared) after its
  // last slab, and stops; `encode` takes the band's maxima from there, and writes scale_inv_t
  // only where writes_scales (one slab).
  enum class Split : uint8_t { none, maxima, encode } split = Split::none;
  uint32_t* col_max = nullptr;
  int64_t col_max_c0 = 0;  // the column col_max[0] holds
  bool writes_scales = true;
};

// ---- element helpers (inlined into each instruction-set variant) -------------

[[gnu::always_inline]] inline float load(float v) {
  return v;
}
[[gnu::always_inline]] inline float load(uint16_t v) {
  return bf16_to_f32(v);
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

// The multipliers mult[b] of n blocks from their amax bits, each block's scale_inv stored at
// index(b): 16 blocks at a time on avx512, 8 on avx2 (kernels/cpu/block_scales_avx512.h,
// block_scales_avx2.h, bit for bit block_scale), one at a time below.
template <Isa kIsa, class Index>
[[gnu::always_inline]] inline void block_scales(const Job& j, const uint32_t* amax, int64_t n,
                                                float* mult, void* scale_inv, Index index) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (kIsa == Isa::avx512 || kIsa == Isa::avx2) {
    constexpr int64_t kChunk = 64;
    for (int64_t b0 = 0; b0 < n; b0 += kChunk) {
      const int64_t m = std::min(kChunk, n - b0);
      alignas(64) uint32_t inv[kChunk];
      if constexpr (kIsa == Isa::avx512) {
        avx512::block_scales(amax + b0, m, j.e8m0, j.fp8_max, j.pow2, mult + b0, inv);
      } else {
        avx2::block_scales(amax + b0, m, j.e8m0, j.fp8_max, j.pow2, mult + b0, inv);
      }
      for (int64_t b = 0; b < m; ++b) {  // the E8M0 code, or the bits of the f32 1 / scale
        if (j.e8m0) {
          static_cast<uint8_t*>(scale_inv)[index(b0 + b)] = static_cast<uint8_t>(inv[b]);
        } else {
          static_cast<uint32_t*>(scale_inv)[index(b0 + b)] = inv[b];
        }
      }
    }
    return;
  }
#endif
  for (int64_t b = 0; b < n; ++b) mult[b] = block_scale(j, amax[b], scale_inv, index(b));
}

// ---- the loops ---------------------------------------------------------------

// out = encode(x * scale); with kCount, also the values that overflowed the format
// (|x * scale| past the rounding boundary of ±max, x finite: the unsaturated
// conversion would give Inf/NaN) and the nonzero finite values that became ±0.
// The multiplier: one per call, or one per element (runs of narrow blocks). st.amax_bits
// comes in as a bound on the |x| bits of the run (the callers take it before encoding;
// 0xFFFFFFFF where unknown): the avx512 encoder leaves its NaN select out below Inf's.
[[gnu::always_inline]] inline float scale_at(float scale, int64_t) {
  return scale;
}
[[gnu::always_inline]] inline float scale_at(const float* __restrict scale, int64_t i) {
  return scale[i];
}

// kIsa: the instruction-set variant (isa.h). avx512 and avx2 use their hand-written encoders
// (kernels/cpu/fp8_encode_avx512.h, fp8_encode_avx2.h), the same bits and counts; the baseline
// the compiler's vectorisation of the scalar encoder. avx512 also has its own tile, MX-row and
// block-scale kernels, avx2 its own tile transpose and block scales.
template <class In, bool kE4M3, bool kCount, Isa kIsa, class Scale>
[[gnu::always_inline]] inline void encode_loop(const In* __restrict x, uint8_t* __restrict out,
                                               int64_t n, Scale scale, bool saturate, Stats& st) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (kIsa == Isa::avx512) {
    avx512::encode_run<In, kE4M3, kCount>(x, out, n, scale, saturate, st.amax_bits, st.saturated,
                                          st.flushed);
    return;
  }
  if constexpr (kIsa == Isa::avx2) {
    avx2::encode_run<In, kE4M3, kCount>(x, out, n, scale, saturate, st.amax_bits, st.saturated,
                                        st.flushed);
    return;
  }
#endif
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
        const uint32_t xm = magnitude_bits(x[i]);
        saturated += (xm < kInfBits) & ((f32_bits(v) & 0x7FFFFFFFu) >= overflow_bits);
        flushed += (xm - 1u < kInfBits - 1u) & ((code & 0x7Fu) == 0);
      }
      st.saturated += saturated;
      st.flushed += flushed;
    }
  }
}

// ---- the kernels: one entry each, specialised by the dispatch below ---------

struct AmaxSpan {
  static constexpr bool kFormat = false, kCount = false;
  template <class In, bool, bool, Isa>
  [[gnu::always_inline]] static uint32_t run(const Job&, const void* x, int64_t n) {
    return max_magnitude_bits(static_cast<const In*>(x), n);
  }
};

struct EncodeSpan {
  static constexpr bool kFormat = true, kCount = true;
  template <class In, bool kE4M3, bool kCount, Isa kIsa>
  [[gnu::always_inline]] static void run(const Job& j, const void* x, uint8_t* out, int64_t n,
                                         float scale, Stats* st) {
    encode_loop<In, kE4M3, kCount, kIsa>(static_cast<const In*>(x), out, n, scale, j.saturate, *st);
  }
};

// encode_loop that also writes the codes' bf16 values (QuantizeOutputs::wide) from registers:
// AVX-512 only (Kernels::encode_wide). Whole vectors of 32 go that way, the rest through
// encode_loop and a widening of its codes.
struct EncodeWideSpan {
  static constexpr bool kFormat = true, kCount = true;
  template <class In, bool kE4M3, bool kCount, Isa kIsa>
  [[gnu::always_inline]] static void run(const Job& j, const void* xv, uint8_t* out, uint16_t* wide,
                                         int64_t n, float scale, Stats* st) {
    const In* x = static_cast<const In*>(xv);
    const int64_t full = n / 32 * 32;
#if defined(__x86_64__) && defined(__GNUC__)
    if constexpr (kIsa == Isa::avx512) {
      avx512::encode_wide_run<In, kE4M3, kCount>(
          x, out, wide, full, scale, j.saturate, st->amax_bits,
          fp8_bf16_table(kE4M3 ? DType::e4m3 : DType::e5m2), st->saturated, st->flushed);
    }
#endif
    if (full < n) {
      encode_loop<In, kE4M3, kCount, kIsa>(x + full, out + full, n - full, scale, j.saturate, *st);
      fp8_to_bf16(kE4M3 ? DType::e4m3 : DType::e5m2)(out + full, wide + full, n - full);
    }
  }
};

// One band of h rows sharing the scale row `scale_inv` (one entry per bc columns).
struct Band {
  static constexpr bool kFormat = true, kCount = true;
  template <class In, bool kE4M3, bool kCount, Isa kIsa>
  [[gnu::always_inline]] static void run(const Job& j, const void* xv, int64_t h, int64_t cols,
                                         int64_t bc, uint8_t* out, void* scale_inv, Stats* st) {
    const In* x = static_cast<const In*>(xv);
    const int64_t nb = (cols + bc - 1) / bc;
#if defined(__x86_64__) && defined(__GNUC__)
    if constexpr (kIsa == Isa::avx512) {
      if (h == 1 && bc == 32 && j.e8m0) {  // MX: kernels/cpu/mx_blocks_avx512.h
        avx512::mx_row<In, kE4M3, kCount>(x, cols, out, static_cast<uint8_t*>(scale_inv), j.fp8_max,
                                          j.saturate, st->amax_bits, st->saturated, st->flushed);
        return;
      }
      // Rows of at least four such blocks (with fewer, its sixteen-lane scale set-up costs more
      // than the generic loop's): the same file.
      if (h == 1 && !j.e8m0 && bc >= 32 && bc < kNarrowBlock && bc % 16 == 0 && cols >= 4 * bc) {
        avx512::scaled_row<In, kE4M3, kCount>(
            x, 1, cols, bc, out, static_cast<uint32_t*>(scale_inv), j.fp8_max, j.pow2, j.saturate,
            st->amax_bits, st->saturated, st->flushed);
        return;
      }
    }
    if constexpr (kIsa == Isa::avx2) {
      if (h == 1 && bc == 32 && j.e8m0) {  // MX: kernels/cpu/mx_blocks_avx2.h
        avx2::mx_row<In, kE4M3, kCount>(x, cols, out, static_cast<uint8_t*>(scale_inv), j.fp8_max,
                                        j.saturate, st->amax_bits, st->saturated, st->flushed);
        return;
      }
    }
#endif
    if (h == 1 && bc < kNarrowBlock) {
      // 1xN tiles, MX and short rows: block amaxes and scales for a run of blocks, then one
      // encode loop over the run with a multiplier per element, so that short blocks
      // do not each pay for a vector loop's prologue, epilogue and reductions.
      constexpr int64_t kRun = 2048;
      alignas(64) float mult[kRun];
      const int64_t run = kRun / bc * bc;
      for (int64_t c0 = 0; c0 < cols; c0 += run) {
        const int64_t n = std::min(run, cols - c0), nb_run = (n + bc - 1) / bc;
        alignas(64) uint32_t amax[kRun];
        alignas(64) float block_mult[kRun];
        for (int64_t b = 0; b < nb_run; ++b) {
          amax[b] = max_magnitude_bits(x + c0 + b * bc, std::min(bc, n - b * bc));
          st->amax_bits = std::max(st->amax_bits, amax[b]);
        }
        block_scales<kIsa>(j, amax, nb_run, block_mult, scale_inv,
                           [&](int64_t b) { return c0 / bc + b; });
        for (int64_t b = 0; b < nb_run; ++b) {
          const int64_t w = std::min(bc, n - b * bc);
          for (int64_t i = 0; i < w; ++i) mult[b * bc + i] = block_mult[b];
        }
        encode_loop<In, kE4M3, kCount, kIsa>(x + c0, out + c0, n, static_cast<const float*>(mult),
                                             j.saturate, *st);
      }
      return;
    }
    if (h == 1) {
      // Rows and wide blocks: each block is a run of one row, still in L1 for the
      // second pass.
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t c0 = b * bc, w = std::min(bc, cols - c0);
        const uint32_t m = max_magnitude_bits(x + c0, w);
        st->amax_bits = std::max(st->amax_bits, m);
        const float scale = block_scale(j, m, scale_inv, b);
        encode_loop<In, kE4M3, kCount, kIsa>(x + c0, out + c0, w, scale, j.saturate, *st);
      }
      return;
    }
    // NxN blocks (f32 scales only), in runs of columns small enough for the band's
    // run to stay in L2 between the passes. The row of scale_inv holds the block
    // amaxes, then the scales, then their inverses. Column maxima are taken down
    // the rows first, so each block needs one horizontal reduction, not one per row.
    float* s = static_cast<float*>(scale_inv);
    for (int64_t b = 0; b < nb; ++b) s[b] = 0.0f;
    constexpr int64_t kRun = 512;
    const int64_t run = bc < kRun ? kRun / bc * bc : kRun;
    for (int64_t c0 = 0; c0 < cols; c0 += run) {
      const int64_t n = std::min(run, cols - c0);
      alignas(64) uint32_t col_max[kRun];
      for (int64_t i = 0; i < n; ++i) col_max[i] = 0;
      max_column_magnitude_bits<kRun>(x + c0, cols, h, n, col_max);
      for (int64_t i = 0; i < n;) {
        const int64_t b = (c0 + i) / bc, end = std::min(n, (b + 1) * bc - c0);
        uint32_t m = f32_bits(s[b]);
        for (; i < end; ++i) m = std::max(m, col_max[i]);
        s[b] = amax_value(m);
      }
    }
    for (int64_t b = 0; b < nb; ++b) {
      st->amax_bits = std::max(st->amax_bits, f32_bits(s[b]));
      s[b] = scale_from_amax(s[b], j.fp8_max, 0, j.pow2);
    }
    for (int64_t c0 = 0; c0 < cols; c0 += run) {
      const int64_t n = std::min(run, cols - c0);
      alignas(64) float mult[kRun];
      for (int64_t i = 0; i < n; ++i) mult[i] = s[(c0 + i) / bc];
      for (int64_t r = 0; r < h; ++r) {
        encode_loop<In, kE4M3, kCount, kIsa>(x + r * cols + c0, out + r * cols + c0, n,
                                             static_cast<const float*>(mult), j.saturate, *st);
      }
    }
    for (int64_t b = 0; b < nb; ++b) s[b] = 1.0f / s[b];
  }
};

// Rows of 1 x bc blocks with f32 scales where bc does not divide the row (kernels/cpu/
// mx_blocks_avx512.h's scaled_row across rows): h rows, their blocks' scales one after another.
struct Rows {
  static constexpr bool kFormat = true, kCount = true;
  template <class In, bool kE4M3, bool kCount, Isa kIsa>
  [[gnu::always_inline]] static void run(const Job& j, const void* xv, int64_t h, int64_t cols,
                                         int64_t bc, uint8_t* out, void* scale_inv, Stats* st) {
    static_assert(kIsa == Isa::avx512, "only the AVX-512 variant has Kernels::rows");
#if defined(__x86_64__) && defined(__GNUC__)
    avx512::scaled_row<In, kE4M3, kCount>(static_cast<const In*>(xv), h, cols, bc, out,
                                          static_cast<uint32_t*>(scale_inv), j.fp8_max, j.pow2,
                                          j.saturate, st->amax_bits, st->saturated, st->flushed);
#endif
  }
};

// shared[i] = max(shared[i], m[i]) for i < n, with other threads doing the same: each element
// by a compare-and-swap loop. The maximum does not depend on the order.
[[gnu::always_inline]] inline void max_into_shared(const uint32_t* m, int64_t n, uint32_t* shared) {
  for (int64_t i = 0; i < n; ++i) {
    std::atomic_ref<uint32_t> to(shared[i]);
    uint32_t seen = to.load(std::memory_order_relaxed);
    while (seen < m[i] && !to.compare_exchange_weak(seen, m[i], std::memory_order_relaxed)) {
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

// The transposed copy of one task: column amaxes by strided reads of x (vectorised
// along the row), block scales, then kTile x kTile tiles encoded row-wise into an
// L1 buffer, transposed there and written out as rows of xᵀ. A task holds up to
// kMaxBands bands of block_h rows (MX: two bands of 32 rows fill a 64-row tile).
constexpr int64_t kMaxBands = 8;
struct Transposed {
  static constexpr bool kFormat = true, kCount = false;
  template <class In, bool kE4M3, bool, Isa kIsa>
  [[gnu::always_inline]] static void run(const Job& j, const TransposedTask& t) {
    const In* x = static_cast<const In*>(t.x);
    const int64_t nbands = (t.h + t.block_h - 1) / t.block_h;
    // w <= kTile when blocks are narrower than a tile, else w == one block. Every grid that
    // gets here but unusual ones has blocks one column of x wide (block_w == 1: rows, 1xN,
    // MX): their loops below index blocks by column, without a division.
    const int64_t nb = (t.w + t.block_w - 1) / t.block_w;
    const bool unit_w = t.block_w == 1;
    alignas(64) uint32_t block_max[kMaxBands][kTile];
    alignas(64) float block_mult[kMaxBands][kTile];
    using Split = TransposedTask::Split;
    for (int64_t band = 0; band < nbands; ++band) {
      for (int64_t b = 0; b < nb; ++b) block_max[band][b] = 0;
    }
    if (t.split == Split::encode) {  // one band of one-column blocks: the maxima of every row
      for (int64_t b = 0; b < nb; ++b) block_max[0][b] = t.col_max[t.c0 + b];
    }
    for (int64_t s0 = 0; s0 < t.w && t.split != Split::encode; s0 += kTile) {
      const int64_t sw = std::min(kTile, t.w - s0);
      for (int64_t band = 0; band < nbands; ++band) {
        alignas(64) uint32_t col_max[kTile] = {};
        const int64_t rb = band * t.block_h, re = std::min(t.h, rb + t.block_h);
        max_column_magnitude_bits<kTile>(x + (t.r0 + rb) * t.cols + t.c0 + s0, t.cols, re - rb, sw,
                                         col_max);
        uint32_t* __restrict m = block_max[band];
        if (unit_w) {
          for (int64_t c = 0; c < sw; ++c) m[s0 + c] = std::max(m[s0 + c], col_max[c]);
        } else {
          for (int64_t c = 0; c < sw; ++c) {
            m[(s0 + c) / t.block_w] = std::max(m[(s0 + c) / t.block_w], col_max[c]);
          }
        }
      }
    }
    if (t.split == Split::maxima) {
      max_into_shared(block_max[0], nb, t.col_max + t.c0);
      return;
    }
    uint32_t task_max = 0;  // bounds |x| in the task: the encoders' NaN select
    for (int64_t band = 0; band < nbands; ++band) {
      for (int64_t b = 0; b < nb; ++b) task_max = std::max(task_max, block_max[band][b]);
    }
    alignas(64) uint32_t unwritten[kTile];  // the scales of a slab that does not write them
    for (int64_t band = 0; band < nbands; ++band) {
      const int64_t first = t.c0 / t.block_w * t.scale_cols + t.band + band;  // of block 0
      block_scales<kIsa>(j, block_max[band], nb, block_mult[band],
                         t.writes_scales ? t.scale_inv_t : static_cast<void*>(unwritten),
                         [&](int64_t b) { return t.writes_scales ? first + b * t.scale_cols : b; });
    }
    for (int64_t s0 = 0; s0 < t.w; s0 += kTile) {
      const int64_t sw = std::min(kTile, t.w - s0);
      alignas(64) float col_scale[kMaxBands][kTile];
      for (int64_t band = 0; band < nbands; ++band) {
        if (unit_w) {
          for (int64_t c = 0; c < sw; ++c) col_scale[band][c] = block_mult[band][s0 + c];
        } else {
          for (int64_t c = 0; c < sw; ++c)
            col_scale[band][c] = block_mult[band][(s0 + c) / t.block_w];
        }
      }
      for (int64_t r1 = 0; r1 < t.h; r1 += kTile) {
        const int64_t th = std::min(kTile, t.h - r1);
        alignas(64) uint8_t tile[kTile * kTile];
        // No stray bytes in the tile's transpose (the avx512 one reads only th x sw; the avx2 one
        // and the 8 x 8 blocks read all of it).
        if (kIsa != Isa::avx512 && (th < kTile || sw < kTile)) std::memset(tile, 0, sizeof(tile));
        const In* tile_x = x + (t.r0 + r1) * t.cols + t.c0 + s0;
        auto row_scale = [&](int64_t r) -> const float* {
          return col_scale[(r1 + r) / t.block_h % kMaxBands];
        };
#if defined(__x86_64__) && defined(__GNUC__)
        if constexpr (kIsa == Isa::avx512) {
          avx512::encode_tile<In, kE4M3>(tile_x, t.cols, tile, kTile, th, sw, row_scale, j.saturate,
                                         task_max);
        } else if constexpr (kIsa == Isa::avx2) {
          uint64_t unused = 0;
          for (int64_t r = 0; r < th; ++r) {
            avx2::encode_run<In, kE4M3, false>(tile_x + r * t.cols, tile + r * kTile, sw,
                                               row_scale(r), j.saturate, task_max, unused, unused);
          }
        } else
#endif
        {
          for (int64_t r = 0; r < th; ++r) {
            const In* __restrict row = tile_x + r * t.cols;
            const float* __restrict scale = row_scale(r);
            uint8_t* __restrict codes = tile + r * kTile;
            for (int64_t c = 0; c < sw; ++c) {
              codes[c] = encode<kE4M3>(load(row[c]) * scale[c], j.saturate);
            }
          }
        }
        uint8_t* tile_out = t.data_t + (t.c0 + s0) * t.rows + t.r0 + r1;
#if defined(__x86_64__) && defined(__GNUC__)
        if constexpr (kIsa == Isa::avx512) {
          // Only the th x sw bytes encoded above are read.
          avx512::transpose_tile64(tile, kTile, th, sw, tile_out, t.rows);
          continue;
        }
#endif
        alignas(64) uint8_t tile_t[kTile * kTile];
#if defined(__x86_64__) && defined(__GNUC__)
        if constexpr (kIsa == Isa::avx2) {
          avx2::transpose64_into(tile, kTile, tile_t);  // kernels/cpu/byte_transpose_avx2.h
        } else
#endif
        {
          transpose_tile(tile, tile_t);
        }
        if (th == kTile) {  // whole rows of the tile: a copy of a size the compiler knows
          for (int64_t c = 0; c < sw; ++c)
            std::memcpy(tile_out + c * t.rows, tile_t + c * kTile, kTile);
        } else {
          for (int64_t c = 0; c < sw; ++c) {
            std::memcpy(tile_out + c * t.rows, tile_t + c * kTile, static_cast<size_t>(th));
          }
        }
      }
    }
  }
};

// The column copy of one task: the band's column maxima (16-bit lanes for bf16, read along
// the rows), their multipliers, and each row encoded with them where it lies: xᵀ's codes in x's
// layout, the transposed copy's bits without its transposes.
constexpr int64_t kColumnChunk = 512;
struct Columns {
  static constexpr bool kFormat = true, kCount = false;
  template <class In, bool kE4M3, bool, Isa kIsa>
  [[gnu::always_inline]] static void run(const Job& j, const ColumnsTask& t) {
    const In* x = static_cast<const In*>(t.x);
    using Split = ColumnsTask::Split;
    alignas(64) uint32_t col_max[kColumnChunk];
    if (t.split == Split::encode) {
      std::copy_n(t.col_max + (t.c0 - t.col_max_c0), t.w, col_max);
    } else {
      std::fill_n(col_max, t.w, 0u);
      max_column_magnitude_bits<kColumnChunk>(x + t.r0 * t.cols + t.c0, t.cols, t.h, t.w, col_max);
    }
    if (t.split == Split::maxima) {
      uint32_t* __restrict mine = t.col_max + (t.c0 - t.col_max_c0);
      for (int64_t c = 0; c < t.w; ++c) mine[c] = std::max(mine[c], col_max[c]);
      return;
    }
    uint32_t bound = 0;  // bounds |x| in the task: the encoders' NaN select
    for (int64_t c = 0; c < t.w; ++c) bound = std::max(bound, col_max[c]);
    alignas(64) float mult[kColumnChunk];
    alignas(64) uint32_t unwritten[kColumnChunk];  // the scales of a slab that does not write them
    block_scales<kIsa>(
        j, col_max, t.w, mult, t.writes_scales ? t.scale_inv_t : static_cast<void*>(unwritten),
        [&](int64_t b) { return t.writes_scales ? (t.c0 + b) * t.bands + t.band : b; });
#if defined(__x86_64__) && defined(__GNUC__)
    if constexpr (kIsa == Isa::avx512 && std::is_same_v<In, uint16_t>) {
      alignas(64) float scratch[kColumnChunk];
      avx512::encode_columns_bf16<kE4M3>(x + t.r0 * t.cols + t.c0, t.cols,
                                         t.data_t + t.r0 * t.cols + t.c0, t.cols, t.h, t.w, mult,
                                         j.saturate, bound, scratch);
      return;
    }
#endif
    for (int64_t r = t.r0; r < t.r0 + t.h; ++r) {
      Stats st;
      st.amax_bits = bound;
      encode_loop<In, kE4M3, false, kIsa>(x + r * t.cols + t.c0, t.data_t + r * t.cols + t.c0, t.w,
                                          static_cast<const float*>(mult), j.saturate, st);
    }
  }
};

// Picks K::run<In, kE4M3, kCount> from the job, one branch per flag; everything
// is inlined into the instruction-set variant that calls it.
template <class K, Isa kIsa, class In, bool kE4M3, class... Args>
[[gnu::always_inline]] inline auto dispatch_count(const Job& j, Args... args) {
  if constexpr (K::kCount) {
    if (j.count) return K::template run<In, kE4M3, true, kIsa>(j, args...);
  }
  return K::template run<In, kE4M3, false, kIsa>(j, args...);
}
template <class K, Isa kIsa, class In, class... Args>
[[gnu::always_inline]] inline auto dispatch_format(const Job& j, Args... args) {
  if constexpr (K::kFormat) {
    if (j.e4m3) return dispatch_count<K, kIsa, In, true>(j, args...);
    return dispatch_count<K, kIsa, In, false>(j, args...);
  } else {
    return K::template run<In, false, false, kIsa>(j, args...);
  }
}
template <class K, Isa kIsa, class... Args>
[[gnu::always_inline]] inline auto dispatch(const Job& j, Args... args) {
  if (j.bf16) return dispatch_format<K, kIsa, uint16_t>(j, args...);
  return dispatch_format<K, kIsa, float>(j, args...);
}

// ---- instruction-set variants ------------------------------------------------

struct Kernels {
  uint32_t (*amax)(const Job&, const void*, int64_t);
  void (*encode)(const Job&, const void*, uint8_t*, int64_t, float, Stats*);
  void (*band)(const Job&, const void*, int64_t, int64_t, int64_t, uint8_t*, void*, Stats*);
  void (*transposed)(const Job&, const TransposedTask&);
  void (*columns)(const Job&, const ColumnsTask&);
  // The transposed copy of bf16 x for 1 x N grids as rows of xᵀ (transposed_by_rows below):
  // x, rows, cols, r0, h, c0, w, block, data_t, scale_inv_t, scale size. nullptr below AVX-512.
  void (*transposed_by_rows)(const Job&, const void*, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t, uint8_t*, void*, size_t) = nullptr;
  // h rows of 1 x bc blocks with f32 scales, bc a multiple of 16 in [32, kNarrowBlock) that does
  // not divide the row (Rows above): x, h, cols, bc, out, scale_inv. nullptr below AVX-512.
  void (*rows)(const Job&, const void*, int64_t, int64_t, int64_t, uint8_t*, void*,
               Stats*) = nullptr;
  // encode that also writes wide (EncodeWideSpan): x, out, wide, n, scale. nullptr below AVX-512.
  void (*encode_wide)(const Job&, const void*, uint8_t*, uint16_t*, int64_t, float,
                      Stats*) = nullptr;
};

#define OCTET_QUANTIZE_VARIANT(name, vec, attributes)                                              \
  attributes uint32_t amax_##name(const Job& j, const void* x, int64_t n) {                        \
    return dispatch<AmaxSpan, vec>(j, x, n);                                                       \
  }                                                                                                \
  attributes void encode_##name(const Job& j, const void* x, uint8_t* out, int64_t n, float scale, \
                                Stats* st) {                                                       \
    dispatch<EncodeSpan, vec>(j, x, out, n, scale, st);                                            \
  }                                                                                                \
  attributes void band_##name(const Job& j, const void* x, int64_t h, int64_t cols, int64_t bc,    \
                              uint8_t* out, void* scale_inv, Stats* st) {                          \
    dispatch<Band, vec>(j, x, h, cols, bc, out, scale_inv, st);                                    \
  }                                                                                                \
  attributes void transposed_##name(const Job& j, const TransposedTask& t) {                       \
    dispatch<Transposed, vec>(j, t);                                                               \
  }                                                                                                \
  attributes void columns_##name(const Job& j, const ColumnsTask& t) {                             \
    dispatch<Columns, vec>(j, t);                                                                  \
  }                                                                                                \
  [[maybe_unused]] constexpr Kernels kKernels_##name = {amax_##name, encode_##name, band_##name,   \
                                                        transposed_##name, columns_##name};

// On x86-64 the baseline variant serves only CPUs without AVX2 (before 2013) and the tests that
// cap OCTET_CPU_ISA; every machine octet targets takes the AVX2 or AVX-512 one. GCC builds it at
// -O2 there: at -O3 its inlined loops were 348 KB of the file's 1.42 MB of code (62 KB at -O2)
// and about 15 s of its 65-90 s of compile time, the clean build's longest job. Its quantize
// runs 3-4x slower at -O2, which only those CPUs and those tests see (docs/perf/build.md,
// 2026-12-01). Elsewhere (aarch64) it is the only variant and keeps -O3.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OCTET_QUANTIZE_BASELINE_ATTRIBUTES __attribute__((optimize("O2")))
#else
#define OCTET_QUANTIZE_BASELINE_ATTRIBUTES
#endif
OCTET_QUANTIZE_VARIANT(baseline, Isa::baseline, OCTET_QUANTIZE_BASELINE_ATTRIBUTES)
#undef OCTET_QUANTIZE_BASELINE_ATTRIBUTES
#if defined(__x86_64__) && defined(__GNUC__)
OCTET_QUANTIZE_VARIANT(avx2, Isa::avx2, __attribute__((target("avx2,fma,f16c,bmi2"))))
OCTET_QUANTIZE_VARIANT(
    avx512_base, Isa::avx512,
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2"))))
// Kernels::rows (Rows above).
void rows_avx512(const Job& j, const void* x, int64_t h, int64_t cols, int64_t bc, uint8_t* out,
                 void* scale_inv, Stats* st) {
  dispatch<Rows, Isa::avx512>(j, x, h, cols, bc, out, scale_inv, st);
}
// Rows [r0, r0 + h) x columns [c0, c0 + w) of bf16 x (h <= kTransposeRows, w <= 32, r0 a
// multiple of the block): transposed in 32 x 32 word tiles into a 32 KiB buffer whose rows,
// rows of xᵀ, the avx512 band kernel quantizes as it does any row (1 x block grid), storing
// codes and scales contiguously into data_t [cols, rows] and scale_inv_t [cols, ceil(rows /
// block)].
void transposed_by_rows_avx512(const Job& j, const void* x, int64_t rows, int64_t cols, int64_t r0,
                               int64_t h, int64_t c0, int64_t w, int64_t block, uint8_t* data_t,
                               void* scale_inv_t, size_t scale_size) {
  alignas(64) uint16_t buf[32 * kTransposeRows];
  const int64_t hp = (h + 31) / 32 * 32;
  const auto* xb = static_cast<const uint16_t*>(x);
  for (int64_t rg = 0; rg < h; rg += 32) {
    avx512::transpose32_words(xb + (r0 + rg) * cols + c0, cols, std::min<int64_t>(32, h - rg), w,
                              buf + rg, hp);
  }
  const int64_t scale_cols = (rows + block - 1) / block;
  for (int64_t c = 0; c < w; ++c) {
    Stats unused;
    const int64_t scale_index = (c0 + c) * scale_cols + r0 / block;
    band_avx512_base(
        j, buf + c * hp, 1, h, block, data_t + (c0 + c) * rows + r0,
        static_cast<char*>(scale_inv_t) + scale_index * static_cast<int64_t>(scale_size), &unused);
  }
}
// Kernels::encode_wide.
void encode_wide_avx512(const Job& j, const void* x, uint8_t* out, uint16_t* wide, int64_t n,
                        float scale, Stats* st) {
  dispatch<EncodeWideSpan, Isa::avx512>(j, x, out, wide, n, scale, st);
}
constexpr Kernels kKernels_avx512 = {
    amax_avx512_base,    encode_avx512_base,        band_avx512_base, transposed_avx512_base,
    columns_avx512_base, transposed_by_rows_avx512, rows_avx512,      encode_wide_avx512};
#endif
#undef OCTET_QUANTIZE_VARIANT

const Kernels& pick_kernels() {
  const Isa isa = usable_isa("quantize");
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::avx512) return kKernels_avx512;
  if (isa == Isa::avx2) return kKernels_avx2;
#endif
  return kKernels_baseline;
}

// A grid dimension as a block size: 0 (whole dimension) or more than n is n.
int64_t block_size(int64_t block, int64_t n) {
  return block == 0 || block > n ? n : block;
}

const char* byte_offset(const void* p, int64_t elements, size_t size) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(size);
}

// Elements per chunk of a per-tensor pass over n: up to kParallelElements, at least one chunk a
// thread where n is above kParallelMin.
int64_t chunk_size(int64_t n) {
  const int64_t threads = omp_get_max_threads();
  return std::clamp((n + threads - 1) / threads, kParallelMin, kParallelElements);
}

// One scale for the whole tensor: a parallel amax, then a parallel encode.
void quantize_per_tensor(const Kernels& k, const Job& j, const Tensor& x,
                         const QuantizeOutputs& out, const QuantizeOptions& o, Stats& st) {
  const int64_t n = x.numel();
  const size_t in_size = dtype_size(x.dtype);
  const int64_t chunk = chunk_size(n), chunks = (n + chunk - 1) / chunk;
  const bool given = !o.given_scale.empty();
  uint32_t amax_bits = 0;
  if (!o.given_amax.empty()) {
    amax_bits = f32_bits(o.given_amax.as<const float>()[0]) & 0x7FFFFFFFu;  // |amax|'s bits
  } else if (!given || !out.amax.empty()) {
#pragma omp parallel for schedule(static) reduction(max : amax_bits) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * chunk, count = std::min(chunk, n - begin);
      amax_bits = std::max(amax_bits, k.amax(j, byte_offset(x.data, begin, in_size), count));
    }
  }
  st.amax_bits = amax_bits;
  float scale;
  if (given) {
    scale = o.given_scale.as<float>()[0];
    out.scale_inv.as<float>()[0] = 1.0f / scale;
  } else {
    scale = block_scale(j, amax_bits, out.scale_inv.data, 0);
  }
  // A given scale may be anything (0, Inf, NaN): only with a finite positive one and a
  // computed amax does the encoder know that x * scale holds no NaN.
  const bool amax_known =
      (!given || !out.amax.empty() || !o.given_amax.empty()) && scale > 0.0f && scale <= FLT_MAX;
  uint64_t saturated = 0, flushed = 0;
  auto* data = out.data.as<uint8_t>();
  auto* wide = out.wide.empty() ? nullptr : out.wide.as<uint16_t>();
  const Fp8ToBf16 widen = wide != nullptr ? fp8_to_bf16(out.data.dtype) : Fp8ToBf16{};
#pragma omp parallel for schedule(static) reduction(+ : saturated, flushed) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk, count = std::min(chunk, n - begin);
    Stats s;
    s.amax_bits = amax_known ? amax_bits : 0xFFFFFFFFu;  // the bound encode_loop reads
    if (wide == nullptr) {
      k.encode(j, byte_offset(x.data, begin, in_size), data + begin, count, scale, &s);
    } else if (k.encode_wide != nullptr) {
      k.encode_wide(j, byte_offset(x.data, begin, in_size), data + begin, wide + begin, count,
                    scale, &s);
    } else {
      for (int64_t p = begin; p < begin + count; p += kWidenPiece) {
        const int64_t m = std::min(kWidenPiece, begin + count - p);
        k.encode(j, byte_offset(x.data, p, in_size), data + p, m, scale, &s);
        widen(data + p, wide + p, m);
      }
    }
    saturated += s.saturated;
    flushed += s.flushed;
  }
  st.saturated = saturated;
  st.flushed = flushed;
}

// How many rows of 1 x block_cols blocks to quantize as one: where the blocks tile each
// row exactly (per-row scales too: one block per row), the blocks of consecutive rows follow
// each other in memory and so do their scales, so m rows are one row m times as long (up to
// kFlatRow values; m divides rows). Short rows then keep the vector loops full: MX's loop
// takes sixteen blocks at a time, of which a row of 64 values fills two, and a row of 1376
// leaves a group of three blocks; rows of 64 with their own scales took one call each.
constexpr int64_t kFlatRow = 4096;
int64_t rows_per_flat_row(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols) {
  if (block_rows != 1 || cols % block_cols != 0) return 1;
  int64_t m = std::max<int64_t>(kFlatRow / cols, 1);
  while (rows % m != 0) --m;
  return m;
}

// Whether Kernels::rows takes the rows: 1 x block_cols blocks with f32 scales that do not tile
// the row (1 x 128 over rows of 176 or 352 values). Row by row, two or three blocks at a time,
// the generic loop took 142.7 us for 2048 x 176 bf16 where Kernels::rows takes 88.2 (`octet
// bench quantize`, one thread, Zen 4; docs/perf/cpu-step.md).
bool short_rows(const Kernels& k, const Job& j, int64_t cols, int64_t block_rows,
                int64_t block_cols) {
  return k.rows != nullptr && block_rows == 1 && !j.e8m0 && block_cols >= 32 &&
         block_cols < kNarrowBlock && block_cols % 16 == 0 && cols % block_cols != 0;
}

// Bands of block_rows rows, each with its row of scales, or, for short rows, chunks of rows that
// Kernels::rows takes as one run of blocks; they run in parallel.
void quantize_bands(const Kernels& k, const Job& j, const Tensor& x, const QuantizeOutputs& out,
                    int64_t block_rows, int64_t block_cols, Stats& st) {
  const bool by_rows = short_rows(k, j, x.cols(), block_rows, block_cols);
  const int64_t flat = by_rows ? 1 : rows_per_flat_row(x.rows(), x.cols(), block_rows, block_cols);
  const int64_t rows = x.rows() / flat, cols = x.cols() * flat;
  const int64_t per_task = by_rows ? std::max<int64_t>(1, kFlatRow / cols) : block_rows;
  const int64_t tasks = (rows + per_task - 1) / per_task;
  // Scales per band, or per row where each row is its own band of blocks.
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  const size_t in_size = dtype_size(x.dtype), scale_size = dtype_size(out.scale_inv.dtype);
  auto* data = out.data.as<uint8_t>();
  uint32_t amax_bits = 0;
  uint64_t saturated = 0, flushed = 0;
#pragma omp parallel for schedule(static) reduction(max : amax_bits) \
    reduction(+ : saturated, flushed) if (rows * cols > kParallelMin)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r0 = t * per_task, h = std::min(per_task, rows - r0);
    const void* xt = byte_offset(x.data, r0 * cols, in_size);
    void* scales = const_cast<char*>(
        byte_offset(out.scale_inv.data, (by_rows ? r0 : t) * scale_cols, scale_size));
    Stats s;
    if (by_rows) {
      k.rows(j, xt, h, cols, block_cols, data + r0 * cols, scales, &s);
    } else {
      k.band(j, xt, h, cols, block_cols, data + r0 * cols, scales, &s);
    }
    amax_bits = std::max(amax_bits, s.amax_bits);
    saturated += s.saturated;
    flushed += s.flushed;
  }
  st = {amax_bits, saturated, flushed};
}

// The transposed copy of one band of one-column blocks (per-row scales of xᵀ) whose column
// chunks are fewer than two per thread (the row recipe's 64- to 352-wide activations and
// gradients: one to six chunks, the first thread doing most or all of the work): each row slab
// of each chunk max-es its column maxima into col_max, then, after the barrier, encodes its
// tiles with the scales of every row's maxima. The maximum does not depend on the order, so
// neither do the outputs on the thread count.
constexpr int64_t kMaxSlabColumns = 4096;
void quantize_transposed_slabs(const Kernels& k, const Job& j, const TransposedTask& base,
                               int64_t chunks, int64_t task_w, int threads) {
  alignas(64) uint32_t col_max[kMaxSlabColumns];
  std::fill_n(col_max, base.cols, 0u);
  // About four tasks a thread, slabs of whole tiles.
  const int64_t want = std::max<int64_t>(1, (4 * threads + chunks - 1) / chunks);
  const int64_t tiles = (base.rows + kTile - 1) / kTile;
  const int64_t slab_h = (tiles + std::min(want, tiles) - 1) / std::min(want, tiles) * kTile;
  const int64_t slabs = (base.rows + slab_h - 1) / slab_h;
  auto task = [&](int64_t slab, int64_t c, TransposedTask::Split split) {
    TransposedTask t = base;
    t.r0 = slab * slab_h;
    t.h = std::min(slab_h, base.rows - t.r0);
    t.c0 = c * task_w;
    t.w = std::min(task_w, base.cols - t.c0);
    t.split = split;
    t.col_max = col_max;
    t.writes_scales = slab == 0;
    k.transposed(j, t);
  };
#pragma omp parallel num_threads(threads)
  {
#pragma omp for collapse(2) schedule(static)
    for (int64_t slab = 0; slab < slabs; ++slab)
      for (int64_t c = 0; c < chunks; ++c) task(slab, c, TransposedTask::Split::maxima);
#pragma omp for collapse(2) schedule(static)
    for (int64_t slab = 0; slab < slabs; ++slab)
      for (int64_t c = 0; c < chunks; ++c) task(slab, c, TransposedTask::Split::encode);
  }
}

// xᵀ quantized with the grid applied to xᵀ. Where that grid covers x with the same
// blocks as x's own grid (per tensor, NxN) the scales are the same and the result
// is the transpose of data and scale_inv, bit for bit; otherwise (row, 1xN, MX)
// the blocks of xᵀ are columns of x: from bf16 on AVX-512, where they fit the tasks, made
// as rows of xᵀ by word transposes; else quantized by strided passes over x.
void quantize_transposed(const Kernels& k, Job j, const Tensor& x, const QuantizeOutputs& out,
                         ScaleGrid grid) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t block_rows = block_size(grid.block_rows, rows);
  const int64_t block_cols = block_size(grid.block_cols, cols);
  // xᵀ's blocks in x's coordinates: block_w columns of x by block_h rows of x.
  const int64_t block_w = block_size(grid.block_rows, cols);
  const int64_t block_h = block_size(grid.block_cols, rows);
  const DType scale_dtype = out.scale_inv.dtype;
  if (block_h == block_rows && block_w == block_cols) {
    const int64_t bands = (rows + block_rows - 1) / block_rows;
    const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
    transpose(Tensor(out.data.data, out.data.dtype, {rows, cols}),
              Tensor(out.data_t.data, out.data.dtype, {cols, rows}));
    transpose(Tensor(out.scale_inv.data, scale_dtype, {bands, scale_cols}),
              Tensor(out.scale_inv_t.data, scale_dtype, {scale_cols, bands}));
    return;
  }
  j.count = false;  // counts are for data only
  if (k.transposed_by_rows != nullptr && x.dtype == DType::bf16 && block_w == 1 &&
      (kTransposeRows % block_h == 0 || rows <= kTransposeRows)) {
    // 1 x N grids (MX, 1x128, rows up to 512 long) from bf16: the rows of xᵀ made by word
    // transposes and quantized as rows, in tasks of kTransposeRows rows x 32 columns of x
    // (whole blocks of xᵀ each). The strided passes below, their byte tiles and transposes,
    // cost about twice the row quantize there (the 256-wide MX step).
    const int64_t row_tasks = (rows + kTransposeRows - 1) / kTransposeRows;
    const int64_t col_tasks = (cols + 31) / 32;
    const size_t scale_size = dtype_size(out.scale_inv_t.dtype);
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols > kParallelMin)
    for (int64_t rt = 0; rt < row_tasks; ++rt) {
      for (int64_t ct = 0; ct < col_tasks; ++ct) {
        const int64_t r0 = rt * kTransposeRows, c0 = ct * 32;
        k.transposed_by_rows(j, x.data, rows, cols, r0, std::min(kTransposeRows, rows - r0), c0,
                             std::min<int64_t>(32, cols - c0), block_h, out.data_t.as<uint8_t>(),
                             out.scale_inv_t.data, scale_size);
      }
    }
    return;
  }
  const int64_t task_w = block_w > kTile ? block_w : kTile / block_w * block_w;
  const int64_t bands = (rows + block_h - 1) / block_h;
  // Bands shorter than a tile go several to a task, so that its tiles are full.
  const int64_t per_task =
      block_h < kTile ? std::clamp<int64_t>(kTile / block_h, 1, kMaxBands) : int64_t{1};
  const int64_t tasks = (bands + per_task - 1) / per_task;
  const int64_t chunks = (cols + task_w - 1) / task_w;
  TransposedTask base{};
  base.x = x.data;
  base.rows = rows;
  base.cols = cols;
  base.block_w = block_w;
  base.data_t = out.data_t.as<uint8_t>();
  base.scale_inv_t = out.scale_inv_t.data;
  base.scale_cols = bands;
  base.block_h = block_h;
  const int threads = omp_get_max_threads();
  if (threads > 1 && bands == 1 && block_w == 1 && chunks < 2 * threads &&
      cols <= kMaxSlabColumns && rows > kTile && rows * cols > kParallelMin) {
    quantize_transposed_slabs(k, j, base, chunks, task_w, threads);
    return;
  }
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols > kParallelMin)
  for (int64_t b = 0; b < tasks; ++b) {
    for (int64_t c = 0; c < chunks; ++c) {
      TransposedTask task = base;
      task.band = b * per_task;
      task.r0 = task.band * block_h;
      task.h = std::min(per_task * block_h, rows - task.r0);
      task.c0 = c * task_w;
      task.w = std::min(task_w, cols - task.c0);
      k.transposed(j, task);
    }
  }
}

// The column copy's tasks over x: rows [r0, r0 + h) of one band by chunk `chunk` of
// kColumnChunk columns.
struct ColumnTasks {
  ColumnsTask base{};
  int64_t block_h, chunks;  // xᵀ's blocks in x's rows; column chunks
  ColumnTasks(const Tensor& x, const QuantizeOutputs& out, ScaleGrid grid)
      : block_h(block_size(grid.block_cols, x.rows())),
        chunks((x.cols() + kColumnChunk - 1) / kColumnChunk) {
    base.x = x.data;
    base.cols = x.cols();
    base.data_t = out.data_t.as<uint8_t>();
    base.scale_inv_t = out.scale_inv_t.data;
    base.bands = (x.rows() + block_h - 1) / block_h;
  }
  ColumnsTask at(int64_t r0, int64_t h, int64_t chunk) const {
    ColumnsTask t = base;
    t.r0 = r0;
    t.h = h;
    t.band = r0 / block_h;
    t.c0 = chunk * kColumnChunk;
    t.w = std::min(kColumnChunk, base.cols - t.c0);
    return t;
  }
};

// The column copy (QuantizeOutputs::data_t_in_x_layout) of a 1xN grid (row, 1x128, MX; the
// front end allows no other): xᵀ's blocks are block_h rows of one column of x, and its codes
// stay where x's are. Per band of block_h rows, tasks of kColumnChunk columns (Columns above);
// one band (row) is split into slabs of rows that share its column maxima, which do not depend
// on the order: nor do the outputs on the thread count. quantize() takes it where
// quantize_rows_and_columns does not: rows wider than kMaxSlabColumns.
void quantize_columns(const Kernels& k, Job j, const Tensor& x, const QuantizeOutputs& out,
                      ScaleGrid grid) {
  const int64_t rows = x.rows(), cols = x.cols();
  j.count = false;  // counts are for data only
  const ColumnTasks tasks(x, out, grid);
  const int64_t block_h = tasks.block_h, chunks = tasks.chunks, bands = tasks.base.bands;
  const bool parallel = rows * cols > kParallelMin;
  if (bands > 1 || !parallel) {
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t band = 0; band < bands; ++band) {
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t r0 = band * block_h;
        k.columns(j, tasks.at(r0, std::min(block_h, rows - r0), c));
      }
    }
    return;
  }
  // One band: about four tasks a thread, slabs of at least 16 rows; the column maxima of the
  // whole band (up to kMaxSlabColumns columns at a time) on the stack.
  const int threads = omp_get_max_threads();
  const int64_t want = std::max<int64_t>(1, (4 * threads + chunks - 1) / chunks);
  const int64_t slab_h = std::max<int64_t>(16, (rows + want - 1) / want);
  const int64_t slabs = (rows + slab_h - 1) / slab_h;
  alignas(64) uint32_t col_max[kMaxSlabColumns];
  constexpr int64_t kGroup = kMaxSlabColumns / kColumnChunk;  // chunks sharing col_max
  for (int64_t g0 = 0; g0 < chunks; g0 += kGroup) {
    const int64_t g1 = std::min(chunks, g0 + kGroup);
    std::fill_n(col_max, kMaxSlabColumns, 0u);
    const int64_t width = std::min(cols, g1 * kColumnChunk) - g0 * kColumnChunk;
    auto slab_task = [&](int64_t slab, int64_t c, ColumnsTask::Split split, uint32_t* maxima) {
      ColumnsTask t = tasks.at(slab * slab_h, std::min(slab_h, rows - slab * slab_h), c);
      t.split = split;
      t.col_max = maxima;
      t.col_max_c0 = g0 * kColumnChunk;
      t.writes_scales = slab == 0;
      k.columns(j, t);
    };
#pragma omp parallel num_threads(threads)
    {
      // This thread's column maxima, max-ed into the band's once after its last slab.
      alignas(64) uint32_t mine[kMaxSlabColumns];
      std::fill_n(mine, width, 0u);
#pragma omp for collapse(2) schedule(static) nowait
      for (int64_t slab = 0; slab < slabs; ++slab)
        for (int64_t c = g0; c < g1; ++c) slab_task(slab, c, ColumnsTask::Split::maxima, mine);
      max_into_shared(mine, width, col_max);
#pragma omp barrier
#pragma omp for collapse(2) schedule(static)
      for (int64_t slab = 0; slab < slabs; ++slab)
        for (int64_t c = g0; c < g1; ++c) slab_task(slab, c, ColumnsTask::Split::encode, col_max);
    }
  }
}

// Rows [r0, r0 + h) of a 1 x block_cols grid: every row has scales of its own, so any split of
// the rows gives the bits of quantize_bands, whose row calls (Kernels::rows for short rows, flat
// rows for the others) this makes for the range.
void quantize_row_range(const Kernels& k, const Job& j, const Tensor& x, const QuantizeOutputs& out,
                        int64_t r0, int64_t h, int64_t block_cols, Stats& st) {
  const int64_t cols = x.cols(), scale_cols = (cols + block_cols - 1) / block_cols;
  const bool by_rows = short_rows(k, j, cols, 1, block_cols);
  const int64_t step =
      by_rows ? std::max<int64_t>(1, kFlatRow / cols) : rows_per_flat_row(h, cols, 1, block_cols);
  const size_t in_size = dtype_size(x.dtype), scale_size = dtype_size(out.scale_inv.dtype);
  for (int64_t r = r0; r < r0 + h; r += step) {
    const int64_t n = std::min(step, r0 + h - r);
    const void* xr = byte_offset(x.data, r * cols, in_size);
    void* scales = const_cast<char*>(byte_offset(out.scale_inv.data, r * scale_cols, scale_size));
    uint8_t* codes = out.data.as<uint8_t>() + r * cols;
    Stats s;
    if (by_rows) {
      k.rows(j, xr, n, cols, block_cols, codes, scales, &s);
    } else {
      k.band(j, xr, 1, cols * n, block_cols, codes, scales, &s);
    }
    st.amax_bits = std::max(st.amax_bits, s.amax_bits);
    st.saturated += s.saturated;
    st.flushed += s.flushed;
  }
}

// Whether quantize_rows_and_columns takes the call: a 1xN grid with the column copy, whose one
// band's columns fit the shared maxima.
bool rows_and_columns(const Tensor& x, const QuantizeOutputs& out, int64_t block_rows) {
  return block_rows == 1 && !out.data_t.empty() && out.data_t_in_x_layout &&
         x.cols() <= kMaxSlabColumns;
}

// A 1xN grid's codes and its column copy in one parallel region, each task quantizing its rows
// and then, while they are still in cache, their column maxima (and codes): quantize_bands and
// quantize_columns read x from memory twice and wake the threads twice. Bands of xᵀ's blocks
// (block, MX: block_h rows of one column) go one to a task; the row recipe's single band is cut
// into slabs of rows that max their column maxima into one shared row, and encode after the
// barrier. The same kernels on the same rows as the two passes: the same bits, whatever the
// thread count.
void quantize_rows_and_columns(const Kernels& k, const Job& j, const Tensor& x,
                               const QuantizeOutputs& out, ScaleGrid grid, int64_t block_cols,
                               Stats& st) {
  const int64_t rows = x.rows(), cols = x.cols();
  Job jc = j;
  jc.count = false;  // counts are for data only
  const ColumnTasks tasks(x, out, grid);
  const int64_t block_h = tasks.block_h, chunks = tasks.chunks, bands = tasks.base.bands;
  const bool parallel = rows * cols > kParallelMin;
  uint32_t amax_bits = 0;
  uint64_t saturated = 0, flushed = 0;
  if (bands > 1 || !parallel) {
#pragma omp parallel for schedule(static) reduction(max : amax_bits) \
    reduction(+ : saturated, flushed) if (parallel)
    for (int64_t band = 0; band < bands; ++band) {
      const int64_t r0 = band * block_h, h = std::min(block_h, rows - r0);
      Stats s;
      quantize_row_range(k, j, x, out, r0, h, block_cols, s);
      amax_bits = std::max(amax_bits, s.amax_bits);
      saturated += s.saturated;
      flushed += s.flushed;
      for (int64_t c = 0; c < chunks; ++c) k.columns(jc, tasks.at(r0, h, c));
    }
    st = {amax_bits, saturated, flushed};
    return;
  }
  // One band: about four slabs a thread, of at least 16 rows.
  const int threads = omp_get_max_threads();
  const int64_t slab_h = std::max<int64_t>(16, (rows + 4 * threads - 1) / (4 * threads));
  const int64_t slabs = (rows + slab_h - 1) / slab_h;
  alignas(64) uint32_t col_max[kMaxSlabColumns];
  std::fill_n(col_max, cols, 0u);
  auto slab_task = [&](int64_t slab, int64_t c, ColumnsTask::Split split, uint32_t* maxima) {
    ColumnsTask t = tasks.at(slab * slab_h, std::min(slab_h, rows - slab * slab_h), c);
    t.split = split;
    t.col_max = maxima;
    t.writes_scales = slab == 0;
    return t;
  };
#pragma omp parallel num_threads(threads)
  {
    // This thread's column maxima, max-ed into the band's once after its last slab: a
    // compare-and-swap per column per slab on the shared row took most of a 512 x 64 copy's time
    // on two threads (docs/perf/cpu-step.md, twenty-fourth session).
    alignas(64) uint32_t mine[kMaxSlabColumns];
    std::fill_n(mine, cols, 0u);
#pragma omp for schedule(static) reduction(max : amax_bits) reduction(+ : saturated, flushed) nowait
    for (int64_t slab = 0; slab < slabs; ++slab) {
      Stats s;
      quantize_row_range(k, j, x, out, slab * slab_h, std::min(slab_h, rows - slab * slab_h),
                         block_cols, s);
      amax_bits = std::max(amax_bits, s.amax_bits);
      saturated += s.saturated;
      flushed += s.flushed;
      for (int64_t c = 0; c < chunks; ++c) {
        k.columns(jc, slab_task(slab, c, ColumnsTask::Split::maxima, mine));
      }
    }
    max_into_shared(mine, cols, col_max);
#pragma omp barrier
#pragma omp for collapse(2) schedule(static)
    for (int64_t slab = 0; slab < slabs; ++slab)
      for (int64_t c = 0; c < chunks; ++c)
        k.columns(jc, slab_task(slab, c, ColumnsTask::Split::encode, col_max));
  }
  st = {amax_bits, saturated, flushed};
}

// wide = data's codes widened to bf16, in chunks over the threads (the grids other than per
// tensor, whose band loops do not write wide themselves).
void widen_codes(const Tensor& data, uint16_t* wide) {
  const int64_t n = data.numel();
  const auto* codes = data.as<const uint8_t>();
  const Fp8ToBf16 widen = fp8_to_bf16(data.dtype);
  const int64_t chunk = chunk_size(n), chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk;
    widen(codes + begin, wide + begin, std::min(chunk, n - begin));
  }
}

// FP8 -> f32 tables from the scalar decoders.
const std::array<float, 256>& decode_table(DType fp8) {
  static const auto tables = [] {
    std::array<std::array<float, 256>, 2> t;
    for (int v = 0; v < 256; ++v) {
      t[0][v] = e4m3_to_f32(static_cast<uint8_t>(v));
      t[1][v] = e5m2_to_f32(static_cast<uint8_t>(v));
    }
    return t;
  }();
  return tables[fp8 == DType::e4m3 ? 0 : 1];
}

}  // namespace

void quantize(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& o) {
  const Kernels& k = pick_kernels();
  const Job j{x.dtype == DType::bf16,
              out.data.dtype == DType::e4m3,
              o.overflow == Overflow::saturate,
              !out.counts.empty(),
              o.grid.e8m0,
              o.power_of_two_scales,
              static_cast<float>(dtype_info(out.data.dtype).max_finite)};
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t block_rows = block_size(o.grid.block_rows, rows);
  const int64_t block_cols = block_size(o.grid.block_cols, cols);
  Stats st;
  const bool per_tensor = block_rows == rows && block_cols == cols;
  const bool with_columns = !per_tensor && rows_and_columns(x, out, block_rows);
  if (per_tensor) {
    quantize_per_tensor(k, j, x, out, o, st);  // writes wide too
  } else {
    if (with_columns) {
      quantize_rows_and_columns(k, j, x, out, o.grid, block_cols, st);
    } else {
      quantize_bands(k, j, x, out, block_rows, block_cols, st);
    }
    if (!out.wide.empty()) widen_codes(out.data, out.wide.as<uint16_t>());
  }
  if (!out.data_t.empty() && !with_columns) {
    if (out.data_t_in_x_layout) {
      quantize_columns(k, j, x, out, o.grid);
    } else {
      quantize_transposed(k, j, x, out, o.grid);
    }
  }
  if (!out.amax.empty()) out.amax.as<float>()[0] = amax_value(st.amax_bits);
  if (!out.counts.empty()) {
    out.counts.as<int32_t>()[0] = static_cast<int32_t>(std::min<uint64_t>(st.saturated, INT32_MAX));
    out.counts.as<int32_t>()[1] = static_cast<int32_t>(std::min<uint64_t>(st.flushed, INT32_MAX));
  }
}

void dequantize(const Tensor& data, const Tensor& scale_inv, ScaleGrid grid, const Tensor& y) {
  const int64_t rows = data.rows(), cols = data.cols();
  const int64_t block_rows = block_size(grid.block_rows, rows);
  const int64_t block_cols = block_size(grid.block_cols, cols);
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  const float* table = decode_table(data.dtype).data();
  const auto* d = data.as<uint8_t>();
  const bool to_bf16 = y.dtype == DType::bf16;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < scale_cols; ++b) {
      const int64_t index = r / block_rows * scale_cols + b;
      const float s =
          grid.e8m0 ? e8m0_to_f32(scale_inv.as<uint8_t>()[index]) : scale_inv.as<float>()[index];
      const int64_t begin = r * cols + b * block_cols;
      const int64_t end = r * cols + std::min(cols, (b + 1) * block_cols);
      if (to_bf16) {
        auto* out = y.as<uint16_t>();
        for (int64_t i = begin; i < end; ++i) out[i] = f32_to_bf16(table[d[i]] * s);
      } else {
        auto* out = y.as<float>();
        for (int64_t i = begin; i < end; ++i) out[i] = table[d[i]] * s;
      }
    }
  }
}

}  // namespace octet::kernels::cpu
