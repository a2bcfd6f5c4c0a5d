// kernels/embedding.cpp: validation of the embedding kernels and dispatch by device.
#include "kernels/embedding.h"

#include "kernels/backends.h"
#include "kernels/checks.h"

namespace octet::kernels {

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  constexpr const char* op = "embedding_forward";
  const Device device = table.device;
  OCTET_CHECK(table.shape.rank() == 2, op, "table must be [V, D], got ", table.str());
  check_activation(op, "table", table, table.rows(), table.cols(), device);
  check_tensor(op, "ids", ids, DType::i32, ids.numel(), device);
  check_activation(op, "out", out, ids.numel(), table.cols(), device);
  if (out.numel() == 0) return;
  if (device.is_cpu()) return cpu::embedding_forward(ids, table, out);
  OCTET_CUDA_RETURN(op, table, embedding_forward, ids, table, out);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  constexpr const char* op = "embedding_backward";
  const Device device = dtable.device;
  OCTET_CHECK(dtable.shape.rank() == 2, op, "dtable must be f32 [V, D], got ", dtable.str());
  check_tensor(op, "dtable", dtable, DType::f32, dtable.numel(), device);
  check_tensor(op, "ids", ids, DType::i32, ids.numel(), device);
  check_activation(op, "dout", dout, ids.numel(), dtable.cols(), device);
  if (dout.numel() == 0) return;
  if (device.is_cpu()) return cpu::embedding_backward(ids, dout, dtable);
  OCTET_CUDA_RETURN(op, dtable, embedding_backward, ids, dout, dtable);
}

}  // namespace octet::kernels
