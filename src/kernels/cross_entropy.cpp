// kernels/cross_entropy.cpp: validation of the cross-entropy kernel and dispatch by device.
#include "kernels/cross_entropy.h"

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                   const Tensor& dlogits, float grad_scale) {
  constexpr const char* op = "cross_entropy";
  const Device device = logits.device;
  const int64_t rows = logits.rows(), vocab = logits.cols();
  check_activation(op, "logits", logits, rows, vocab, device);
  check_tensor(op, "targets", targets, DType::i32, rows, device);
  check_tensor(op, "losses", losses, DType::f32, rows, device);
  check_no_overlap(op, "losses", losses, "logits", logits);
  if (!dlogits.empty()) {
    check_activation(op, "dlogits", dlogits, rows, vocab, device);
    OCTET_CHECK(dlogits.dtype == logits.dtype, op, "dlogits must have logits' dtype ",
                dtype_name(logits.dtype), ", got ", dlogits.str());
    if (dlogits.data != logits.data) check_no_overlap(op, "dlogits", dlogits, "logits", logits);
    check_no_overlap(op, "dlogits", dlogits, "losses", losses);
  }
  if (rows == 0) return;
  OCTET_CHECK(vocab > 0, op, "logits ", logits.str(), " has no columns");
  if (device.is_cpu()) return cpu::cross_entropy(logits, targets, losses, dlogits, grad_scale);
  // The targets stay on the device: the kernel reports an out-of-range one as a NaN loss.
  OCTET_CUDA_RETURN(op, logits, cross_entropy, logits, targets, losses, dlogits, grad_scale);
}

}  // namespace octet::kernels
