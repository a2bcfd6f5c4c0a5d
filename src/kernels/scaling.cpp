// kernels/scaling.cpp: validation of the delayed-scaling update and dispatch by device.
#include "kernels/scaling.h"

#include "core/error.h"
#include "kernels/backends.h"

namespace octet::kernels {

void delayed_scaling_update(const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                            const Tensor& fp8_max, const Tensor& nonfinite, AmaxReduce reduce,
                            int margin) {
  constexpr const char* op = "delayed_scaling_update";
  const int64_t n = history.rows();
  OCTET_CHECK(history.dtype == DType::f32 && history.shape.rank() == 2 && history.cols() >= 1, op,
              "history must be f32 [N, len >= 1], got ", history.str());
  for (const Tensor* t : {&scale, &scale_inv, &fp8_max}) {
    OCTET_CHECK(t->dtype == DType::f32 && t->numel() == n && t->device == history.device, op,
                "scale, scale_inv and fp8_max must be f32 [", n, "] on ",
                device_name(history.device), ", got ", t->str());
  }
  OCTET_CHECK(nonfinite.empty() || (nonfinite.dtype == DType::i32 && nonfinite.numel() == 1 &&
                                    nonfinite.device == history.device),
              op, "nonfinite must be i32 [1] on ", device_name(history.device), ", got ",
              nonfinite.str());
  OCTET_CHECK(margin > -100 && margin < 100, op, "margin ", margin, " is out of range");
  if (n == 0) return;
  if (history.device.is_cpu()) {
    return cpu::delayed_scaling_update(history, scale, scale_inv, fp8_max, nonfinite, reduce,
                                       margin);
  }
  OCTET_CUDA_RETURN(op, history, delayed_scaling_update, history, scale, scale_inv, fp8_max,
                    nonfinite, reduce, margin);
}

}  // namespace octet::kernels
