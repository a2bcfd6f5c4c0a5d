// kernels/cpu/quantize_fused.h: the CPU quantize of a tensor and its transposed copy in one
// tiled pass (kernels/cpu/quantize_fused_cpu.cpp), used by kernels/cpu/quantize_cpu.cpp
// where it applies; its results are the two-pass kernels' bit for bit.
// defines: quantize_fused, quantize_two_pass
#pragma once

#include "kernels/quantize.h"

namespace octet::kernels::cpu {

// Quantizes x into out.data and out.data_t (both wanted) in one parallel region: per-tensor
// grids, and grids of one row by N columns (row, 1xN, MX) whose blocks fit a 64 x 64 tile or
// whose scales are f32. Returns false, having written nothing, for any other case.
bool quantize_fused(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& o);

// The two-pass path (kernels/cpu/quantize_cpu.cpp) for every case, the reference the fused
// pass is tested against; cpu::quantize takes the fused pass where it applies.
void quantize_two_pass(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& o);

}  // namespace octet::kernels::cpu
