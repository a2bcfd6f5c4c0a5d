// kernels/elementwise.cpp: validation of the elementwise kernels and dispatch by device.
#include "kernels/elementwise.h"

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr const char* op = "add";
  OCTET_CHECK(is_activation(a.dtype) && b.dtype == a.dtype && out.dtype == a.dtype, op,
              "a, b and out must share one dtype, f32 or bf16, got ", a.str(), ", ", b.str(),
              " and ", out.str());
  check_tensor(op, "b", b, a.dtype, a.numel(), a.device);
  check_tensor(op, "out", out, a.dtype, a.numel(), a.device);
  check_tensor(op, "a", a, a.dtype, a.numel(), a.device);
  if (out.data != a.data) check_no_overlap(op, "out", out, "a", a);
  if (out.data != b.data) check_no_overlap(op, "out", out, "b", b);
  if (a.numel() == 0) return;
  if (a.device.is_cpu()) return cpu::add(a, b, out);
  OCTET_CUDA_RETURN(op, a, add, a, b, out);
}

}  // namespace octet::kernels
