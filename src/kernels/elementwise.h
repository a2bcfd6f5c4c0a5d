// kernels/elementwise.h: the elementwise operations of a LLaMA block: the residual add
// (forward) and the sum of the two gradients that meet at a residual (backward).
// defines: add
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// out = a + b elementwise, in fp32, rounded once to the common dtype.
// a, b, out: one dtype (f32 or bf16), the same number of elements, one device; out
// may be a or b.
void add(const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace octet::kernels
