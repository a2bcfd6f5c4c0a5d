// cudasim/cublaslt_log.h: what the emulated cuBLASLt tells a test: every
// cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul call it saw (problem, layouts, scale
// modes, the status it returned and why), and the cuBLAS version it emulates.
// defines: cudasim::LtCallKind, cudasim::LtCallRecord, cudasim::cublaslt_calls,
//          cudasim::cublaslt_clear_calls, cudasim::cublaslt_set_version
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cudasim {

enum class LtCallKind { heuristic, matmul };

// One call, in cuBLASLt's own (column-major) terms: D [m, n] = op(A) [m, k] op(B) [k, n].
struct LtCallRecord {
  LtCallKind kind = LtCallKind::matmul;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string reason;  // why status is not SUCCESS, with the documentation section
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t a_type{}, b_type{}, c_type{}, d_type{};
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  int32_t a_scale_mode = 0, b_scale_mode = 0;  // cublasLtMatmulMatrixScale_t
  bool a_scale_set = false, b_scale_set = false;
  bool fast_accum = false;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  float alpha = 0.0f, beta = 0.0f;  // matmul only
  size_t workspace_bytes = 0;       // matmul: the size passed; heuristic: the preference's
  int device = 0;                   // the current device during the call
  int handle_device = 0;            // the current device when the handle was created
};

// Every call since the start of the process or the last cublaslt_clear_calls, in order.
std::vector<LtCallRecord> cublaslt_calls();
void cublaslt_clear_calls();

// The cuBLAS version the emulation answers as (cublasLtGetVersion), 130000 by default.
// Below 120900 the OUTER_VEC_32F, VEC128_32F and BLK128x128_32F scale modes are refused with
// CUBLAS_STATUS_NOT_SUPPORTED: they arrived with cuBLAS 12.9 (Hopper only). Returns the
// previous version.
int cublaslt_set_version(int version);

}  // namespace cudasim
