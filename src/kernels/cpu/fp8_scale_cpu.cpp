// kernels/cpu/fp8_scale_cpu.cpp: FP8 scales from amaxes on the CPU.
#include "kernels/backends.h"
#include "kernels/quantize.h"

namespace octet::kernels::cpu {

void fp8_scales_from_amax(const Tensor& amax, const Tensor& scale, const Tensor& scale_inv,
                          float fp8_max, bool power_of_two) {
  const float* a = amax.as<const float>();
  float* s = scale.as<float>();
  float* si = scale_inv.as<float>();
  for (int64_t i = 0; i < amax.numel(); ++i) {
    const float v = scale_from_amax(a[i], fp8_max, 0, power_of_two);
    s[i] = v;
    si[i] = 1.0f / v;
  }
}

}  // namespace octet::kernels::cpu
