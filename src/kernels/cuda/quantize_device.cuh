// kernels/cuda/quantize_device.cuh: what the CUDA quantize kernels share: the FP8
// encoder (hardware cvt or the scalar routine of core/convert.h, same bits), 16-byte
// loads and guarded stores, block scales, and the cross-block reduction of the amax
// and the saturation counts; plus the launchers each kernel file provides.
// defines: Scratch, Codec, Finish, Call, encode4, block_scale_of, block_finish,
//          load_vec, store_codes, launch_* (host)
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "kernels/cuda/ptx.cuh"
#include "kernels/quantize.h"

namespace octet::kernels::cuda::qz {

constexpr uint32_t kInfBits = 0x7F800000u;
constexpr uint32_t kQuietNanBits = 0x7FC00000u;
constexpr int kThreads = 256;  // every quantize kernel runs 256-thread blocks

// Whether a pointer is a multiple of `bytes`: the host's check before a kernel's vector loads.
inline bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Cross-block state of one quantize call, in static device memory (kernels never
// allocate). Between calls every field is zero except `scale`: the last block of each
// reducing kernel reads and clears it (block_finish), so calls must be stream-ordered,
// as every octet kernel is (cuda::stream()); quantize() checks that with
// claim_static_scratch (kernels/cuda/scratch.h).
struct Scratch {
  unsigned amax_bits;    // max of |x| as bits (NaN > Inf > finite as unsigned)
  unsigned blocks_done;  // blocks of the running kernel that have added their share
  unsigned long long saturated, flushed;
  float scale;  // per-tensor current scaling: the amax pass leaves the scale here
};

// How values become FP8 codes, fixed for one call.
struct Codec {
  float fp8_max;
  bool e5m2;      // else E4M3
  bool saturate;  // Overflow::saturate
  bool hw;        // cvt.rn.satfinite (saturating mode only), else the scalar routine
  bool e8m0;      // MX: E8M0 scale_inv codes
  bool pow2;      // power_of_two_scales
};

// What the last block of a kernel writes; null pointers are not wanted. With
// tensor_scale_inv set, the per-tensor scale is *given_scale or, without one, the
// scale of the reduced amax, which is also left in Scratch::scale for the cast pass.
struct Finish {
  Scratch* scratch = nullptr;
  float* amax = nullptr;
  int* counts = nullptr;
  float* tensor_scale_inv = nullptr;
  float* tensor_scale_inv_t = nullptr;
  const float* given_scale = nullptr;
  OCTET_HD bool active() const { return amax || counts || tensor_scale_inv; }
};

// One quantize call as the launchers see it (host side; pointers are device memory).
struct Call {
  const void* x;
  bool bf16;
  int64_t rows, cols;
  uint8_t* data;
  void* scale_inv;
  uint8_t* data_t;     // null: no transposed copy
  void* scale_inv_t;   // null with data_t
  float* amax;         // null: not wanted
  int* counts;         // null: not wanted
  const float* given;  // null: current scaling
  Codec codec;
  Scratch* scratch;
};

// ---- host: the launchers of quantize_tensor.cu and quantize_tiles.cu -----------

// Per tensor, current scaling: the amax pass; its last block writes scale_inv (and
// scale_inv_t), the amax and Scratch::scale.
void launch_amax(const Call& c);
// Per tensor, no transposed copy: data = encode(x * scale), scale = *scale (a given
// scale or &Scratch::scale); the amax too when c.given and c.amax; the counts.
void launch_tensor_cast(const Call& c, const float* scale, bool reverse);
// Per row (grid {1, 0}), no transposed copy.
void launch_rows(const Call& c);
// 128x128 tiles: mode tensor (scale from *scale), block (128x128 scales), tiles (1xN
// scales, N = seg in {16, 32, 64, 128}); writes data_t too when c.data_t is set.
enum class TileMode : int { tensor, block, tiles, rowcol };
void launch_tiles(const Call& c, TileMode mode, int seg, const float* scale, bool reverse);
// Per row with the transposed copy (per-column scales for data_t): an amax pass over
// rows and columns, the tile pass, and the conversion of the amaxes into scale_inv.
void launch_rows_transposed(const Call& c);

#if defined(__CUDACC__) || defined(OCTET_CUDASIM)

// ---- device helpers ------------------------------------------------------------

__device__ __forceinline__ uint32_t abs_bits(float v) {
  return f32_bits(v) & 0x7FFFFFFFu;
}

// A NaN amax is stored as one quiet NaN, as on the CPU.
__device__ __forceinline__ float amax_value(uint32_t bits) {
  return f32_from_bits(bits > kInfBits ? kQuietNanBits : bits);
}

// Element j of a 16-byte vector of In (uint16_t: bf16 bits, uint32_t: f32 bits), as f32 bits.
__device__ __forceinline__ uint32_t vec_word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
template <class In>
__device__ __forceinline__ uint32_t elem_bits(const uint4& v, int j) {
  if constexpr (sizeof(In) == 2) {
    const uint32_t w = vec_word(v, j / 2);
    return j % 2 ? (w & 0xFFFF0000u) : (w << 16);
  } else {
    return vec_word(v, j);
  }
}

// max |x| over the vector's elements, as bits.
template <class In>
__device__ __forceinline__ uint32_t vec_amax(const uint4& v) {
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 16 / static_cast<int>(sizeof(In)); ++j) {
    m = max(m, elem_bits<In>(v, j) & 0x7FFFFFFFu);
  }
  return m;
}

// The scalar encoder; a NaN takes the sign of x (x * scale keeps it on the CPU,
// while the GPU's multiply returns a positive canonical NaN).
__device__ __forceinline__ uint32_t encode_soft(uint32_t x_bits, float v, const Codec& c) {
  const Overflow o = c.saturate ? Overflow::saturate : Overflow::nonfinite;
  if (abs_bits(v) > kInfBits) return ((x_bits >> 24) & 0x80u) | (c.e5m2 ? 0x7Eu : 0x7Fu);
  return c.e5m2 ? f32_to_e5m2(v, o) : f32_to_e4m3(v, o);
}

// Two codes (lo in the low byte) by the hardware conversion: round to nearest even,
// finite overflow and infinities to ±max (saturating mode), as the scalar routine;
// only NaN differs (no sign kept, E5M2 0x7F), and encode4 redoes those.
__device__ __forceinline__ uint32_t cvt2(float lo, float hi, bool e5m2) {
  return e5m2 ? cvt_e5m2x2(lo, hi) : cvt_e4m3x2(lo, hi);
}

// Four codes of x * scale (x as f32 bits), little-endian in a word. With kCount,
// also the saturated values (x finite, |x * scale| past the rounding boundary of
// ±max: E4M3 > 464, E5M2 >= 61440) and the nonzero finite values flushed to ±0.
template <bool kCount>
__device__ __forceinline__ uint32_t encode4(const uint32_t* x_bits, float scale, const Codec& c,
                                            unsigned& saturated, unsigned& flushed) {
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = __fmul_rn(f32_from_bits(x_bits[j]), scale);
  uint32_t w = 0;
  bool slow = !c.hw;
  if (c.hw) {
    w = cvt2(v[0], v[1], c.e5m2) | (cvt2(v[2], v[3], c.e5m2) << 16);
    slow = max(max(abs_bits(v[0]), abs_bits(v[1])), max(abs_bits(v[2]), abs_bits(v[3]))) > kInfBits;
  }
  if (slow) {
    w = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) w |= encode_soft(x_bits[j], v[j], c) << (8 * j);
  }
  if constexpr (kCount) {
    const uint32_t overflow_bits = c.e5m2 ? f32_bits(61440.0f) : f32_bits(464.0f) + 1;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t ax = x_bits[j] & 0x7FFFFFFFu;
      saturated += (ax < kInfBits) & (abs_bits(v[j]) >= overflow_bits);
      flushed += (ax - 1u < kInfBits - 1u) & (((w >> (8 * j)) & 0x7Fu) == 0);
    }
  }
  return w;
}

