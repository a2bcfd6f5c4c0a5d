// cudasim/octet/gemm_without_cublaslt.cpp: octet's CUDA GEMM entry points in an emulated-device
// build that has no emulated cuBLASLt (cudasim/cublaslt/ absent): every call is an error that
// says so. Built only then; with cudasim_cublaslt, src/kernels/cuda/gemm_cuda.cpp is used.
#include "core/error.h"
#include "kernels/backends.h"

namespace octet::kernels::cuda {

size_t gemm_workspace_bytes(const Tensor&, const Tensor&, const Tensor&, const GemmOptions&,
                            GemmDims) {
  OCTET_FAIL("gemm", "this emulated-device build has no emulated cuBLASLt (cudasim/cublaslt)");
}

void gemm(const Tensor&, const Tensor&, const Tensor&, const GemmOptions&, GemmDims) {
  OCTET_FAIL("gemm", "this emulated-device build has no emulated cuBLASLt (cudasim/cublaslt)");
}

size_t gemm_plan_count() {
  return 0;
}

}  // namespace octet::kernels::cuda
