// kernels/cuda/layer_io.cuh: what the CUDA layer kernels (embedding, RMSNorm, RoPE, add,
// SwiGLU, cross-entropy) share: f32/bf16 element access in fp32 (bf16 written rounded once
// to nearest even, with core/convert.h, so the bits match the CPU kernels' conversions),
// by a runtime dtype flag or by the element type, groups of elements moved with 16-byte
// accesses where the data allows, and deterministic block sums.
// Internal to kernels/cuda.
// defines: cuda::kGroup, cuda::aligned16, cuda::load1, cuda::store1, cuda::round_as,
//          cuda::to_f32, cuda::store, cuda::Pack, cuda::load8, cuda::store8,
//          cuda::warp_sum, cuda::block_sum
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/convert.h"

namespace octet::kernels::cuda {

// Elements per group: 16 bytes of bf16, two 16-byte halves of f32.
constexpr int kGroup = 8;

// Host side: whether `p` allows 16-byte vector accesses.
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

__device__ __forceinline__ float load1(const void* p, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ void store1(void* p, bool bf16, int64_t i, float v) {
  if (bf16) {
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// v rounded to the activation dtype's precision, kept in fp32 (cpu::round_as).
__device__ __forceinline__ float round_as(bool bf16, float v) {
  return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
}

// The same by element type: bf16 data is handled as its uint16_t bit pattern (as on the CPU).
__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(uint16_t v) {
  return bf16_to_f32(v);
}
__device__ __forceinline__ void store(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store(uint16_t* p, float v) {
  *p = f32_to_bf16(v);
}

// N consecutive elements moved as one access (16 bytes when N = 16 / sizeof(A)).
template <typename A, int N>
struct alignas(sizeof(A) * N) Pack {
  A v[N];
};

__device__ __forceinline__ float bf16_lo(uint32_t u) {
  return f32_from_bits(u << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t u) {
  return f32_from_bits(u & 0xFFFF0000u);
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16(lo)) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
}

// v[k] = p[i + k] for the k < 8 with i + k < end, 0 for the others. `vec` promises that
// p + i is 16-byte aligned whenever the whole group is in range; then the group moves in
// one (bf16) or two (f32) 16-byte loads.
__device__ __forceinline__ void load8(const void* p, bool bf16, int64_t i, int64_t end, bool vec,
                                      float (&v)[kGroup]) {
  if (vec && i + kGroup <= end) {
    if (bf16) {
      const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + i);
      v[0] = bf16_lo(u.x), v[1] = bf16_hi(u.x), v[2] = bf16_lo(u.y), v[3] = bf16_hi(u.y);
      v[4] = bf16_lo(u.z), v[5] = bf16_hi(u.z), v[6] = bf16_lo(u.w), v[7] = bf16_hi(u.w);
    } else {
      const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
      const float4 a = q[0], b = q[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
      v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kGroup; ++k) v[k] = i + k < end ? load1(p, bf16, i + k) : 0.0f;
}

// p[i + k] = v[k] (rounded to the dtype) for the k < 8 with i + k < end; `vec` as in load8.
__device__ __forceinline__ void store8(void* p, bool bf16, int64_t i, int64_t end, bool vec,
                                       const float (&v)[kGroup]) {
  if (vec && i + kGroup <= end) {
    if (bf16) {
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p) + i) =
          make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]),
                     pack_bf16(v[6], v[7]));
    } else {
      float4* q = reinterpret_cast<float4*>(static_cast<float*>(p) + i);
      q[0] = make_float4(v[0], v[1], v[2], v[3]);
      q[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kGroup; ++k) {
    if (i + k < end) store1(p, bf16, i + k, v[k]);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// The sum of v over the block, returned to every thread, in an order fixed by blockDim
// (the same bits on every run). blockDim.x * blockDim.y must be a multiple of 32 (at most
// 1024); every thread of the block must call it (it synchronises). `scratch`: 32 floats
// of shared memory, free again when it returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int warps = (blockDim.x * blockDim.y) / 32;
  v = warp_sum(v);
  if (tid % 32 == 0) scratch[tid / 32] = v;
  __syncthreads();
  // Every warp adds the warp sums (in the same order): no second broadcast is needed.
  float total = tid % 32 < warps ? scratch[tid % 32] : 0.0f;
  total = warp_sum(total);
  __syncthreads();  // scratch may be rewritten once every warp has read it
  return total;
}

}  // namespace octet::kernels::cuda
