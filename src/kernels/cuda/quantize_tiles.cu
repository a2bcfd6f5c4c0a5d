// kernels/cuda/quantize_tiles.cu: quantize in 128x128 tiles, one CUDA block per tile:
// the tile is read once (16-byte loads, into registers), its data written row-wise and
// its transposed copy written through shared memory. One kernel serves per-tensor
// scales with a transposed copy, 128x128 blocks, 1xN tiles (N = 16..128, MX too) and
// per-row scales with per-column ones for the transposed copy.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quantize_device.cuh"

namespace octet::kernels::cuda::qz {
namespace {

constexpr int kTile = 128;
constexpr int kMaxDevices = 64;
static_assert(2 * kTile == kThreads, "one thread per row and per column scale of a tile");

struct TileArgs {
  const void* x;
  int64_t rows, cols;
  int64_t tiles_x;  // tiles across x
  uint8_t* data;
  void* scale_inv;
  uint8_t* data_t;  // null: no transposed copy
  void* scale_inv_t;
  const float* scale;        // mode tensor: the scale
  const uint32_t* row_amax;  // mode rowcol: amax bits of each row [rows]
  const uint32_t* col_amax;  // and of each column [cols]
  TileMode mode;
  int seg;           // mode tiles: N
  bool vec_row;      // x rows 16-byte aligned, data rows aligned to the codes of a vector
  bool vec_t;        // data_t rows 16-byte aligned (rows % 16 == 0)
  bool reverse;      // last tile first (the amax pass left the tensor's end in L2)
  bool reduce_amax;  // the amax output is reduced here
  Codec codec;
  Finish finish;
};

// Row i of the transposed copy, 16 codes from column j: one store when `vec`, else
// byte by byte inside [t_rows, t_cols].
__device__ __forceinline__ void store16(uint8_t* data_t, int64_t t_rows, int64_t t_cols, int64_t i,
                                        int64_t j, uint4 v, bool vec) {
  if (i >= t_rows || j >= t_cols) return;
  uint8_t* p = data_t + i * t_cols + j;
  if (vec) {
    *reinterpret_cast<uint4*>(p) = v;
    return;
  }
#pragma unroll
  for (int b = 0; b < 16; ++b) {
    if (j + b < t_cols) p[b] = static_cast<uint8_t>(vec_word(v, b / 4) >> (8 * (b % 4)));
  }
}

// Stage layouts (both swizzled so that the row-wise writes and the column-wise reads
// below hit 32 different banks per warp):
//  codes:  128 rows x 32 words; word w of row r (codes of columns 4w..4w+3) at
//          r * 32 + (w ^ 16 * ((r / 16) % 2)).
//  values: 128 rows x kTile/V 16-byte units of x; unit u of row r at
//          r * (kTile/V) + (u ^ (r / 16) % 8).

// Transposed copy from staged codes (the same scales as data): thread (cq, k) reads
// words cq of rows 16k..16k+15, transposes them as 4x4 byte blocks, and writes 16
// codes to each of the rows 4cq..4cq+3 of the tile's part of data_t.
__device__ __forceinline__ void transpose_codes(const TileArgs& a, const uint32_t* codes,
                                                int64_t r0, int64_t c0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int cq = lane % 16 + 16 * (warp % 2);
  const int k = lane / 16 + 2 * (warp / 2);
  uint32_t w[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = codes[(16 * k + i) * 32 + (cq ^ ((k & 1) << 4))];
  uint32_t col[4][4];  // col[j][g]: codes of column 4cq + j, rows 16k + 4g .. + 3
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const uint32_t t0 = __byte_perm(w[4 * g], w[4 * g + 1], 0x5140);      // a0 b0 a1 b1
    const uint32_t t1 = __byte_perm(w[4 * g], w[4 * g + 1], 0x7362);      // a2 b2 a3 b3
    const uint32_t t2 = __byte_perm(w[4 * g + 2], w[4 * g + 3], 0x5140);  // c0 d0 c1 d1
    const uint32_t t3 = __byte_perm(w[4 * g + 2], w[4 * g + 3], 0x7362);  // c2 d2 c3 d3
    col[0][g] = __byte_perm(t0, t2, 0x5410);
    col[1][g] = __byte_perm(t0, t2, 0x7632);
    col[2][g] = __byte_perm(t1, t3, 0x5410);
    col[3][g] = __byte_perm(t1, t3, 0x7632);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    store16(a.data_t, a.cols, a.rows, c0 + 4 * cq + j, r0 + 16 * k,
            make_uint4(col[j][0], col[j][1], col[j][2], col[j][3]), a.vec_t);
  }
}

// Transposed copy from staged values, with its own scales (1xN tiles run down the
// columns of x; rowcol: per-column scales): thread (column, k) reads rows 16k..16k+15
// of one column, the 128/N threads of a segment share its amax by shuffles, and the
// thread writes the 16 codes; four columns per warp and trip, 32 per trip.
template <class In>
__device__ __forceinline__ void transpose_values(const TileArgs& a, const uint4* stage,
                                                 const float* col_scale, int64_t r0, int64_t c0) {
  constexpr int V = 16 / sizeof(In), kUnits = kTile / V;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int k = lane % 8;
  const int seg_threads = a.mode == TileMode::tiles ? a.seg / 16 : 1;
  const int64_t segs = a.mode == TileMode::tiles ? (a.rows + a.seg - 1) / a.seg : 0;
  for (int q = 0; q < 4; ++q) {
    const int cl = q * 32 + warp * 4 + lane / 8;
    const In* base = reinterpret_cast<const In*>(stage);
    uint32_t xb[16];
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int unit = (16 * k + i) * kUnits + ((cl / V) ^ k);
      const In e = base[unit * V + cl % V];
      xb[i] = sizeof(In) == 2 ? uint32_t{e} << 16 : uint32_t{e};
      m = max(m, xb[i] & 0x7FFFFFFFu);
    }
    float s;
    if (a.mode == TileMode::tiles) {
      for (int off = seg_threads / 2; off > 0; off /= 2) {
        m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
      }
      const int64_t c = c0 + cl, r = r0 + 16 * k;
      s = block_scale_of(m, a.codec, a.scale_inv_t, c * segs + r / a.seg,
                         k % seg_threads == 0 && c < a.cols && r < a.rows);
    } else {
      s = col_scale[cl];
    }
    unsigned none = 0;
    uint4 v;
    v.x = encode4<false>(xb, s, a.codec, none, none);
    v.y = encode4<false>(xb + 4, s, a.codec, none, none);
    v.z = encode4<false>(xb + 8, s, a.codec, none, none);
    v.w = encode4<false>(xb + 12, s, a.codec, none, none);
    store16(a.data_t, a.cols, a.rows, c0 + cl, r0 + 16 * k, v, a.vec_t);
  }
}

template <class In, bool kCount>
__global__ void __launch_bounds__(kThreads) tile_kernel(TileArgs a) {
  constexpr int V = 16 / sizeof(In);
  constexpr int kRowThreads = kTile / V;             // threads per tile row: 16 | 32
  constexpr int kPassRows = kThreads / kRowThreads;  // rows per pass: 16 | 8
  constexpr int kPasses = kTile / kPassRows;         // 8 | 16 vectors per thread
  OCTET_DYNAMIC_SHARED(uint4, stage);
  __shared__ float s_scale[2 * kTile];  // rowcol: the tile's row scales, then column scales
  __shared__ uint32_t s_warp[kThreads / 32];

  const int64_t tile = a.reverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t ty = tile / a.tiles_x, tx = tile % a.tiles_x;
  const int64_t r0 = ty * kTile, c0 = tx * kTile;
  const int tid = threadIdx.x, vc = tid % kRowThreads, rr = tid / kRowThreads;
  const int64_t col = c0 + vc * V;  // this thread's first column, in every pass
  const TileMode mode = a.mode;
  const bool transposed = a.data_t != nullptr;
  const bool stage_codes = transposed && (mode == TileMode::tensor || mode == TileMode::block);
  const bool stage_values = transposed && !stage_codes;

  if (mode == TileMode::rowcol) {
    const int i = tid % kTile;
    const bool is_row = tid < kTile;
    const int64_t g = (is_row ? r0 : c0) + i;
    const uint32_t bits =
        g < (is_row ? a.rows : a.cols) ? (is_row ? a.row_amax : a.col_amax)[g] : 0;
    s_scale[tid] = scale_from_amax(amax_value(bits), a.codec.fp8_max, 0, a.codec.pow2);
  }

  uint4 raw[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    raw[p] = load_vec<In>(a.x, a.rows, a.cols, r0 + rr + kPassRows * p, col, a.vec_row);
  }
  uint32_t m = 0;
  if (mode == TileMode::block || a.reduce_amax) {
#pragma unroll
    for (int p = 0; p < kPasses; ++p) m = max(m, vec_amax<In>(raw[p]));
  }
  float scale = 1.0f;
  if (mode == TileMode::tensor) scale = *a.scale;
  if (mode == TileMode::block) {
    uint32_t bm = warp_max(m);
    if (tid % 32 == 0) s_warp[tid / 32] = bm;
    __syncthreads();
    for (int w = 0; w < kThreads / 32; ++w) bm = max(bm, s_warp[w]);
    const int64_t tiles_y = (a.rows + kTile - 1) / kTile;
    scale = block_scale_of(bm, a.codec, a.scale_inv, ty * a.tiles_x + tx, tid == 0);
    if (transposed && tid == 0)
      static_cast<float*>(a.scale_inv_t)[tx * tiles_y + ty] = 1.0f / scale;
  }
  if (mode == TileMode::rowcol) __syncthreads();  // s_scale is ready

  const int seg_threads = mode == TileMode::tiles ? a.seg / V : 1;
  const int64_t segs = mode == TileMode::tiles ? (a.cols + a.seg - 1) / a.seg : 0;
  unsigned saturated = 0, flushed = 0;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int rl = rr + kPassRows * p;
    const int64_t r = r0 + rl;
    float s = scale;
    if (mode == TileMode::tiles) {
      // The seg_threads lanes of a 1xN segment are consecutive and aligned in the warp.
      uint32_t sm = vec_amax<In>(raw[p]);
      for (int off = seg_threads / 2; off > 0; off /= 2) {
        sm = max(sm, __shfl_xor_sync(0xFFFFFFFFu, sm, off));
      }
      s = block_scale_of(sm, a.codec, a.scale_inv, r * segs + col / a.seg,
                         vc % seg_threads == 0 && r < a.rows && col < a.cols);
    } else if (mode == TileMode::rowcol) {
      s = s_scale[rl];
    }
    const uint2 w = encode_vec<In, kCount>(raw[p], s, a.codec, saturated, flushed);
    store_codes<In>(a.data, a.rows, a.cols, r, col, w, a.vec_row);
    if (stage_codes) {
      uint32_t* codes = reinterpret_cast<uint32_t*>(stage) + rl * 32;
      const int swizzle = ((rl >> 4) & 1) << 4;
      if constexpr (V == 8) {
        *reinterpret_cast<uint2*>(codes + ((2 * vc) ^ swizzle)) = w;
      } else {
        codes[vc ^ swizzle] = w.x;
      }
    }
    if (stage_values) stage[rl * kRowThreads + (vc ^ ((rl >> 4) & 7))] = raw[p];
  }
  if (transposed) {
    __syncthreads();
    if (stage_codes) {
      transpose_codes(a, reinterpret_cast<const uint32_t*>(stage), r0, c0);
    } else {
      transpose_values<In>(a, stage, s_scale + kTile, r0, c0);
    }
  }
  block_finish(a.finish, a.codec, a.reduce_amax ? m : 0, saturated, flushed);
}

