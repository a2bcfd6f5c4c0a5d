// kernels/fp8_scale.cpp: validation of fp8_scales_from_amax and dispatch by device.
#include "kernels/fp8_scale.h"

#include <cmath>

#include "core/error.h"
#include "kernels/backends.h"

namespace octet::kernels {

void fp8_scales_from_amax(const Tensor& amax, const Tensor& scale, const Tensor& scale_inv,
                          float fp8_max, bool power_of_two) {
  constexpr const char* op = "fp8_scales_from_amax";
  for (const Tensor* t : {&amax, &scale, &scale_inv}) {
    OCTET_CHECK(t->dtype == DType::f32 && t->numel() == amax.numel() && t->device == amax.device,
                op, "amax, scale and scale_inv must be f32 [", amax.numel(), "] on ",
                device_name(amax.device), ", got ", amax.str(), ", ", scale.str(), " and ",
                scale_inv.str());
  }
  OCTET_CHECK(std::isfinite(fp8_max) && fp8_max > 0, op, "fp8_max must be positive, got ", fp8_max);
  if (amax.numel() == 0) return;
  if (amax.device.is_cpu())
    return cpu::fp8_scales_from_amax(amax, scale, scale_inv, fp8_max, power_of_two);
  OCTET_CUDA_RETURN(op, amax, fp8_scales_from_amax, amax, scale, scale_inv, fp8_max, power_of_two);
}

}  // namespace octet::kernels
