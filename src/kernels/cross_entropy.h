// kernels/cross_entropy.h: the softmax cross-entropy loss of a language model head and
// its gradient, fused in one kernel over the rows of logits.
// defines: cross_entropy
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// For every row t, with lse = log sum_j exp(logits[t, j]) (max-shifted, fp32):
//   losses[t]     = lse - logits[t, targets[t]]
//   dlogits[t, j] = (softmax(logits[t])_j - [j == targets[t]]) * grad_scale
// (grad_scale is 1 / T for the mean loss, times a loss scale if any).
//   logits:  f32 or bf16 [T, V];  targets: i32, T elements
//   losses:  f32, T elements (written)
//   dlogits: empty to compute the losses only, or logits' dtype and shape (written; may
//            be logits itself, which is then overwritten)
// On the CPU, throws octet::Error naming the first target outside [0, V), its index and
// V. On a CUDA device the targets are not read back (that would synchronise): a row
// whose target is outside [0, V) gets a NaN loss and NaN dlogits instead.
void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                   const Tensor& dlogits, float grad_scale);

}  // namespace octet::kernels
