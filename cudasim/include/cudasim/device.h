// cudasim/device.h: the device side of the emulation seen by kernel sources: CUDA's keywords
// (__global__, __shared__ ...), the built-in variables (threadIdx ...) and the device builtins
// octet's kernels use (barriers, warp shuffles and votes, atomics, bit tricks, rounding math).
// defines: threadIdx, blockIdx, blockDim, gridDim, __syncthreads, __syncthreads_or,
//          __shfl_xor_sync, __shfl_sync, __ballot_sync, __ffs, __byte_perm, __ldg, atomic*,
//          __threadfence, __cvta_generic_to_shared, __f*_rn, cudasim::detail::ThreadState
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <source_location>

#include "cudasim/thread.h"

// ---- keywords: kernels are host functions; shared variables are statics (one block runs at a
// time on the emulated device, so a static is that block's shared memory) ----------------------
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __launch_bounds__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static
#define __launch_bounds__(...)
#define __forceinline__ inline __attribute__((always_inline))

namespace cudasim::detail {

// What an emulated thread knows about itself; `current` is the running thread's.
struct ThreadState {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned linear;  // x + y * dim.x + z * dim.x * dim.y
  unsigned lane;
  std::shared_ptr<void> ptx;  // the PTX twins' state of this thread (cp.async groups); per block
};
inline thread_local ThreadState* current = nullptr;

void syncthreads(const char* kind, int* predicate, const std::source_location& where);
[[noreturn]] void no_thread(const char* what);

inline ThreadState& self() {
  if (current == nullptr) no_thread("a device builtin");
  return *current;
}

}  // namespace cudasim::detail

#define threadIdx (::cudasim::detail::self().thread_idx)
#define blockIdx (::cudasim::detail::self().block_idx)
#define blockDim (::cudasim::detail::self().block_dim)
#define gridDim (::cudasim::detail::self().grid_dim)
#define warpSize 32

// ---- barriers and warp collectives -----------------------------------------------------------
inline void __syncthreads(const std::source_location& where = std::source_location::current()) {
  cudasim::detail::syncthreads("__syncthreads", nullptr, where);
}
inline int __syncthreads_or(int predicate,
                            const std::source_location& where = std::source_location::current()) {
  int p = predicate != 0;
  cudasim::detail::syncthreads("__syncthreads_or", &p, where);
  return p;
}

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  const std::source_location& where = std::source_location::current()) {
  const auto all = cudasim::warp_gather(mask, var, "__shfl_xor_sync", where);
  const unsigned lane = cudasim::lane();
  const unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  // A source beyond the caller's width segment reads the caller's own value (PTX shfl.bfly).
  if (src / static_cast<unsigned>(width) != lane / static_cast<unsigned>(width)) return var;
  if ((mask >> src & 1u) == 0) {  // undefined on hardware: hand back garbage, not the truth
    T poison;
    std::memset(&poison, 0xCD, sizeof poison);
    return poison;
  }
  return all[src];
}

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              const std::source_location& where = std::source_location::current()) {
  const auto all = cudasim::warp_gather(mask, var, "__shfl_sync", where);
  const unsigned lane = cudasim::lane();
  const unsigned w = static_cast<unsigned>(width);
  const unsigned src = lane / w * w + static_cast<unsigned>(src_lane) % w;
  if ((mask >> src & 1u) == 0) {
    T poison;
    std::memset(&poison, 0xCD, sizeof poison);
    return poison;
  }
  return all[src];
}

inline unsigned __ballot_sync(unsigned mask, int predicate,
                              const std::source_location& where = std::source_location::current()) {
  const auto all = cudasim::warp_gather(mask, predicate != 0, "__ballot_sync", where);
  unsigned bits = 0;
  for (unsigned i = 0; i < 32; ++i)
    if ((mask >> i & 1u) != 0 && all[i]) bits |= 1u << i;
  return bits;
}

inline void __syncwarp(unsigned mask = 0xffffffffu,
                       const std::source_location& where = std::source_location::current()) {
  (void)cudasim::warp_gather(mask, char{0}, "__syncwarp", where);
}

// ---- bits and rounding math (host semantics: IEEE round to nearest even, no FTZ) -------------
inline int __ffs(int x) {
  return __builtin_ffs(x);
}
inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}
// PTX prmt (default mode): byte i of the result is byte (s >> 4i) & 7 of {y, x}.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned sel = (s >> (4 * i)) & 7u;
    r |= static_cast<unsigned>((bytes >> (8 * sel)) & 0xffu) << (8 * i);
  }
  return r;
}
inline float __uint_as_float(unsigned x) {
  return std::bit_cast<float>(x);
}
inline unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
inline float __int_as_float(int x) {
  return std::bit_cast<float>(x);
}
inline int __float_as_int(float x) {
  return std::bit_cast<int>(x);
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fsqrt_rn(float a) {
  return std::sqrt(a);
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}

// CUDA's overloaded min/max (crt/math_functions.hpp) for the integer and float types.
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a < b ? b : a;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a < b ? b : a;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline long long max(long long a, long long b) {
  return a < b ? b : a;
}
inline long min(long a, long b) {
  return a < b ? a : b;
}
inline long max(long a, long b) {
  return a < b ? b : a;
}
inline unsigned long min(unsigned long a, unsigned long b) {
  return a < b ? a : b;
}
inline unsigned long max(unsigned long a, unsigned long b) {
  return a < b ? b : a;
}
inline float min(float a, float b) {
  return std::fmin(a, b);
}
inline float max(float a, float b) {
  return std::fmax(a, b);
}
inline double min(double a, double b) {
  return std::fmin(a, b);
}
inline double max(double a, double b) {
  return std::fmax(a, b);
}

// CUDA's math library puts the classification functions in the global namespace.
using std::isfinite;
using std::isinf;
using std::isnan;

template <class T>
T __ldg(const T* p) {
  return *p;
}

// ---- atomics and fences ----------------------------------------------------------------------
template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
template <class T>
T atomicExch(T* p, T v) {
  return std::atomic_ref<T>(*p).exchange(v);
}
template <class T>
T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <class T>
T atomicOr(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_or(v);
}
template <class T>
T atomicCAS(T* p, T expected, T desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);
  return expected;
}
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_block() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// The 32-bit shared-window address of a pointer into this block's dynamic shared arena.
inline size_t __cvta_generic_to_shared(const void* p) {
  const auto* base = static_cast<const char*>(cudasim::dynamic_shared_base());
  const auto* c = static_cast<const char*>(p);
  if (base == nullptr || c < base || c >= base + cudasim::dynamic_shared_bytes())
    cudasim::fault(cudaErrorIllegalAddress,
                   "__cvta_generic_to_shared of an address outside the block's dynamic shared "
                   "memory");
  return static_cast<size_t>(c - base);
}
