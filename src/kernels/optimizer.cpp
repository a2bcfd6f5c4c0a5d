// kernels/optimizer.cpp: validation of the optimizer kernels and dispatch by device.
#include "kernels/optimizer.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/convert.h"

namespace octet::kernels {
namespace {

// adamw_step on a CUDA device (the arguments are unused in a build without CUDA).
void cuda_adamw_step(const Tensor& param, [[maybe_unused]] const Tensor& grad,
                     [[maybe_unused]] const Tensor& m, [[maybe_unused]] const Tensor& v,
                     [[maybe_unused]] const AdamWStep& step,
                     [[maybe_unused]] const Tensor& grad_sum_sq) {
  OCTET_CUDA_RETURN("adamw", param, adamw_step, param, grad, m, v, step, grad_sum_sq);
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWStep& step, const Tensor& grad_sum_sq, const Tensor& working) {
  for (const Tensor* t : {&param, &grad, &m, &v}) {
    OCTET_CHECK(t->dtype == DType::f32 && t->numel() == param.numel() && t->device == param.device,
                "adamw", "param, grad, m and v must be f32 with ", param.numel(), " elements on ",
                device_name(param.device), ", got ", t->str());
  }
  OCTET_CHECK(step.step >= 1, "adamw", "step counts from 1, got ", step.step);
  OCTET_CHECK(step.beta1 >= 0.0f && step.beta1 < 1.0f && step.beta2 >= 0.0f && step.beta2 < 1.0f,
              "adamw", "betas must be in [0, 1), got ", step.beta1, " and ", step.beta2);
  if (step.max_grad_norm > 0.0f) {
    OCTET_CHECK(grad_sum_sq.dtype == DType::f32 && grad_sum_sq.numel() == 1 &&
                    grad_sum_sq.device == param.device && grad_sum_sq.data != nullptr,
                "adamw", "clipping (max_grad_norm=", step.max_grad_norm,
                ") needs the gradients' sum of squares as f32[1] on ", device_name(param.device),
                ", got ", grad_sum_sq.str());
  }
  if (!working.empty()) {
    OCTET_CHECK(working.dtype == DType::bf16 && working.numel() == param.numel() &&
                    working.device == param.device,
                "adamw", "the working copy must be bf16 with ", param.numel(), " elements on ",
                device_name(param.device), ", got ", working.str());
  }
  if (param.numel() == 0) return;
  if (param.device.is_cpu()) {
    if (!working.empty())
      return cpu::adamw_step_to_bf16(param, grad, m, v, step, grad_sum_sq, working);
    return cpu::adamw_step(param, grad, m, v, step, grad_sum_sq);
  }
  cuda_adamw_step(param, grad, m, v, step, grad_sum_sq);
  if (!working.empty()) convert(param, working);
}

void adamw_step_decayed_first(const Tensor& param, const Tensor& grad, const Tensor& m,
                              const Tensor& v, int64_t first, int64_t decayed,
                              const AdamWStep& step, const Tensor& grad_sum_sq,
                              const Tensor& working) {
  const int64_t n = param.numel(), split = std::clamp(decayed - first, int64_t{0}, n);
  const auto part = [](const Tensor& t, int64_t begin, int64_t end) {
    return t.elements(begin, end);
  };
  const auto working_part = [&](int64_t begin, int64_t end) {
    if (working.empty()) return Tensor();
    OCTET_CHECK(working.dtype == DType::bf16 && working.numel() == n, "adamw",
                "the working copy must be bf16 with ", n, " elements, got ", working.str());
    return working.elements(begin, end);
  };
  adamw_step(part(param, 0, split), part(grad, 0, split), part(m, 0, split), part(v, 0, split),
             step, grad_sum_sq, working_part(0, split));
  AdamWStep undecayed = step;
  undecayed.weight_decay = 0.0f;
  adamw_step(part(param, split, n), part(grad, split, n), part(m, split, n), part(v, split, n),
             undecayed, grad_sum_sq, working_part(split, n));
}

void sum_of_squares(const Tensor& x, const Tensor& out) {
  OCTET_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16, "sum_of_squares",
              "x must be f32 or bf16, got ", x.str());
  OCTET_CHECK(out.dtype == DType::f32 && out.numel() == 1 && out.device == x.device,
              "sum_of_squares", "out must be f32[1] on ", device_name(x.device), ", got ",
              out.str());
  if (x.device.is_cpu()) return cpu::sum_of_squares(x, out);
  OCTET_CUDA_RETURN("sum_of_squares", x, sum_of_squares, x, out);
}

void add_scaled_sum(const Tensor& x, const Tensor& out, double scale) {
  OCTET_CHECK(x.dtype == DType::f32, "add_scaled_sum", "x must be f32, got ", x.str());
  OCTET_CHECK(out.dtype == DType::f32 && out.numel() == 1 && out.device == x.device,
              "add_scaled_sum", "out must be f32[1] on ", device_name(x.device), ", got ",
              out.str());
  if (x.device.is_cpu()) return cpu::add_scaled_sum(x, out, scale);
  OCTET_CUDA_RETURN("add_scaled_sum", x, add_scaled_sum, x, out, scale);
}

}  // namespace octet::kernels