// The multiplier of one block from its amax; stores its scale_inv (f32 1/scale or
// the E8M0 code) at `index` when `write`. The same formulas as the CPU.
__device__ __forceinline__ float block_scale_of(uint32_t amax_bits, const Codec& c, void* scale_inv,
                                                int64_t index, bool write) {
  if (c.e8m0) {
    const uint8_t e = e8m0_scale_inv_from_amax(amax_value(amax_bits), c.fp8_max);
    if (write) static_cast<uint8_t*>(scale_inv)[index] = e;
    const int k = 127 - static_cast<int>(e);  // the multiplier 2^k, exactly
    return k >= -126 ? f32_from_bits(static_cast<uint32_t>(k + 127) << 23) : 0x1p-127f;
  }
  const float scale = scale_from_amax(amax_value(amax_bits), c.fp8_max, 0, c.pow2);
  if (write) static_cast<float*>(scale_inv)[index] = 1.0f / scale;
  return scale;
}

__device__ __forceinline__ uint32_t warp_max(uint32_t v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}
__device__ __forceinline__ unsigned warp_sum(unsigned v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

// Adds this block's amax and counts to the call's Scratch; the last block of the grid
// to do so writes f's outputs and clears the Scratch for the next call (the
// threadfence reduction of the CUDA samples). Called by every thread of every block,
// outside divergent code (it synchronises the block); blockDim.x == kThreads.
__device__ __forceinline__ void block_finish(const Finish& f, const Codec& c, uint32_t amax_bits,
                                             unsigned saturated, unsigned flushed) {
  if (!f.active()) return;
  __shared__ uint32_t s_amax[kThreads / 32];
  __shared__ unsigned s_sat[kThreads / 32], s_flush[kThreads / 32];
  __shared__ bool s_last;
  amax_bits = warp_max(amax_bits);
  saturated = warp_sum(saturated);
  flushed = warp_sum(flushed);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    s_amax[warp] = amax_bits;
    s_sat[warp] = saturated;
    s_flush[warp] = flushed;
  }
  __syncthreads();
  Scratch* s = f.scratch;
  if (threadIdx.x == 0) {
    uint32_t m = 0;
    unsigned long long sat = 0, fl = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      m = max(m, s_amax[w]);
      sat += s_sat[w];
      fl += s_flush[w];
    }
    if (m != 0) atomicMax(&s->amax_bits, m);
    if (sat != 0) atomicAdd(&s->saturated, sat);
    if (fl != 0) atomicAdd(&s->flushed, fl);
    __threadfence();
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    s_last = atomicAdd(&s->blocks_done, 1u) == blocks - 1;
  }
  __syncthreads();
  if (!s_last || threadIdx.x != 0) return;
  __threadfence();
  const uint32_t m = atomicExch(&s->amax_bits, 0u);
  const unsigned long long sat = atomicExch(&s->saturated, 0ull);
  const unsigned long long fl = atomicExch(&s->flushed, 0ull);
  atomicExch(&s->blocks_done, 0u);
  const float amax = amax_value(m);
  if (f.amax) *f.amax = amax;
  if (f.counts) {
    f.counts[0] = static_cast<int>(sat < 0x7FFFFFFFull ? sat : 0x7FFFFFFFull);
    f.counts[1] = static_cast<int>(fl < 0x7FFFFFFFull ? fl : 0x7FFFFFFFull);
  }
  if (f.tensor_scale_inv) {
    const float scale =
        f.given_scale ? *f.given_scale : scale_from_amax(amax, c.fp8_max, 0, c.pow2);
    if (!f.given_scale) s->scale = scale;
    f.tensor_scale_inv[0] = 1.0f / scale;
    if (f.tensor_scale_inv_t) f.tensor_scale_inv_t[0] = 1.0f / scale;
  }
}

