// kernels/cuda/bias.cu: bias add and bias gradient on CUDA devices.
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace octet::kernels::cuda {
namespace {

__device__ __forceinline__ float load(const void* p, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

__global__ void add_bias_kernel(void* y, bool y_bf16, const void* bias, bool b_bf16, int64_t rows,
                                int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = load(y, y_bf16, i) + load(bias, b_bf16, i % cols);
    if (y_bf16) {
      static_cast<uint16_t*>(y)[i] = f32_to_bf16(v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
  }
}

// One thread per column, summing rows in order (the CPU's order, so results agree).
__global__ void bias_grad_kernel(const void* dy, bool bf16, int64_t rows, int64_t cols,
                                 float* grad) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float sum = 0.0f;
  for (int64_t t = 0; t < rows; ++t) sum = __fadd_rn(sum, load(dy, bf16, t * cols + j));
  grad[j] = __fadd_rn(grad[j], sum);
}

}  // namespace

void add_bias(const Tensor& y, const Tensor& bias) {
  OCTET_CUDA_CHECK("add_bias", cudaSetDevice(y.device.index));
  launch_kernel(add_bias_kernel, blocks_for(y.numel(), 256), 256, 0, stream(), y.data,
                y.dtype == DType::bf16, bias.data, bias.dtype == DType::bf16, y.rows(), y.cols());
  OCTET_CUDA_CHECK_LAUNCH("add_bias");
}

void bias_grad_accumulate(const Tensor& dy, const Tensor& grad) {
  OCTET_CUDA_CHECK("bias_grad", cudaSetDevice(dy.device.index));
  launch_kernel(bias_grad_kernel, blocks_for(dy.cols(), 256), 256, 0, stream(), dy.data,
                dy.dtype == DType::bf16, dy.rows(), dy.cols(), grad.as<float>());
  OCTET_CUDA_CHECK_LAUNCH("bias_grad");
}

}  // namespace octet::kernels::cuda