// Per-row scales with a transposed copy, first pass: the amax of every row and every
// column, by atomicMax on their bits (zeroed before), once per row and column of a tile.
template <class In>
__global__ void __launch_bounds__(kThreads)
    rowcol_amax_kernel(const void* x, int64_t rows, int64_t cols, int64_t tiles_x, bool vec,
                       uint32_t* row_amax, uint32_t* col_amax) {
  constexpr int V = 16 / sizeof(In);
  constexpr int kRowThreads = kTile / V, kPassRows = kThreads / kRowThreads;
  constexpr int kPasses = kTile / kPassRows;
  __shared__ uint32_t s_col[kTile];
  const int64_t r0 = blockIdx.x / tiles_x * kTile, c0 = blockIdx.x % tiles_x * kTile;
  const int tid = threadIdx.x, vc = tid % kRowThreads, rr = tid / kRowThreads;
  if (tid < kTile) s_col[tid] = 0;
  uint4 raw[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    raw[p] = load_vec<In>(x, rows, cols, r0 + rr + kPassRows * p, c0 + vc * V, vec);
  }
  uint32_t cm[V] = {};
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    uint32_t rm = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const uint32_t b = elem_bits<In>(raw[p], j) & 0x7FFFFFFFu;
      rm = max(rm, b);
      cm[j] = max(cm[j], b);
    }
