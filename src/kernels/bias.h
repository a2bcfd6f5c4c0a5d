// kernels/bias.h: the bias of a linear layer: broadcast add in the forward pass and
// the fp32 column sum of the output gradient in the backward pass.
// defines: add_bias, bias_grad_accumulate
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// y[t, j] += bias[j] for every row t; y and bias are f32 or bf16 (the sum is
// formed in fp32 and rounded once to y's dtype).
void add_bias(const Tensor& y, const Tensor& bias);

// grad[j] += sum_t dy[t, j] in fp32; dy is f32 or bf16 [T, N], grad is f32 [N].
void bias_grad_accumulate(const Tensor& dy, const Tensor& grad);

}  // namespace octet::kernels