// 16 bytes of row r of x [rows, cols] from column col: one load when `vec` (rows start
// 16-byte aligned, cols a multiple of the vector), else element by element; elements
// outside x read as +0 (no effect on amaxes, counts or codes that are not stored).
template <class In>
__device__ __forceinline__ uint4 load_vec(const void* x, int64_t rows, int64_t cols, int64_t r,
                                          int64_t col, bool vec) {
  constexpr int V = 16 / sizeof(In);
  uint4 out = make_uint4(0, 0, 0, 0);
  if (r >= rows || col >= cols) return out;
  const In* p = static_cast<const In*>(x) + r * cols + col;
  if (vec) return __ldg(reinterpret_cast<const uint4*>(p));
  In e[V];
#pragma unroll
  for (int j = 0; j < V; ++j) e[j] = col + j < cols ? p[j] : In(0);
  if constexpr (sizeof(In) == 2) {
    out.x = e[0] | (uint32_t{e[1]} << 16);
    out.y = e[2] | (uint32_t{e[3]} << 16);
    out.z = e[4] | (uint32_t{e[5]} << 16);
    out.w = e[6] | (uint32_t{e[7]} << 16);
  } else {
    out = make_uint4(e[0], e[1], e[2], e[3]);
  }
  return out;
}

// The codes of one vector (V = 16 / sizeof(In) elements): two words for bf16, one for f32.
template <class In, bool kCount>
__device__ __forceinline__ uint2 encode_vec(const uint4& raw, float scale, const Codec& c,
                                            unsigned& saturated, unsigned& flushed) {
  uint32_t b[4];
  uint2 w;
#pragma unroll
  for (int j = 0; j < 4; ++j) b[j] = elem_bits<In>(raw, j);
  w.x = encode4<kCount>(b, scale, c, saturated, flushed);
  w.y = 0;
  if constexpr (sizeof(In) == 2) {
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = elem_bits<In>(raw, 4 + j);
    w.y = encode4<kCount>(b, scale, c, saturated, flushed);
  }
  return w;
}

// Stores the V codes of one vector at data[r, col..]: one store when `vec` (data
// rows aligned to V bytes), else byte by byte inside [rows, cols].
template <class In>
__device__ __forceinline__ void store_codes(uint8_t* data, int64_t rows, int64_t cols, int64_t r,
                                            int64_t col, uint2 w, bool vec) {
  constexpr int V = 16 / sizeof(In);
  if (r >= rows || col >= cols) return;
  uint8_t* p = data + r * cols + col;
  if (vec) {
    if constexpr (V == 8) {
      *reinterpret_cast<uint2*>(p) = w;
    } else {
      *reinterpret_cast<uint32_t*>(p) = w.x;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (col + j < cols) p[j] = static_cast<uint8_t>((j < 4 ? w.x : w.y) >> (8 * (j % 4)));
  }
}

#endif  // __CUDACC__ || OCTET_CUDASIM

}  // namespace octet::kernels::cuda::qz
