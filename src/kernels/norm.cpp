// kernels/norm.cpp: validation of the RMSNorm kernels and dispatch by device.
#include "kernels/norm.h"

#include <cmath>

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {

void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  constexpr const char* op = "rmsnorm_forward";
  const Device device = x.device;
  const int64_t rows = x.rows(), dim = x.cols();
  check_activation(op, "x", x, rows, dim, device);
  OCTET_CHECK(is_activation(weight.dtype), op, "weight must be f32 or bf16, got ", weight.str());
  check_tensor(op, "weight", weight, weight.dtype, dim, device);
  check_activation(op, "y", y, rows, dim, device);
  OCTET_CHECK(y.dtype == x.dtype, op, "y must have x's dtype ", dtype_name(x.dtype), ", got ",
              y.str());
  check_tensor(op, "rstd", rstd, DType::f32, rows, device);
  if (y.data != x.data) check_no_overlap(op, "y", y, "x", x);
  check_no_overlap(op, "rstd", rstd, "x", x);
  OCTET_CHECK(std::isfinite(eps) && eps >= 0.0f, op, "eps must be finite and >= 0, got ", eps);
  if (x.numel() == 0) return;
  if (device.is_cpu()) return cpu::rmsnorm_forward(x, weight, y, rstd, eps);
  OCTET_CUDA_RETURN(op, x, rmsnorm_forward, x, weight, y, rstd, eps);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dweight) {
  constexpr const char* op = "rmsnorm_backward";
  const Device device = x.device;
  const int64_t rows = x.rows(), dim = x.cols();
  check_activation(op, "x", x, rows, dim, device);
  check_activation(op, "dy", dy, rows, dim, device);
  check_activation(op, "dx", dx, rows, dim, device);
  OCTET_CHECK(dy.dtype == x.dtype && dx.dtype == x.dtype, op, "dy and dx must have x's dtype ",
              dtype_name(x.dtype), ", got ", dy.str(), " and ", dx.str());
  OCTET_CHECK(is_activation(weight.dtype), op, "weight must be f32 or bf16, got ", weight.str());
  check_tensor(op, "weight", weight, weight.dtype, dim, device);
  check_tensor(op, "rstd", rstd, DType::f32, rows, device);
  check_tensor(op, "dweight", dweight, DType::f32, dim, device);
  if (dx.data != dy.data) check_no_overlap(op, "dx", dx, "dy", dy);
  check_no_overlap(op, "dx", dx, "x", x);
  if (x.numel() == 0) return;
  if (device.is_cpu()) return cpu::rmsnorm_backward(dy, x, weight, rstd, dx, dweight);
  OCTET_CUDA_RETURN(op, x, rmsnorm_backward, dy, x, weight, rstd, dx, dweight);
}

}  // namespace octet::kernels
