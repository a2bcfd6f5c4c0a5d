// kernels/optimizer.h: AdamW over a contiguous parameter buffer in one call, and the
// sum of squares that gradient clipping needs.
// defines: AdamWStep, clip_factor, adamw_step, adamw_step_decayed_first, sum_of_squares,
//          add_scaled_sum
#pragma once

#include <cstdint>

#include <cmath>

#include "core/convert.h"
#include "core/tensor.h"

namespace octet::kernels {

// Passed by value to the CUDA kernel, whose arguments are copied byte for byte: the
// fields are laid out without padding (8 + 8 x 4 bytes), so no stale stack bytes travel
// with it (the emulated device read a heap address in the padding after weight_decay).
struct AdamWStep {
  int64_t step = 1;  // 1 for the first update (bias correction)
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // multiplies every gradient first (averaging)
  // Global-norm clipping read on the device (no host synchronisation): with
  // max_grad_norm > 0, every gradient is also multiplied by
  // clip_factor(grad_sum_sq[0], max_grad_norm).
  float max_grad_norm = 0.0f;
  float unused = 0.0f;  // fills the last 4 bytes (sizeof is a multiple of 8)
};
static_assert(sizeof(AdamWStep) == 40, "AdamWStep must have no padding bytes");

// PyTorch's clip_grad_norm_ without its 1e-6: max_norm / norm where the global norm
// sqrt(sum_sq) exceeds max_norm, else 1 (and 1 when max_norm <= 0). An infinite norm
// gives 0 and a NaN norm gives 1, so a non-finite gradient stays visible in the loss.
OCTET_HD float clip_factor(float sum_sq, float max_norm) {
  const double norm = sqrt(static_cast<double>(sum_sq));
  return max_norm > 0.0f && norm > max_norm ? static_cast<float>(max_norm / norm) : 1.0f;
}

// PyTorch's AdamW (decoupled weight decay), element by element, in fp32:
//   g = grad * grad_scale;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g²
//   p = p (1 - lr wd) - lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// param, grad, m, v: f32, same element count and device; param, m and v are updated.
// grad_sum_sq: f32[1] on param's device, the sum of squares of all gradients
// (sum_of_squares), read when step.max_grad_norm > 0; may be empty otherwise.
// working: optional bf16 [n] on param's device (the parameters' bf16 working copy): also
// gets the updated param rounded to bf16 (round to nearest even, as kernels::convert), in
// the same pass over the parameters on the CPU (on CUDA: adamw, then kernels::convert).
// The same bits as adamw_step without it followed by kernels::convert(param, working).
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWStep& step, const Tensor& grad_sum_sq = Tensor(),
                const Tensor& working = Tensor());

// adamw_step over parameters [first, first + n) of a model whose parameters [0, decayed) take
// weight decay (the matrices) and the rest none (the norm weights): step.weight_decay on the
// part below `decayed`, 0 above it. param, grad, m, v: f32 [n], contiguous.
void adamw_step_decayed_first(const Tensor& param, const Tensor& grad, const Tensor& m,
                              const Tensor& v, int64_t first, int64_t decayed,
                              const AdamWStep& step, const Tensor& grad_sum_sq = Tensor(),
                              const Tensor& working = Tensor());

// out[0] = sum of x² (f32 or bf16 x, summed in fp64 on the CPU, rounded to f32 once).
void sum_of_squares(const Tensor& x, const Tensor& out);

// out[0] += scale * sum of x (f32 x; summed in fp64 on the CPU), on the device: how the
// step adds a micro-batch's token losses to the running loss without reading it back.
void add_scaled_sum(const Tensor& x, const Tensor& out, double scale);

}  // namespace octet::kernels