#pragma unroll
    for (int off = kRowThreads / 2; off > 0; off /= 2) {
      rm = max(rm, __shfl_xor_sync(0xFFFFFFFFu, rm, off));
    }
    const int64_t r = r0 + rr + kPassRows * p;
    if (vc == 0 && r < rows && rm != 0) atomicMax(row_amax + r, rm);
  }
  __syncthreads();  // s_col is zeroed
  if constexpr (kRowThreads == 16) {
#pragma unroll
    for (int j = 0; j < V; ++j) cm[j] = max(cm[j], __shfl_xor_sync(0xFFFFFFFFu, cm[j], 16));
  }
  if (kRowThreads == 32 || tid % 32 < 16) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (cm[j] != 0) atomicMax(s_col + vc * V + j, cm[j]);
    }
  }
  __syncthreads();
  if (tid < kTile && c0 + tid < cols && s_col[tid] != 0) atomicMax(col_amax + c0 + tid, s_col[tid]);
}

// Last pass of rowcol: the row and column amaxes (bits, in place of scale_inv and
// scale_inv_t) become 1/scale; the amax output is the largest row amax.
__global__ void __launch_bounds__(kThreads)
    rowcol_finish_kernel(uint32_t* row_amax, int64_t rows, uint32_t* col_amax, int64_t cols,
                         Codec c, Finish f) {
  uint32_t m = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < rows + cols;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    uint32_t* slot = i < rows ? row_amax + i : col_amax + (i - rows);
    const uint32_t bits = *slot;
    if (i < rows) m = max(m, bits);
    const float scale = scale_from_amax(amax_value(bits), c.fp8_max, 0, c.pow2);
    *slot = f32_bits(1.0f / scale);
  }
  block_finish(f, c, m, 0, 0);
}

