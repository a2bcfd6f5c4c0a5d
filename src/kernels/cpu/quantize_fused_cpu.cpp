// kernels/cpu/quantize_fused_cpu.cpp: FP8 quantization of x and its transposed copy in one
// tiled pass over x, in one OpenMP region.

// The two-pass path (kernels/cpu/quantize_cpu.cpp) reads x once for data and twice more for
// the transposed copy (column amaxes, then encode), or encodes data and then transposes it,
// each in a parallel region of its own. Here every kTile x kTile tile of x is encoded twice
// from L1, with its row-wise scales into data and with its column-wise scales into a tile that
// is transposed into data_t. Block amaxes that a tile holds whole (MX, 1x32, 1x64) are taken
// from the tile itself; others (per tensor, per row, 1x128) come from a first pass over x
// into the scale_inv outputs (as amax bits, f32 scales only), turned into 1/scale at the end.
// Same scales, same multipliers, same encoders as the two-pass path: the same bits.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "kernels/cpu/quantize_fused.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/quantize_loops.h"

namespace octet::kernels::cpu {
namespace {

// Tensors up to this many elements run on one thread (as in quantize_cpu.cpp).
constexpr int64_t kParallelElements = int64_t{1} << 16;

// Where a tile's multipliers come from.
enum class Source : uint8_t {
  uniform,  // one scale for the whole tensor
  local,    // block amaxes from the tile (blocks lie within one tile); writes scale_inv
  amax,     // block amax bits from the first pass, in scale_inv (f32 scales)
};

// One kTile x kTile tile of x: rows [r0, r0 + th), columns [c0, c0 + tw).
struct Tile {
  const void* x;
  int64_t rows, cols, r0, th, c0, tw;
  int64_t bc;            // columns of x per row-wise block (data's grid)
  int64_t bh;            // rows of x per column-wise block (data_t's grid)
  int64_t scale_cols;    // data's scale columns: ceil(cols / bc)
  int64_t scale_cols_t;  // data_t's scale columns: ceil(rows / bh)
  Source source;
  float scale;  // Source::uniform
  uint8_t* data;
  uint8_t* data_t;
  void* scale_inv;
  void* scale_inv_t;
};

[[gnu::always_inline]] inline void atomic_max(uint32_t* p, uint32_t v) {
  std::atomic_ref<uint32_t> a(*p);
  uint32_t seen = a.load(std::memory_order_relaxed);
  while (v > seen && !a.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}

// The f32 multiplier of a block whose amax bits the first pass left in its scale_inv slot
// (block_scale's f32 branch, without the store).
[[gnu::always_inline]] inline float scale_of_amax(const Job& j, uint32_t bits) {
  return scale_from_amax(amax_value(bits), j.fp8_max, 0, j.pow2);
}

// First pass: the tile's row-wise and column-wise block amaxes, max-ed into the scale_inv
// outputs (zeroed before), and the tile's amax.
struct AmaxTile {
  static constexpr bool kFormat = false, kCount = false;
  template <class In, bool, bool>
  [[gnu::always_inline]] static uint32_t run(const Job&, const Tile& t) {
    const In* x = static_cast<const In*>(t.x);
    auto* row_amax = static_cast<uint32_t*>(t.scale_inv);
    auto* col_amax = static_cast<uint32_t*>(t.scale_inv_t);
    uint32_t tile_max = 0;
    for (int64_t rb = 0; rb < t.th;) {
      // Rows [rb, re) of the tile share one column-wise block.
      const int64_t band = (t.r0 + rb) / t.bh;
      const int64_t re = std::min(t.th, (band + 1) * t.bh - t.r0);
      alignas(64) uint32_t col_max[kTile] = {};
      for (int64_t r = rb; r < re; ++r) {
        const In* __restrict row = x + (t.r0 + r) * t.cols + t.c0;
        for (int64_t c = 0; c < t.tw; ++c) col_max[c] = std::max(col_max[c], mag_bits(row[c]));
        for (int64_t c = t.c0; c < t.c0 + t.tw;) {
          const int64_t b = c / t.bc, ce = std::min(t.c0 + t.tw, (b + 1) * t.bc);
          const uint32_t m = amax_loop(row + (c - t.c0), ce - c);
          tile_max = std::max(tile_max, m);
          atomic_max(row_amax + (t.r0 + r) * t.scale_cols + b, m);
          c = ce;
        }
      }
      for (int64_t c = 0; c < t.tw; ++c) {
        atomic_max(col_amax + (t.c0 + c) * t.scale_cols_t + band, col_max[c]);
      }
      rb = re;
    }
    return tile_max;
  }
};

// Second pass: the tile encoded into data (row-wise scales, counted) and into data_t
// (column-wise scales). Returns the tile's amax under Source::local (else 0).
struct EncodeTile {
  static constexpr bool kFormat = true, kCount = true;
  template <class In, bool kE4M3, bool kCount>
  [[gnu::always_inline]] static uint32_t run(const Job& j, const Tile& t, Stats* st) {
    const In* x = static_cast<const In*>(t.x);
    uint32_t tile_max = 0;
    // Column-wise multipliers, one row of them per column-wise block in the tile.
    alignas(64) float col_mult[kTile][kTile];
    alignas(64) uint8_t band_of[kTile];
    for (int64_t rb = 0, k = 0; rb < t.th; ++k) {
      const int64_t band = (t.r0 + rb) / t.bh;
      const int64_t re = std::min(t.th, (band + 1) * t.bh - t.r0);
      for (int64_t r = rb; r < re; ++r) band_of[r] = static_cast<uint8_t>(k);
      float* mult = col_mult[k];
      if (t.source == Source::uniform) {
        for (int64_t c = 0; c < t.tw; ++c) mult[c] = t.scale;
      } else if (t.source == Source::amax) {
        const auto* col_amax = static_cast<const uint32_t*>(t.scale_inv_t);
        for (int64_t c = 0; c < t.tw; ++c) {
          mult[c] = scale_of_amax(j, col_amax[(t.c0 + c) * t.scale_cols_t + band]);
        }
      } else {
        alignas(64) uint32_t col_max[kTile] = {};
        for (int64_t r = rb; r < re; ++r) {
          const In* __restrict row = x + (t.r0 + r) * t.cols + t.c0;
          for (int64_t c = 0; c < t.tw; ++c) col_max[c] = std::max(col_max[c], mag_bits(row[c]));
        }
        for (int64_t c = 0; c < t.tw; ++c) {
          mult[c] = block_scale(j, col_max[c], t.scale_inv_t, (t.c0 + c) * t.scale_cols_t + band);
        }
      }
      rb = re;
    }
    alignas(64) uint8_t tile[kTile * kTile];
    if (t.th < kTile || t.tw < kTile) std::memset(tile, 0, sizeof(tile));  // no stray bytes
    for (int64_t r = 0; r < t.th; ++r) {
      const In* __restrict row = x + (t.r0 + r) * t.cols + t.c0;
      uint8_t* __restrict out = t.data + (t.r0 + r) * t.cols + t.c0;
      // Row-wise: one multiplier for the tile's row, or one per element (several blocks).
      const int64_t b0 = t.c0 / t.bc, b1 = (t.c0 + t.tw - 1) / t.bc;
      if (t.source == Source::uniform) {
        encode_loop<In, kE4M3, kCount>(row, out, t.tw, t.scale, j.saturate, *st);
      } else if (b0 == b1 && t.source == Source::amax) {
        const auto* row_amax = static_cast<const uint32_t*>(t.scale_inv);
        const float s = scale_of_amax(j, row_amax[(t.r0 + r) * t.scale_cols + b0]);
        encode_loop<In, kE4M3, kCount>(row, out, t.tw, s, j.saturate, *st);
      } else {
        alignas(64) float mult[kTile];
        for (int64_t c = t.c0; c < t.c0 + t.tw;) {
          const int64_t b = c / t.bc, ce = std::min(t.c0 + t.tw, (b + 1) * t.bc);
          const int64_t index = (t.r0 + r) * t.scale_cols + b;
          float s;
          if (t.source == Source::amax) {
            s = scale_of_amax(j, static_cast<const uint32_t*>(t.scale_inv)[index]);
          } else {
            const uint32_t m = amax_loop(row + (c - t.c0), ce - c);
            tile_max = std::max(tile_max, m);
            s = block_scale(j, m, t.scale_inv, index);
          }
          for (int64_t i = c; i < ce; ++i) mult[i - t.c0] = s;
          c = ce;
        }
        encode_loop<In, kE4M3, kCount>(row, out, t.tw, static_cast<const float*>(mult), j.saturate,
                                       *st);
      }
      // Column-wise, into the tile.
      const float* __restrict cm = col_mult[band_of[r]];
      uint8_t* __restrict codes = tile + r * kTile;
      for (int64_t c = 0; c < t.tw; ++c) codes[c] = encode<kE4M3>(load(row[c]) * cm[c], j.saturate);
    }
    alignas(64) uint8_t tile_t[kTile * kTile];
    transpose_tile(tile, tile_t);
    for (int64_t c = 0; c < t.tw; ++c) {
      std::memcpy(t.data_t + (t.c0 + c) * t.rows + t.r0, tile_t + c * kTile,
                  static_cast<size_t>(t.th));
    }
    return tile_max;
  }
};

// The amax of a contiguous span (per-tensor first pass).
struct AmaxSpan {
  static constexpr bool kFormat = false, kCount = false;
  template <class In, bool, bool>
  [[gnu::always_inline]] static uint32_t run(const Job&, const void* x, int64_t n) {
    return amax_loop(static_cast<const In*>(x), n);
  }
};

struct Kernels {
  uint32_t (*amax_span)(const Job&, const void*, int64_t);
  uint32_t (*amax_tile)(const Job&, const Tile&);
  uint32_t (*encode_tile)(const Job&, const Tile&, Stats*);
};

#define OCTET_QUANTIZE_FUSED_VARIANT(name, attributes)                                      \
  attributes uint32_t fused_amax_span_##name(const Job& j, const void* x, int64_t n) {      \
    return dispatch<AmaxSpan>(j, x, n);                                                     \
  }                                                                                         \
  attributes uint32_t fused_amax_tile_##name(const Job& j, const Tile& t) {                 \
    return dispatch<AmaxTile>(j, t);                                                        \
  }                                                                                         \
  attributes uint32_t fused_encode_tile_##name(const Job& j, const Tile& t, Stats* st) {    \
    return dispatch<EncodeTile>(j, t, st);                                                  \
  }                                                                                         \
  constexpr Kernels kFusedKernels_##name = {fused_amax_span_##name, fused_amax_tile_##name, \
                                            fused_encode_tile_##name};

