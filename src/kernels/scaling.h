// kernels/scaling.h: the delayed-scaling update of every FP8 tensor of a model in
// one call: reduce each amax history, roll it, and compute the next scale.
// defines: AmaxReduce, delayed_scaling_update
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

enum class AmaxReduce : unsigned char { max, most_recent };

// For each tensor i of N (Transformer Engine's DelayedScaling, per step):
//   amax      = reduce(history[i, :])            (max over the window, or history[i, 0])
//   history[i] = (0, h[2], ..., h[len-1], h[0]) for the old row h: torch.roll(h, -1) with slot
//              0 then cleared for the next step's amax (the quantize of tensor i writes it
//              there), so the window always holds the len most recent amaxes
//   scale[i]  = fp8_max[i] / amax / 2^margin     when amax is finite and > 0,
//               unchanged otherwise (a non-finite amax is counted in nonfinite[0])
//   scale_inv[i] = 1 / scale[i]
// history f32 [N, len]; scale, scale_inv, fp8_max f32 [N]; nonfinite i32 [1] (may be empty,
// else incremented). All on one device.
void delayed_scaling_update(const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                            const Tensor& fp8_max, const Tensor& nonfinite, AmaxReduce reduce,
                            int margin);

}  // namespace octet::kernels