int64_t tiles_of(int64_t n) {
  return (n + kTile - 1) / kTile;
}

// The f32 value stage (64 KiB) needs the opt-in to more than 48 KiB of dynamic shared
// memory, set once per device and kernel (before any CUDA graph capture that uses it).
template <class In, bool kCount>
void allow_large_stage() {
  static std::atomic<bool> done[kMaxDevices] = {};
  int device = 0;
  OCTET_CUDA_CHECK("quantize", cudaGetDevice(&device));
  if (device < kMaxDevices && done[device].load(std::memory_order_acquire)) return;
  OCTET_CUDA_CHECK("quantize", cudaFuncSetAttribute(tile_kernel<In, kCount>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    kTile * kTile * static_cast<int>(sizeof(In))));
  if (device < kMaxDevices) done[device].store(true, std::memory_order_release);
}

template <class In, bool kCount>
void launch_tile_kernel(const TileArgs& a, unsigned blocks, size_t smem) {
  if (smem > 48 * 1024) allow_large_stage<In, kCount>();
  launch_kernel(tile_kernel<In, kCount>, blocks, kThreads, smem, stream(), a);
}

template <class In>
void launch_tile_kernel(const TileArgs& a, bool count, unsigned blocks, size_t smem) {
  if (count) {
    launch_tile_kernel<In, true>(a, blocks, smem);
  } else {
    launch_tile_kernel<In, false>(a, blocks, smem);
  }
}

}  // namespace

