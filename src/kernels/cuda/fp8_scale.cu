// kernels/cuda/fp8_scale.cu: FP8 scales from amaxes on CUDA devices, one thread an element
// (the formula of kernels/quantize.h's scale_from_amax, shared with the CPU).
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/quantize.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kScaleThreads = 128;

__global__ void scales_kernel(const float* amax, float* scale, float* scale_inv, int64_t n,
                              float fp8_max, bool power_of_two) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = scale_from_amax(amax[i], fp8_max, 0, power_of_two);
    scale[i] = v;
    scale_inv[i] = __fdiv_rn(1.0f, v);
  }
}

}  // namespace

void fp8_scales_from_amax(const Tensor& amax, const Tensor& scale, const Tensor& scale_inv,
                          float fp8_max, bool power_of_two) {
  OCTET_CUDA_CHECK("fp8_scales_from_amax", cudaSetDevice(amax.device.index));
  const int64_t n = amax.numel();
  launch_kernel(scales_kernel, blocks_for(n, kScaleThreads), kScaleThreads, 0, stream(),
                amax.as<const float>(), scale.as<float>(), scale_inv.as<float>(), n, fp8_max,
                power_of_two);
  OCTET_CUDA_CHECK_LAUNCH("fp8_scales_from_amax");
}

}  // namespace octet::kernels::cuda
