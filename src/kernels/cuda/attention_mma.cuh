// kernels/cuda/attention_mma.cuh: what the flash attention kernels share
// (attention_flash_forward.cu, attention_flash_backward.cu): tile shapes, parameters,
// the operand fragments of a shared-memory tile (ldmatrix and mma.sync of ptx.cuh), the
// loads of tiles and row statistics, and where a block of queries works. CUDA only; internal to
// kernels/cuda. defines: flash::Tiles, flash::Params, flash::load_a, flash::load_b_by_rows,
//          flash::load_b_by_cols, flash::rows_times_rows, flash::acc_times_tile,
//          flash::load_tile, flash::load_lse, flash::row_stats, flash::QueryBlock,
//          flash::query_block, flash::launch, flash::params
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ptx.cuh"

namespace octet::kernels::cuda::flash {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLn2 = 0.6931471805599453;

// Tile shapes. Each warp owns 16 rows (one MMA row tile) of the block's queries (forward,
// dq) or keys (dk/dv), so a block covers 64 of them. The tile of the other side is 64
// wide, or 32 for head_dim 128 in the backward kernels, where the 2 x 64 fp32
// accumulators of a warp's rows (dq and its two operands; dk and dv) leave room for no more.
template <int HD>
struct Tiles {
  static constexpr int rows = 16 * kWarps;              // queries (forward, dq) or keys (dk/dv)
  static constexpr int fwd_keys = 64;                   // keys per forward tile
  static constexpr int bwd_cols = HD == 128 ? 32 : 64;  // keys (dq) or queries (dk/dv) per tile
  // Shared-memory row: 16 bytes of padding shift consecutive rows by 4 banks, so the 8
  // rows an ldmatrix phase reads (16 bytes each) fall in 32 different banks.
  static constexpr int ld = HD + 8;
  static constexpr int tile_elems(int n) { return n * ld; }
};

struct Params {
  const uint16_t* qkv;  // bf16 [B * S, width]
  const uint16_t* out;  // bf16 [B * S, out_width]: the forward output (read by the backward)
  const uint16_t* dout;
  uint16_t* o;     // forward: out (written)
  uint16_t* dqkv;  // backward: dqkv (written)
  float* lse;      // [B, n_heads, S]: written by the forward, read by the backward
  int64_t width, out_width;
  int seq_len, n_heads, n_kv_heads, group;
  float scale;       // 1 / sqrt(head_dim)
  float scale_log2;  // log2(e) / sqrt(head_dim): scores go to exp2 in one FMA
};

// ---- PTX-free helpers -----------------------------------------------------------------

// Two floats as bf16 (round to nearest even), `lo` in the low half (the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- fragments -----------------------------------------------------------------------
// A tile is `n` rows of HD bf16 in shared memory, `ld` elements apart. The three loaders
// give the operand fragments of mma_bf16 from such a tile.

// A (m16 x k16): rows [row0, row0 + 16), columns [col0, col0 + 16).
template <int HD>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int row0, int col0) {
  const int lane = threadIdx.x & 31;
  // Lanes 8m..8m+7 address the rows of 8x8 matrix m: a[0] rows 0-7 / cols 0-7, a[1] rows
  // 8-15 / cols 0-7, a[2] rows 0-7 / cols 8-15, a[3] rows 8-15 / cols 8-15.
  const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = col0 + (lane >> 4) * 8;
  ldmatrix_x4(a, smem_address(tile + row * Tiles<HD>::ld + col));
}

// Two B fragments (k16 x n8) where n runs along the tile's rows and k along its columns
// (the tile holds B transposed, as K does for S = Q K^T): b[0], b[1] for n = rows
// [row0, row0 + 8), b[2], b[3] for rows [row0 + 8, row0 + 16); k = columns [col0, col0 + 16).
template <int HD>
__device__ __forceinline__ void load_b_by_rows(uint32_t (&b)[4], const uint16_t* tile, int row0,
                                               int col0) {
  const int lane = threadIdx.x & 31;
  const int row = row0 + (lane & 7) + (lane >> 4) * 8;
  const int col = col0 + ((lane >> 3) & 1) * 8;
  ldmatrix_x4(b, smem_address(tile + row * Tiles<HD>::ld + col));
}

