// kernels/cuda/quantize_tensor.cu: the streaming quantize kernels: the per-tensor
// amax pass, the per-tensor cast without a transposed copy, and per-row scales.
// Each reads x with 16-byte loads (element loads where rows are not aligned) and
// reduces its amax and counts through the call's Scratch (quantize_device.cuh).
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quantize_device.cuh"

namespace octet::kernels::cuda::qz {
namespace {

// Vectors per thread per loop trip: all loads are issued before the first use, so
// each thread keeps 64 bytes in flight.
constexpr int kUnroll = 4;
// Rows up to this many vectors (of 16 bytes) per thread stay in registers between
// the amax and the cast of the row; longer ones are read twice (from L1/L2).
constexpr int kRowVecs = 4;

// Blocks covering `n` items at `per_block` per block in one round (grid-stride loops
// cover the rest past the cap).
unsigned one_round(int64_t n, int64_t per_block) {
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < (1 << 30) ? blocks : (1 << 30)));
}

struct FlatArgs {
  const void* x;
  int64_t n;
  uint8_t* data;       // null in the amax pass
  const float* scale;  // the cast pass's scale
  bool vec;            // x 16-byte aligned (and data aligned for the codes of a vector)
  bool reverse;        // walk the tensor from its end (the amax pass left it in L2)
  bool reduce_amax;
  Codec codec;
  Finish finish;
};

// One pass over x as a flat array: the amax (data == null) or the cast. Block b
// covers kUnroll * kThreads consecutive vectors, kThreads at a time (coalesced); the
// elements past the last whole vector (or all, when unaligned) go one per thread.
template <class In, bool kCount>
__global__ void __launch_bounds__(kThreads) flat_kernel(FlatArgs a) {
  constexpr int V = 16 / sizeof(In);
  const bool cast = a.data != nullptr;
  const float scale = cast ? *a.scale : 1.0f;
  const int64_t nvec = a.vec ? a.n / V : 0;
  const int64_t block = a.reverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kUnroll * kThreads;
  uint32_t m = 0;
  unsigned saturated = 0, flushed = 0;
  for (int64_t base = block * kUnroll * kThreads; base < nvec; base += step) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      raw[u] = i < nvec ? __ldg(static_cast<const uint4*>(a.x) + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      if (a.reduce_amax) m = max(m, vec_amax<In>(raw[u]));
      if (cast && i < nvec) {
        const uint2 w = encode_vec<In, kCount>(raw[u], scale, a.codec, saturated, flushed);
        store_codes<In>(a.data, 1, a.n, 0, i * V, w, true);
      }
    }
  }
  const int64_t threads = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = nvec * V + block * kThreads + threadIdx.x; i < a.n; i += threads) {
    const uint32_t b = sizeof(In) == 2 ? uint32_t{static_cast<const uint16_t*>(a.x)[i]} << 16
                                       : static_cast<const uint32_t*>(a.x)[i];
    m = max(m, b & 0x7FFFFFFFu);
    if (cast) {
      const uint32_t xb[4] = {b, 0, 0, 0};
      unsigned sat = 0, fl = 0;
      a.data[i] = static_cast<uint8_t>(encode4<kCount>(xb, scale, a.codec, sat, fl));
      saturated += sat;
      flushed += fl;
    }
  }
  block_finish(a.finish, a.codec, a.reduce_amax ? m : 0, saturated, flushed);
}

struct RowArgs {
  const void* x;
  int64_t rows, cols;
  uint8_t* data;
  float* scale_inv;   // [rows]
  bool vec;           // rows 16-byte aligned in x, V-byte aligned in data
  bool warp_per_row;  // else one block per row
  Codec codec;
  Finish finish;
};

// Per-row scales: a group of G threads (a warp, or the block for long rows) per row:
// the row's amax, its scale, then the cast, from registers when the row fits in
// kRowVecs vectors per thread, else by reading the row again.
template <class In, bool kCount>
__global__ void __launch_bounds__(kThreads) row_kernel(RowArgs a) {
  constexpr int V = 16 / sizeof(In);
  __shared__ uint32_t s_warp[kThreads / 32];
  const int G = a.warp_per_row ? 32 : kThreads;
  const int rows_per_block = kThreads / G;
  const int t = threadIdx.x % G;
  const int64_t nvec = (a.cols + V - 1) / V;
  const bool resident = nvec <= static_cast<int64_t>(G) * kRowVecs;
  uint32_t m_all = 0;
  unsigned saturated = 0, flushed = 0;
  // row0 is the same for every thread of a block, so trips and barriers are uniform.
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * rows_per_block;
  for (int64_t row0 = first; row0 < a.rows; row0 += stride) {
    const int64_t r = row0 + threadIdx.x / G;  // may be >= rows: loads give zeros, no stores
    uint4 raw[kRowVecs];
    uint32_t m = 0;
    for (int64_t v0 = 0; v0 < nvec; v0 += static_cast<int64_t>(G) * kRowVecs) {
#pragma unroll
      for (int k = 0; k < kRowVecs; ++k) {
        const int64_t v = v0 + k * G + t;
        raw[k] =
            v < nvec ? load_vec<In>(a.x, a.rows, a.cols, r, v * V, a.vec) : make_uint4(0, 0, 0, 0);
        m = max(m, vec_amax<In>(raw[k]));
      }
    }
    m = warp_max(m);
    if (!a.warp_per_row) {
      if (threadIdx.x % 32 == 0) s_warp[threadIdx.x / 32] = m;
      __syncthreads();
      for (int w = 0; w < kThreads / 32; ++w) m = max(m, s_warp[w]);
      __syncthreads();  // s_warp is written again by the next row
    }
    m_all = max(m_all, m);
    const float scale = block_scale_of(m, a.codec, a.scale_inv, r, t == 0 && r < a.rows);
    for (int64_t v0 = 0; v0 < nvec; v0 += static_cast<int64_t>(G) * kRowVecs) {
#pragma unroll
      for (int k = 0; k < kRowVecs; ++k) {
        const int64_t v = v0 + k * G + t;
        if (v >= nvec) continue;
        if (!resident) raw[k] = load_vec<In>(a.x, a.rows, a.cols, r, v * V, a.vec);
        const uint2 w = encode_vec<In, kCount>(raw[k], scale, a.codec, saturated, flushed);
        store_codes<In>(a.data, a.rows, a.cols, r, v * V, w, a.vec);
      }
    }
  }
  block_finish(a.finish, a.codec, m_all, saturated, flushed);
}

