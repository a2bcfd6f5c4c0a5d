// kernels/fp8_scale.h: FP8 scales from amaxes that live on the device (an all-reduced amax,
// say), without reading them back: scale = scale_from_amax(amax) and scale_inv = 1 / scale,
// element by element, on the amax's device.
// defines: fp8_scales_from_amax
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// amax, scale, scale_inv: f32 [N] on one device. scale[i] = scale_from_amax(amax[i], fp8_max,
// 0, power_of_two) (kernels/quantize.h: amax 0 or non-finite gives 1), scale_inv[i] = 1 /
// scale[i] (exact when power_of_two).
void fp8_scales_from_amax(const Tensor& amax, const Tensor& scale, const Tensor& scale_inv,
                          float fp8_max, bool power_of_two);

}  // namespace octet::kernels
