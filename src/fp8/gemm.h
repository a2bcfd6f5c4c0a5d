// fp8/gemm.h: GEMMs of quantized tensors: each operand is a QuantizedTensor's data or
// its transposed copy, with the matching scales and grid, passed to kernels::gemm.
// defines: Fp8Operand, Fp8GemmOptions, gemm, gemm_workspace_bytes
#pragma once

#include <cstddef>

#include "fp8/quantized_tensor.h"
#include "kernels/gemm.h"

namespace octet::fp8 {

// Which stored copy of a quantized tensor a GEMM reads. Both operands of an FP8
// GEMM are K-major: C [M, N] = A [M, K] · B [N, K]ᵀ.
struct Fp8Operand {
  const QuantizedTensor* q;
  bool transposed;  // read data_t (and scale_inv_t) instead of data
};
inline Fp8Operand as_stored(const QuantizedTensor& q) {
  return {.q = &q, .transposed = false};
}
inline Fp8Operand as_transposed(const QuantizedTensor& q) {
  return {.q = &q, .transposed = true};
}

struct Fp8GemmOptions {
  float alpha = 1.0f;
  float beta = 0.0f;        // 1 accumulates into C (gradient accumulation)
  bool fast_accum = false;  // forward GEMMs on CUDA (cuBLASLt FAST_ACCUM)
  Tensor workspace;         // at least gemm_workspace_bytes(...) bytes on the device
};

size_t gemm_workspace_bytes(Fp8Operand a, Fp8Operand b, const Tensor& c,
                            const Fp8GemmOptions& options = {});
// C = alpha * A·Bᵀ (scales applied as kernels/gemm.h says) + beta * C. E5M2 x E5M2
// is refused, as the hardware refuses it.
void gemm(Fp8Operand a, Fp8Operand b, const Tensor& c, const Fp8GemmOptions& options = {});

}  // namespace octet::fp8
