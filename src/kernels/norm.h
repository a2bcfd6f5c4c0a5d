// kernels/norm.h: RMSNorm as LLaMA uses it (Hugging Face LlamaRMSNorm semantics),
// forward and backward, with fp32 statistics.
// defines: rmsnorm_forward, rmsnorm_backward
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// For every row t of x [T, D]:
//   rstd[t] = 1 / sqrt(mean_j x[t, j]^2 + eps)       (fp32)
//   y[t, j] = w[j] * to_dtype(x[t, j] * rstd[t])
// in Hugging Face's order: the normalized row is rounded to x's dtype before the
// weight multiplies it, and the product is rounded once more to y's dtype (for f32
// both roundings are exact no-ops).
//   x:      f32 or bf16 [T, D];  weight: f32 or bf16 [D]
//   y:      x's dtype [T, D] (written; may alias x)
//   rstd:   f32 [T] (written; saved for the backward pass)
//   eps:    >= 0 (1e-5 or 1e-6 in LLaMA configs)
void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps);

// The gradient of rmsnorm_forward, with n = to_dtype(x * rstd) recomputed from the
// saved rstd and the rounding to the dtype taken as the identity (straight through):
//   dx[t, j]    = rstd * (w[j] dy[t, j]) - rstd^3 / D * x[t, j] * sum_k w[k] dy[t, k] x[t, k]
//   dweight[j] += sum_t dy[t, j] * n[t, j]             (fp32, t in increasing order)
//   dy, x:  one dtype (f32 or bf16) [T, D];  weight: f32 or bf16 [D];  rstd: f32 [T]
//   dx:     x's dtype [T, D] (written; may alias dy)
//   dweight: f32 [D] (accumulated)
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dweight);

}  // namespace octet::kernels
