// kernels/gemm.h: C = alpha * op(A) op(B) (* FP8 scale_inv factors) + beta * C with
// fp32 accumulation, on the device of the operands.
// defines: GemmOptions, gemm, gemm_workspace_bytes
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace octet::kernels {

// Layout and scaling of one GEMM. Tensors are row-major; the default layout is
// the one Hopper's FP8 tensor cores take ("TN" in cuBLAS' column-major terms):
// A [M, K] and B [N, K], both K-major, giving C [M, N] = A Bᵀ.
struct GemmOptions {
  bool trans_a = false;  // A is stored [K, M] (op(A) = Aᵀ); not allowed for FP8
  bool trans_b = true;   // B is stored [N, K] (op(B) = Bᵀ); must stay true for FP8
  float alpha = 1.0f;
  float beta = 0.0f;  // beta != 0 accumulates into C (C must then hold valid values)
  // FP8 operands only: pointers to one fp32 each, on the operands' device, the
  // factors that undo each operand's quantization scale. nullptr means 1. They
  // multiply the fp32 accumulator: C = alpha * a_scale_inv * b_scale_inv * acc + beta * C.
  const float* a_scale_inv = nullptr;
  const float* b_scale_inv = nullptr;
  // FP8 on CUDA: cuBLASLt's fast accumulation (forward GEMMs only). The CPU
  // always accumulates exactly in fp32.
  bool fast_accum = false;
  // Scratch memory (u8) of at least gemm_workspace_bytes(...) on the operands'
  // device; kernels never allocate. May be empty when that size is 0.
  Tensor workspace;
};

// Bytes of workspace gemm() needs for these operands (validates them too).
size_t gemm_workspace_bytes(const Tensor& a, const Tensor& b, const Tensor& c,
                            const GemmOptions& options);

// Computes C as GemmOptions describes. Accepted operand/output dtypes:
//   f32 x f32 -> f32;  bf16 x bf16 -> f32 | bf16;
//   e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3 -> f32 | bf16 (E5M2 x E5M2 is refused);
// FP8 operands must be K-major (trans_a false, trans_b true) with K a multiple of 16.
// All tensors must be on one device. Throws octet::Error naming the problem otherwise.
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options = {});

}  // namespace octet::kernels
