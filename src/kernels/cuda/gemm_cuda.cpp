// kernels/cuda/gemm_cuda.cpp: the CUDA GEMM entry points. The cuBLASLt
// implementation (bf16 and FP8, TN layout, device-pointer scales) is the CUDA
// GEMM issue's work; until it lands the op says so instead of doing anything wrong.
#include "core/error.h"
#include "kernels/backends.h"

namespace octet::kernels::cuda {

size_t gemm_workspace_bytes(const Tensor&, const Tensor&, const Tensor&, const GemmOptions&,
                            GemmDims) {
  return 0;
}

void gemm(const Tensor& a, const Tensor& b, const Tensor&, const GemmOptions&, GemmDims dims) {
  OCTET_FAIL("gemm", "no CUDA implementation yet for ", dtype_name(a.dtype), " x ",
             dtype_name(b.dtype), " (", dims.m, "x", dims.n, "x", dims.k,
             "); the cuBLASLt GEMMs are not built in this version");
}

}  // namespace octet::kernels::cuda
