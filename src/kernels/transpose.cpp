// kernels/transpose.cpp: validation of transposes and dispatch by device.
#include "kernels/transpose.h"

#include "core/error.h"
#include "kernels/backends.h"

namespace octet::kernels {

void require_cuda(const char* op, const Tensor& t) {
  OCTET_CHECK(cuda_compiled(), op, t.str(),
              " is on a CUDA device but this octet was built without CUDA");
  OCTET_CHECK(t.device.index < cuda_device_count(), op, t.str(), " needs CUDA device ",
              t.device.index, " but this machine has ", cuda_device_count(), " usable GPU(s)");
}

void transpose(const Tensor& src, const Tensor& dst) {
  OCTET_CHECK(src.dtype == dst.dtype && src.device == dst.device, "transpose",
              "src and dst must share dtype and device: ", src.str(), " vs ", dst.str());
  OCTET_CHECK(dst.rows() == src.cols() && dst.cols() == src.rows(), "transpose", "dst must be [",
              src.cols(), ", ", src.rows(), "] for src ", src.str(), ", got ", dst.str());
  const auto* s = static_cast<const char*>(src.data);
  const auto* d = static_cast<const char*>(dst.data);
  OCTET_CHECK(s + src.nbytes() <= d || d + dst.nbytes() <= s, "transpose",
              "src and dst overlap; transpose is out of place");
  if (src.numel() == 0) return;
  if (src.device.is_cpu()) return cpu::transpose(src, dst);
  OCTET_CUDA_RETURN("transpose", src, transpose, src, dst);
}

}  // namespace octet::kernels
