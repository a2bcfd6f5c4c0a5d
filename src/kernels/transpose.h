// kernels/transpose.h: out-of-place 2-D transpose, the copy the FP8 GEMM layout
// needs for dgrad (Wᵀ) and wgrad (dYᵀ, Xᵀ).
// defines: transpose
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// dst [C, R] = src [R, C]ᵀ, where src is seen as a matrix of src.rows() x src.cols().
// Any dtype; src and dst share dtype and device and must not overlap.
void transpose(const Tensor& src, const Tensor& dst);

}  // namespace octet::kernels
