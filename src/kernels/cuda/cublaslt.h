// kernels/cuda/cublaslt.h: cuBLASLt matmuls in octet's row-major terms: one cublasLt
// handle per device, made on first use, and a plan (matmul descriptor, layouts and the
// heuristic's algorithm) cached per problem, so that only the first call of a shape
// allocates (host memory). Internal to kernels/cuda.
// defines: kUnscaled, LtCall, lt_native, lt_matmul, lt_plan_count
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace octet::kernels::cuda {

constexpr int32_t kUnscaled = -1;  // not an FP8 operand: no scale mode

// One matmul: C [m, n] (row stride ldc) = alpha op(A) op(B) (times the scales) + beta C,
// row-major, fp32 accumulation; C is read only when beta != 0. FP8 operands carry a
// cublasLtMatmulMatrixScale_t mode each and a device pointer to their scales in that
// mode's layout (nullptr: 1, SCALAR_32F only).
struct LtCall {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  DType a_type = DType::f32, b_type = DType::f32, c_type = DType::f32;
  int64_t m = 0, n = 0, k = 0, ldc = 0;
  bool trans_a = false, trans_b = true;
  float alpha = 1.0f, beta = 0.0f;
  int32_t a_mode = kUnscaled, b_mode = kUnscaled;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  bool fast_accum = false;    // FP8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM
  void* workspace = nullptr;  // cuBLASLt's scratch, 256-byte aligned
  size_t workspace_bytes = 0;
};

// Whether cuBLASLt has an algorithm for this call's problem (its plan made on first use).
// False only for a scaled FP8 call the heuristic refuses (CUBLAS_STATUS_NOT_SUPPORTED or no
// algorithm), or one whose matmul was refused before (lt_matmul): the caller then emulates
// it. That decision is cached with the plan and reported once on stderr. Throws
// octet::Error on other failures.
bool lt_native(const LtCall& call, int device);

// Enqueues the matmul on stream() (the plan for its problem made on first use; the host
// never waits) and returns true. Returns false, with nothing enqueued, when cuBLASLt refuses
// a scaled FP8 call at the matmul itself (the caller then emulates it; lt_native says false
// from then on). Throws octet::Error ("[gemm] ...") naming the problem when cuBLASLt has no
// algorithm for any other call or fails.
[[nodiscard]] bool lt_matmul(const LtCall& call, int device);

// Plans made so far in this process.
size_t lt_plan_count();

}  // namespace octet::kernels::cuda
