// kernels/cuda/ptx.cuh: every inline-PTX instruction octet's kernels use, one small
// wrapper each. Under nvcc each is the asm; in the emulated build (OCTET_CUDASIM) each
// calls its twin in cudasim/ptx.h, so the kernels run unchanged on the CPU. CUDA only;
// internal to kernels/cuda.
// defines: smem_address, cp_async_16, cp_async_4, cp_async_commit, cp_async_wait,
//          ldmatrix_x4, ldmatrix_x4_trans, mma_bf16, exp2_approx, cvt_e4m3x2, cvt_e5m2x2
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef OCTET_CUDASIM
#include <cudasim/ptx.h>
#endif

namespace octet::kernels::cuda {

// A shared-memory pointer as the 32-bit shared address the PTX below takes.
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (nothing is read).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
#ifdef OCTET_CUDASIM
  cudasim::ptx::cp_async(dst, src, 16, src_bytes);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
#endif
}

// 4 bytes global -> shared, asynchronously (cached in L1: .cg takes 16 bytes only).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
#ifdef OCTET_CUDASIM
  cudasim::ptx::cp_async(dst, src, 4, src_bytes);
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
#endif
}

// Closes this thread's group of cp.async copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifdef OCTET_CUDASIM
  cudasim::ptx::cp_async_commit_group();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `N` of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef OCTET_CUDASIM
  cudasim::ptx::cp_async_wait_group(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Four 8x8 b16 matrices from shared memory; lanes 8m .. 8m + 7 give the rows of matrix m.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
#ifdef OCTET_CUDASIM
  const auto v = cudasim::ptx::ldmatrix_x4(address, false);
  for (int i = 0; i < 4; ++i) r[i] = v[i];
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// The same, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
#ifdef OCTET_CUDASIM
  const auto v = cudasim::ptx::ldmatrix_x4(address, true);
  for (int i = 0; i < 4; ++i) r[i] = v[i];
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// d += a b for one m16n8k16 tile: a row-major bf16 (4 registers), b column-major bf16
// (2 registers), d fp32. Fragment of lane (g = lane / 4, t = lane % 4): d[0], d[1] are
// row g, columns 2t and 2t + 1; d[2], d[3] the same columns of row g + 8.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#ifdef OCTET_CUDASIM
  cudasim::ptx::mma_m16n8k16_bf16(d, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// 2^x on the special function unit: ex2.approx.ftz, within 2 ulp; results below 2^-126
// flush to zero, and 2^-inf = 0 (how masked scores vanish).
__device__ __forceinline__ float exp2_approx(float x) {
#ifdef OCTET_CUDASIM
  return cudasim::ptx::ex2_approx_ftz(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

// Two FP8 codes of (lo, hi), `lo` in the low byte, by cvt.rn.satfinite: round to nearest
// even, finite overflow and infinities to ±max. PTX's `cvt d, a, b` puts a in the upper
// byte, so hi is the first source operand.
__device__ __forceinline__ uint32_t cvt_e4m3x2(float lo, float hi) {
#ifdef OCTET_CUDASIM
  return cudasim::ptx::cvt_satfinite_e4m3x2(hi, lo);
#else
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}
__device__ __forceinline__ uint32_t cvt_e5m2x2(float lo, float hi) {
#ifdef OCTET_CUDASIM
  return cudasim::ptx::cvt_satfinite_e5m2x2(hi, lo);
#else
  unsigned short r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

}  // namespace octet::kernels::cuda