OCTET_QUANTIZE_FUSED_VARIANT(baseline, )
#if defined(__x86_64__) && defined(__GNUC__)
OCTET_QUANTIZE_FUSED_VARIANT(avx2, __attribute__((target("avx2,fma,f16c,bmi2"))))
OCTET_QUANTIZE_FUSED_VARIANT(
    avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2"))))
#endif
#undef OCTET_QUANTIZE_FUSED_VARIANT

const Kernels& pick_kernels() {
  const Isa isa = usable_isa("quantize");
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::avx512) return kFusedKernels_avx512;
  if (isa == Isa::avx2) return kFusedKernels_avx2;
#endif
  return kFusedKernels_baseline;
}

int64_t block_size(int64_t block, int64_t n) {
  return block == 0 || block > n ? n : block;
}

}  // namespace

bool quantize_fused(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& o) {
  if (out.data_t.empty()) return false;
  const int64_t rows = x.rows(), cols = x.cols();
  const ScaleGrid grid = o.grid;
  // One block over x and one over xᵀ (the grid applied to xᵀ's shape).
  const bool per_tensor =
      block_size(grid.block_rows, rows) == rows && block_size(grid.block_cols, cols) == cols &&
      block_size(grid.block_rows, cols) == cols && block_size(grid.block_cols, rows) == rows;
  Tile base{};
  base.x = x.data;
  base.rows = rows;
  base.cols = cols;
  base.data = out.data.as<uint8_t>();
  base.data_t = out.data_t.as<uint8_t>();
  base.scale_inv = out.scale_inv.data;
  base.scale_inv_t = out.scale_inv_t.data;
  if (per_tensor) {
    if (grid.e8m0) return false;  // one E8M0 block: the two-pass path
    base.bc = cols;
    base.bh = rows;
    base.source = Source::uniform;
  } else {
    if (grid.block_rows != 1) return false;  // NxN and others: the two-pass path
    base.bc = block_size(grid.block_cols, cols);
    base.bh = block_size(grid.block_cols, rows);
    const bool local = kTile % base.bc == 0 && kTile % base.bh == 0;
    if (!local && grid.e8m0) return false;  // no room for amax bits in E8M0 scales
    base.source = local ? Source::local : Source::amax;
  }
  base.scale_cols = (cols + base.bc - 1) / base.bc;
  base.scale_cols_t = (rows + base.bh - 1) / base.bh;

  const Kernels& k = pick_kernels();
  const Job j{x.dtype == DType::bf16,
              out.data.dtype == DType::e4m3,
              o.overflow == Overflow::saturate,
              !out.counts.empty(),
              grid.e8m0,
              o.power_of_two_scales,
              static_cast<float>(dtype_info(out.data.dtype).max_finite)};
  const bool given = !o.given_scale.empty();
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tiles = row_tiles * col_tiles;
  const size_t in_size = dtype_size(x.dtype);
  const int64_t n_scales = base.scale_cols * rows, n_scales_t = base.scale_cols_t * cols;
  auto tile_at = [&](int64_t i) {
    Tile t = base;
    t.r0 = i / col_tiles * kTile;
    t.c0 = i % col_tiles * kTile;
    t.th = std::min(kTile, rows - t.r0);
    t.tw = std::min(kTile, cols - t.c0);
    return t;
  };

  uint32_t amax_bits = 0;
  uint64_t saturated = 0, flushed = 0;
#pragma omp parallel if (rows * cols > kParallelElements)
  {
    // First pass: the amaxes that no tile holds whole.
    if (base.source == Source::uniform && (!given || !out.amax.empty())) {
#pragma omp for schedule(static) reduction(max : amax_bits)
      for (int64_t b = 0; b < row_tiles; ++b) {
        const int64_t r0 = b * kTile, th = std::min(kTile, rows - r0);
        const char* p =
            static_cast<const char*>(x.data) + r0 * cols * static_cast<int64_t>(in_size);
        amax_bits = std::max(amax_bits, k.amax_span(j, p, th * cols));
      }
    } else if (base.source == Source::amax) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n_scales + n_scales_t; ++i) {
        (i < n_scales ? static_cast<uint32_t*>(base.scale_inv)[i]
                      : static_cast<uint32_t*>(base.scale_inv_t)[i - n_scales]) = 0;
      }
#pragma omp for schedule(static) reduction(max : amax_bits)
      for (int64_t i = 0; i < tiles; ++i)
        amax_bits = std::max(amax_bits, k.amax_tile(j, tile_at(i)));
    }
    // The per-tensor scale (every thread computes the same one; one stores it).
    float s = 1.0f;
    if (base.source == Source::uniform) {
      s = given ? o.given_scale.as<float>()[0] : scale_of_amax(j, amax_bits);
#pragma omp single nowait
      {
        out.scale_inv.as<float>()[0] = 1.0f / s;
        out.scale_inv_t.as<float>()[0] = 1.0f / s;
      }
    }
    // Second pass: encode.