// Two B fragments (k16 x n8) where k runs along the tile's rows and n along its columns
// (as V for O = P V): k = rows [row0, row0 + 16); b[0], b[1] for n = columns
// [col0, col0 + 8), b[2], b[3] for columns [col0 + 8, col0 + 16). ldmatrix.trans hands
// each lane the two k-consecutive elements the B layout wants.
template <int HD>
__device__ __forceinline__ void load_b_by_cols(uint32_t (&b)[4], const uint16_t* tile, int row0,
                                               int col0) {
  const int lane = threadIdx.x & 31;
  const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = col0 + (lane >> 4) * 8;
  ldmatrix_x4_trans(b, smem_address(tile + row * Tiles<HD>::ld + col));
}

// The A fragment (bf16) of 16 accumulator columns held as two n8 blocks c0, c1: the
// accumulator layout of a row tile is the A layout of the next product (P V, dS K, ...).
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                         const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// acc += A B over k = HD for a warp's 16 rows: A from `a_tile` rows [a_row0, +16), B^T
// from `b_tile` rows [0, N) (acc has N / 8 blocks). S = Q K^T, dP = dO V^T and their
// transposes in the dk/dv kernel are all this product.
template <int HD, int N>
__device__ __forceinline__ void rows_times_rows(float (&acc)[N / 8][4], const uint16_t* a_tile,
                                                int a_row0, const uint16_t* b_tile) {
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    uint32_t a[4];
    load_a<HD>(a, a_tile, a_row0, kk * 16);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t b[4];
      load_b_by_rows<HD>(b, b_tile, np * 16, kk * 16);
      mma_bf16(acc[2 * np], a, b[0], b[1]);
      mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc += A B where A is the warp's 16 x N accumulator `c` (rounded to bf16) and B the
// tile's N x HD rows: O += P V, dq += dS K, dv += P^T dO, dk += dS^T Q.
template <int HD, int N>
__device__ __forceinline__ void acc_times_tile(float (&acc)[HD / 8][4], const float (&c)[N / 8][4],
                                               const uint16_t* b_tile) {
#pragma unroll
  for (int kc = 0; kc < N / 16; ++kc) {
    uint32_t a[4];
    acc_to_a(a, c[2 * kc], c[2 * kc + 1]);
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      uint32_t b[4];
      load_b_by_cols<HD>(b, b_tile, kc * 16, dp * 16);
      mma_bf16(acc[2 * dp], a, b[0], b[1]);
      mma_bf16(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// ---- global <-> shared ----------------------------------------------------------------

// Starts copying rows [row0, row0 + N) of one head (HD bf16 from `src`, rows `ld` apart;
// `src` points at row 0 of the sequence) into `tile`; rows at or past seq_len are zeros,
// so that padding keys and queries contribute finite values that the masks then drop.
template <int HD, int N>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* src, int64_t ld, int row0,
                                          int seq_len) {
  constexpr int kPieces = HD / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < N * kPieces; i += kThreads) {
    const int r = i / kPieces, piece = i % kPieces;
    const bool valid = row0 + r < seq_len;
    const uint16_t* from = valid ? src + (row0 + r) * ld + piece * 8 : src;
    cp_async_16(smem_address(tile + r * Tiles<HD>::ld + piece * 8), from, valid);
  }
}

// Starts copying the saved lse of the N queries [q0, q0 + N) of q head h into `lse`
// (threads 0 .. N - 1, 4 bytes each); rows past the sequence get 0, as their zero q and
// dout rows make every product they enter 0.
template <int N>
__device__ __forceinline__ void load_lse(float* lse, const Params& p, int b, int h, int q0) {
  static_assert(N <= kThreads, "one thread per row");
  const int r = threadIdx.x;
  if (r >= N) return;
  const bool valid = q0 + r < p.seq_len;
  const float* from = p.lse + (valid ? (int64_t{b} * p.n_heads + h) * p.seq_len + q0 + r : 0);
  cp_async_4(smem_address(lse + r), from, valid);
}

__device__ __forceinline__ float dot8_bf16(uint4 x, uint4 y) {
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum += __uint_as_float(xs[i] << 16) * __uint_as_float(ys[i] << 16);
    sum += __uint_as_float(xs[i] & 0xFFFF0000u) * __uint_as_float(ys[i] & 0xFFFF0000u);
  }
  return sum;
}

// For the N query rows of staged dO and O tiles: d[r] = D = dout_r . out_r (fp32), and
// the staged lse[r] scaled in place to log2 units. Threads share rows in groups of
// kThreads / N neighbouring lanes, reduced by shuffles. Call with the tiles complete
// and no warp reading d or lse (between barriers).
template <int HD, int N>
__device__ __forceinline__ void row_stats(const uint16_t* tdo, const uint16_t* to, float* lse,
                                          float* d) {
  constexpr int kPerRow = kThreads / N;
  static_assert(kPerRow == 2 || kPerRow == 4, "2 or 4 threads per row");
  constexpr int kPieces = HD / 8 / kPerRow;  // 16-byte pieces of a row per thread
  const int r = threadIdx.x / kPerRow, part = threadIdx.x % kPerRow;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int col = (part + i * kPerRow) * 8;
    sum += dot8_bf16(*reinterpret_cast<const uint4*>(tdo + r * Tiles<HD>::ld + col),
                     *reinterpret_cast<const uint4*>(to + r * Tiles<HD>::ld + col));
  }
#pragma unroll
  for (int offset = kPerRow / 2; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  if (part == 0) {
    d[r] = sum;
    lse[r] *= kLog2e;
  }
}

// ---- block coordinates ----------------------------------------------------------------

// Where a block of the forward and dq kernels works: one block per (batch b, q head h) x
// BQ queries from q0, grid.y in reverse so that the blocks with the most keys start first.
// g is h's kv head, seq the first row of batch b in qkv, k_src and v_src the keys and
// values of head g in that row, and n_tiles the number of BK-key tiles up to the diagonal.
struct QueryBlock {
  int b, h, g, q0;
  const uint16_t* seq;
  const uint16_t* k_src;
  const uint16_t* v_src;
  int n_tiles;
};
template <int HD, int BQ, int BK>
__device__ __forceinline__ QueryBlock query_block(const Params& p) {
  const int S = p.seq_len;
  const int b = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads, g = h / p.group;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;
  const uint16_t* seq = p.qkv + int64_t{b} * S * p.width;
  const uint16_t* k_src = seq + int64_t{p.n_heads + g} * HD;
  const uint16_t* v_src = seq + int64_t{p.n_heads + p.n_kv_heads + g} * HD;
  const int n_tiles = min((q0 + BQ + BK - 1) / BK, (S + BK - 1) / BK);
  return {b, h, g, q0, seq, k_src, v_src, n_tiles};
}

// ---- launches -------------------------------------------------------------------------

// Launches `kernel` with `smem` bytes of dynamic shared memory. Above the default 48 KiB
// that needs the kernel's MaxDynamicSharedMemorySize attribute, a setting per kernel and
// device: it is set the first time a kernel needs more on a device, not at every launch.
template <typename Kernel>
void launch(const char* op, Kernel kernel, dim3 grid, size_t smem, const Params& p) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // (kernel, device) -> bytes
  int device = 0;
  OCTET_CUDA_CHECK(op, cudaGetDevice(&device));
  {
    const std::lock_guard<std::mutex> lock(mutex);
    size_t& bytes = allowed[{reinterpret_cast<const void*>(kernel), device}];
    if (smem > bytes) {
      OCTET_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
      bytes = smem;
    }
  }
  launch_kernel(kernel, grid, kThreads, smem, stream(), p);
  OCTET_CUDA_CHECK_LAUNCH(op);
}

inline Params params(const Tensor& qkv, const AttentionDims& d) {
  Params p{};
  p.qkv = qkv.as<const uint16_t>();
  p.width = (d.n_heads + 2 * d.n_kv_heads) * d.head_dim;
  p.out_width = d.n_heads * d.head_dim;
  p.seq_len = static_cast<int>(d.seq_len);
  p.n_heads = static_cast<int>(d.n_heads);
  p.n_kv_heads = static_cast<int>(d.n_kv_heads);
  p.group = static_cast<int>(d.n_heads / d.n_kv_heads);
  p.scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));  // as the CPU kernel
  p.scale_log2 =
      static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(d.head_dim)));
  return p;
}

inline unsigned blocks_of(int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace octet::kernels::cuda::flash
