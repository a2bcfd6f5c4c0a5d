// kernels/bias.cpp: validation of the bias kernels and dispatch by device.
#include "kernels/bias.h"

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {

void add_bias(const Tensor& y, const Tensor& bias) {
  OCTET_CHECK(is_activation(y.dtype) && is_activation(bias.dtype), "add_bias",
              "y and bias must be f32 or bf16, got ", y.str(), " and ", bias.str());
  OCTET_CHECK(bias.numel() == y.cols() && bias.device == y.device, "add_bias", "bias must be [",
              y.cols(), "] on ", device_name(y.device), ", got ", bias.str());
  if (y.numel() == 0) return;
  if (y.device.is_cpu()) return cpu::add_bias(y, bias);
  OCTET_CUDA_RETURN("add_bias", y, add_bias, y, bias);
}

void bias_grad_accumulate(const Tensor& dy, const Tensor& grad) {
  OCTET_CHECK(is_activation(dy.dtype) && grad.dtype == DType::f32, "bias_grad",
              "dy must be f32 or bf16 and grad f32, got ", dy.str(), " and ", grad.str());
  OCTET_CHECK(grad.numel() == dy.cols() && grad.device == dy.device, "bias_grad", "grad must be [",
              dy.cols(), "] on ", device_name(dy.device), ", got ", grad.str());
  if (dy.numel() == 0) return;
  if (dy.device.is_cpu()) return cpu::bias_grad_accumulate(dy, grad);
  OCTET_CUDA_RETURN("bias_grad", dy, bias_grad_accumulate, dy, grad);
}

}  // namespace octet::kernels
