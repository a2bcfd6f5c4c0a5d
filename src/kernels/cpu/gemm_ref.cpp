// kernels/cpu/gemm_ref.cpp: the portable CPU GEMM (f32 and bf16 operands, fp32
// accumulation): the fallback without oneDNN and the second opinion in tests.
#include <algorithm>
#include <cstdint>

#include "core/convert.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/gemm_cpu.h"

// The micro-kernel is compiled for AVX-512, AVX2 and baseline x86-64 and the
// loader picks one at start-up; elsewhere it is compiled once.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OCTET_GEMM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OCTET_GEMM_CLONES
#endif

namespace octet::kernels::cpu {
namespace {

// Blocking (Goto style): an MC x KC panel of op(A) and a KC x NC panel of op(B)
// are packed as f32 (widening bf16 exactly, applying the transposes), and an
// MR x NR micro-kernel accumulates into an MC x NC fp32 tile. Each C element is
// the sum over k in increasing order, one fp32 add per product, whatever the
// blocking and the thread count: the result is deterministic.
constexpr int kMR = 6;
constexpr int kNR = 32;
constexpr int kMC = 48;   // multiple of kMR
constexpr int kNC = 128;  // multiple of kNR
constexpr int kKC = 128;

// Per-thread scratch, made once per thread by the runtime (static TLS), never per
// call: ~112 KiB. It is why this engine needs no workspace argument.
struct Scratch {
  alignas(64) float a[kMC * kKC];
  alignas(64) float b[kKC * kNC];
  alignas(64) float acc[kMC * kNC];
};
thread_local Scratch t_scratch;

// ap[(p * kc + kk) * kMR + r] = op(A)(i0 + p * kMR + r, k0 + kk), zero past mc.
template <typename T>
void pack_a(const T* a, const Matmul& mm, int64_t i0, int mc, int64_t k0, int kc, float* ap) {
  for (int p = 0; p * kMR < mc; ++p) {
    float* dst = ap + static_cast<int64_t>(p) * kc * kMR;
    for (int r = 0; r < kMR; ++r) {
      const int64_t i = i0 + p * kMR + r;
      if (p * kMR + r >= mc) {
        for (int kk = 0; kk < kc; ++kk) dst[kk * kMR + r] = 0.0f;
      } else if (mm.trans_a) {  // A stored [k, m]
        for (int kk = 0; kk < kc; ++kk) dst[kk * kMR + r] = to_f32(a[(k0 + kk) * mm.m + i]);
      } else {  // A stored [m, k]
        const T* row = a + i * mm.k + k0;
        for (int kk = 0; kk < kc; ++kk) dst[kk * kMR + r] = to_f32(row[kk]);
      }
    }
  }
}

// bp[(q * kc + kk) * kNR + c] = op(B)(k0 + kk, j0 + q * kNR + c), zero past nc.
template <typename T>
void pack_b(const T* b, const Matmul& mm, int64_t j0, int nc, int64_t k0, int kc, float* bp) {
  for (int q = 0; q * kNR < nc; ++q) {
    float* dst = bp + static_cast<int64_t>(q) * kc * kNR;
    const int width = std::min(kNR, nc - q * kNR);
    const int64_t j = j0 + q * kNR;
    if (mm.trans_b) {  // B stored [n, k]: row j is column j of op(B)
      for (int c = 0; c < kNR; ++c) {
        if (c >= width) {
          for (int kk = 0; kk < kc; ++kk) dst[kk * kNR + c] = 0.0f;
          continue;
        }
        const T* row = b + (j + c) * mm.k + k0;
        for (int kk = 0; kk < kc; ++kk) dst[kk * kNR + c] = to_f32(row[kk]);
      }
    } else {  // B stored [k, n]
      for (int kk = 0; kk < kc; ++kk) {
        const T* row = b + (k0 + kk) * mm.n + j;
        float* out = dst + kk * kNR;
        for (int c = 0; c < width; ++c) out[c] = to_f32(row[c]);
        for (int c = width; c < kNR; ++c) out[c] = 0.0f;
      }
    }
  }
}

// acc[kMR x kNR] (row stride kNC) += sum over kk of ap column kk times bp row kk,
// or = when `first`. Plain multiply then add (the build has -ffp-contract=off),
// so the sums are those of the scalar definition.
OCTET_GEMM_CLONES
void micro_kernel(int kc, const float* __restrict ap, const float* __restrict bp,
                  float* __restrict acc, bool first) {
  float t[kMR][kNR];
  for (int r = 0; r < kMR; ++r)
    for (int c = 0; c < kNR; ++c) t[r][c] = first ? 0.0f : acc[r * kNC + c];
  for (int kk = 0; kk < kc; ++kk) {
    const float* a = ap + kk * kMR;
    const float* b = bp + kk * kNR;
    for (int r = 0; r < kMR; ++r)
      for (int c = 0; c < kNR; ++c) t[r][c] += a[r] * b[c];
  }
  for (int r = 0; r < kMR; ++r)
    for (int c = 0; c < kNR; ++c) acc[r * kNC + c] = t[r][c];
}

// C tile = alpha * acc + beta * C, rounded once to C's dtype.
void write_tile(const Matmul& mm, int64_t i0, int mc, int64_t j0, int nc, const float* acc) {
  for (int r = 0; r < mc; ++r) {
    const int64_t offset = (i0 + r) * mm.n + j0;
    const float* src = acc + r * kNC;
    if (mm.c_dtype == DType::f32) {
      float* out = static_cast<float*>(mm.c) + offset;
      if (mm.beta == 0.0f) {
        for (int c = 0; c < nc; ++c) out[c] = mm.alpha * src[c];
      } else {
        for (int c = 0; c < nc; ++c) out[c] = mm.alpha * src[c] + mm.beta * out[c];
      }
    } else {
      uint16_t* out = static_cast<uint16_t*>(mm.c) + offset;
      if (mm.beta == 0.0f) {
        for (int c = 0; c < nc; ++c) out[c] = f32_to_bf16(mm.alpha * src[c]);
      } else {
        for (int c = 0; c < nc; ++c)
          out[c] = f32_to_bf16(mm.alpha * src[c] + mm.beta * bf16_to_f32(out[c]));
      }
    }
  }
}

template <typename T>
void gemm_tiles(const Matmul& mm) {
  const T* a = static_cast<const T*>(mm.a);
  const T* b = static_cast<const T*>(mm.b);
  const int64_t tiles_m = (mm.m + kMC - 1) / kMC;
  const int64_t tiles_n = (mm.n + kNC - 1) / kNC;
  const int64_t tiles = tiles_m * tiles_n;
  // Threads only pay off beyond a few hundred thousand multiply-adds.
  const bool parallel = tiles > 1 && mm.m * mm.n * std::max<int64_t>(mm.k, 1) >= (1 << 18);

#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t t = 0; t < tiles; ++t) {
    Scratch& s = t_scratch;
    const int64_t i0 = (t / tiles_n) * kMC;
    const int64_t j0 = (t % tiles_n) * kNC;
    const int mc = static_cast<int>(std::min<int64_t>(kMC, mm.m - i0));
    const int nc = static_cast<int>(std::min<int64_t>(kNC, mm.n - j0));
    if (mm.k == 0) std::fill(s.acc, s.acc + kMC * kNC, 0.0f);
    for (int64_t k0 = 0; k0 < mm.k; k0 += kKC) {
      const int kc = static_cast<int>(std::min<int64_t>(kKC, mm.k - k0));
      pack_a(a, mm, i0, mc, k0, kc, s.a);
      pack_b(b, mm, j0, nc, k0, kc, s.b);
      for (int ir = 0; ir < mc; ir += kMR) {
        for (int jr = 0; jr < nc; jr += kNR) {
          micro_kernel(kc, s.a + ir * kc, s.b + jr * kc, s.acc + ir * kNC + jr, k0 == 0);
        }
      }
    }
    write_tile(mm, i0, mc, j0, nc, s.acc);
  }
}

}  // namespace

void gemm_reference(const Matmul& mm) {
  if (mm.m == 0 || mm.n == 0) return;
  if (mm.ab_dtype == DType::f32) {
    gemm_tiles<float>(mm);
  } else {
    gemm_tiles<uint16_t>(mm);
  }
}

}  // namespace octet::kernels::cpu