#pragma omp for schedule(static) reduction(max : amax_bits) reduction(+ : saturated, flushed)
    for (int64_t i = 0; i < tiles; ++i) {
      Tile t = tile_at(i);
      t.scale = s;
      Stats st;
      amax_bits = std::max(amax_bits, k.encode_tile(j, t, &st));
      saturated += st.saturated;
      flushed += st.flushed;
    }
    // Amax bits become 1/scale.
    if (base.source == Source::amax) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n_scales + n_scales_t; ++i) {
        float* p = i < n_scales ? static_cast<float*>(base.scale_inv) + i
                                : static_cast<float*>(base.scale_inv_t) + (i - n_scales);
        uint32_t bits;
        std::memcpy(&bits, p, sizeof(bits));
        *p = 1.0f / scale_of_amax(j, bits);
      }
    }
  }
  if (!out.amax.empty()) out.amax.as<float>()[0] = amax_value(amax_bits);
  if (!out.counts.empty()) {
    out.counts.as<int32_t>()[0] = static_cast<int32_t>(std::min<uint64_t>(saturated, INT32_MAX));
    out.counts.as<int32_t>()[1] = static_cast<int32_t>(std::min<uint64_t>(flushed, INT32_MAX));
  }
  return true;
}

}  // namespace octet::kernels::cpu
