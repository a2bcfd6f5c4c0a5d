// kernels/cpu/gemm_noonednn.cpp: the oneDNN engine's functions in a build without
// oneDNN: it is reported missing, so cpu::gemm uses the reference engine.
#include "core/error.h"
#include "kernels/cpu/gemm_cpu.h"

namespace octet::kernels::cpu {

bool onednn_available() {
  return false;
}

bool onednn_bf16_available() {
  return false;
}

void onednn_gemm(const Matmul&) {
  OCTET_FAIL("gemm",
             "this octet was built without oneDNN; install libdnnl-dev and reconfigure, or "
             "use the reference engine (OCTET_CPU_GEMM=reference)");
}

}  // namespace octet::kernels::cpu
