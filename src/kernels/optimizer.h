// kernels/optimizer.h: AdamW over a contiguous parameter buffer in one call, and the
// sum of squares that gradient clipping needs.
// defines: AdamWStep, adamw_step, sum_of_squares
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace octet::kernels {

struct AdamWStep {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1 for the first update (bias correction)
  float grad_scale = 1.0f;  // multiplies every gradient first (clipping, averaging)
};

// PyTorch's AdamW (decoupled weight decay), element by element, in fp32:
//   g = grad * grad_scale;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g²
//   p = p (1 - lr wd) - lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// param, grad, m, v: f32, same element count and device; param, m and v are updated.
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWStep& step);

// out[0] = sum of x² (f32 or bf16 x, summed in fp64 on the CPU, rounded to f32 once).
void sum_of_squares(const Tensor& x, const Tensor& out);

}  // namespace octet::kernels