template <class In>
void launch_flat(const FlatArgs& a, bool count, unsigned blocks) {
  if (count) {
    launch_kernel(flat_kernel<In, true>, blocks, kThreads, 0, stream(), a);
  } else {
    launch_kernel(flat_kernel<In, false>, blocks, kThreads, 0, stream(), a);
  }
}

FlatArgs flat_args(const Call& c) {
  FlatArgs a{};
  a.x = c.x;
  a.n = c.rows * c.cols;
  a.vec = aligned(c.x, 16);
  a.codec = c.codec;
  a.finish.scratch = c.scratch;
  return a;
}

unsigned flat_blocks(const Call& c) {
  const int64_t v = c.bf16 ? 8 : 4;
  return one_round((c.rows * c.cols + v - 1) / v, int64_t{kUnroll} * kThreads);
}

}  // namespace

void launch_amax(const Call& c) {
  FlatArgs a = flat_args(c);
  a.reduce_amax = true;
  a.finish.amax = c.amax;
  a.finish.tensor_scale_inv = static_cast<float*>(c.scale_inv);
  a.finish.tensor_scale_inv_t = static_cast<float*>(c.scale_inv_t);
  // Forward order: the tensor's end is what stays in L2 for the reversed cast pass.
  if (c.bf16) {
    launch_flat<uint16_t>(a, false, flat_blocks(c));
  } else {
    launch_flat<uint32_t>(a, false, flat_blocks(c));
  }
  OCTET_CUDA_CHECK_LAUNCH("quantize");
}

void launch_tensor_cast(const Call& c, const float* scale, bool reverse) {
  FlatArgs a = flat_args(c);
  a.data = c.data;
  a.scale = scale;
  a.vec = a.vec && aligned(c.data, c.bf16 ? 8 : 4);
  a.reverse = reverse;
  a.reduce_amax = c.given != nullptr && c.amax != nullptr;
  a.finish.counts = c.counts;
  if (c.given != nullptr) {
    a.finish.amax = c.amax;
    a.finish.given_scale = c.given;
    a.finish.tensor_scale_inv = static_cast<float*>(c.scale_inv);
  }
  if (c.bf16) {
    launch_flat<uint16_t>(a, c.counts != nullptr, flat_blocks(c));
  } else {
    launch_flat<uint32_t>(a, c.counts != nullptr, flat_blocks(c));
  }
  OCTET_CUDA_CHECK_LAUNCH("quantize");
}

void launch_rows(const Call& c) {
  RowArgs a{};
  const int v = c.bf16 ? 8 : 4;
  a.x = c.x;
  a.rows = c.rows;
  a.cols = c.cols;
  a.data = c.data;
  a.scale_inv = static_cast<float*>(c.scale_inv);
  a.vec = aligned(c.x, 16) && c.cols % v == 0 && aligned(c.data, static_cast<uintptr_t>(v));
  const int64_t nvec = (c.cols + v - 1) / v;
  a.warp_per_row = nvec <= 32 * kRowVecs;
  a.codec = c.codec;
  a.finish.scratch = c.scratch;
  a.finish.amax = c.amax;
  a.finish.counts = c.counts;
  const unsigned blocks = one_round(c.rows, a.warp_per_row ? kThreads / 32 : 1);
  if (c.bf16) {
    if (c.counts) {
      launch_kernel(row_kernel<uint16_t, true>, blocks, kThreads, 0, stream(), a);
    } else {
      launch_kernel(row_kernel<uint16_t, false>, blocks, kThreads, 0, stream(), a);
    }
  } else {
    if (c.counts) {
      launch_kernel(row_kernel<uint32_t, true>, blocks, kThreads, 0, stream(), a);
    } else {
      launch_kernel(row_kernel<uint32_t, false>, blocks, kThreads, 0, stream(), a);
    }
  }
  OCTET_CUDA_CHECK_LAUNCH("quantize");
}

}  // namespace octet::kernels::cuda::qz