void launch_tiles(const Call& c, TileMode mode, int seg, const float* scale, bool reverse) {
  const int64_t in_size = c.bf16 ? 2 : 4, v = 16 / in_size;
  const int64_t tiles = tiles_of(c.rows) * tiles_of(c.cols);
  OCTET_CHECK(tiles <= 0x7FFFFFFF, "quantize", "[", c.rows, ", ", c.cols,
              "] has too many 128x128 tiles for one launch");
  TileArgs a{};
  a.x = c.x;
  a.rows = c.rows;
  a.cols = c.cols;
  a.tiles_x = tiles_of(c.cols);
  a.data = c.data;
  a.scale_inv = c.scale_inv;
  a.data_t = c.data_t;
  a.scale_inv_t = c.scale_inv_t;
  a.scale = scale;
  a.mode = mode;
  a.seg = seg;
  a.vec_row = aligned(c.x, 16) && (c.cols * in_size) % 16 == 0 &&
              aligned(c.data, static_cast<uintptr_t>(v));
  a.vec_t = c.data_t != nullptr && aligned(c.data_t, 16) && c.rows % 16 == 0;
  a.reverse = reverse;
  a.codec = c.codec;
  a.finish.scratch = c.scratch;
  a.finish.counts = c.counts;
  if (mode == TileMode::rowcol) {
    a.row_amax = static_cast<const uint32_t*>(c.scale_inv);
    a.col_amax = static_cast<const uint32_t*>(c.scale_inv_t);
  } else if (mode != TileMode::tensor || c.given != nullptr) {
    a.finish.amax = c.amax;  // current per-tensor scaling: written by the amax pass
  }
  if (mode == TileMode::tensor && c.given != nullptr) {
    a.finish.given_scale = c.given;
    a.finish.tensor_scale_inv = static_cast<float*>(c.scale_inv);
    a.finish.tensor_scale_inv_t = static_cast<float*>(c.scale_inv_t);
  }
  a.reduce_amax = a.finish.amax != nullptr;
  size_t smem = 0;
  if (c.data_t != nullptr) {
    const bool codes = mode == TileMode::tensor || mode == TileMode::block;
    smem = codes ? size_t{kTile} * kTile : size_t{kTile} * kTile * in_size;
  }
  const auto blocks = static_cast<unsigned>(tiles);
  if (c.bf16) {
    launch_tile_kernel<uint16_t>(a, c.counts != nullptr, blocks, smem);
  } else {
    launch_tile_kernel<uint32_t>(a, c.counts != nullptr, blocks, smem);
  }
  OCTET_CUDA_CHECK_LAUNCH("quantize");
}

void launch_rows_transposed(const Call& c) {
  const int64_t in_size = c.bf16 ? 2 : 4;
  auto* row_amax = static_cast<uint32_t*>(c.scale_inv);
  auto* col_amax = static_cast<uint32_t*>(c.scale_inv_t);
  OCTET_CUDA_CHECK("quantize", cudaMemsetAsync(row_amax, 0, c.rows * 4, stream()));
  OCTET_CUDA_CHECK("quantize", cudaMemsetAsync(col_amax, 0, c.cols * 4, stream()));
  const int64_t tiles = tiles_of(c.rows) * tiles_of(c.cols);
  OCTET_CHECK(tiles <= 0x7FFFFFFF, "quantize", "[", c.rows, ", ", c.cols,
              "] has too many 128x128 tiles for one launch");
  const bool vec = aligned(c.x, 16) && (c.cols * in_size) % 16 == 0;
  if (c.bf16) {
    launch_kernel(rowcol_amax_kernel<uint16_t>, static_cast<unsigned>(tiles), kThreads, 0, stream(),
                  c.x, c.rows, c.cols, tiles_of(c.cols), vec, row_amax, col_amax);
  } else {
    launch_kernel(rowcol_amax_kernel<uint32_t>, static_cast<unsigned>(tiles), kThreads, 0, stream(),
                  c.x, c.rows, c.cols, tiles_of(c.cols), vec, row_amax, col_amax);
  }
  OCTET_CUDA_CHECK_LAUNCH("quantize");
  launch_tiles(c, TileMode::rowcol, 0, nullptr, false);
  Finish f;
  f.scratch = c.scratch;
  f.amax = c.amax;
  const int64_t n = c.rows + c.cols;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1024));
  launch_kernel(rowcol_finish_kernel, blocks, kThreads, 0, stream(), row_amax, c.rows, col_amax,
                c.cols, c.codec, f);
  OCTET_CUDA_CHECK_LAUNCH("quantize");
}

}  // namespace octet::kernels::cuda::qz
