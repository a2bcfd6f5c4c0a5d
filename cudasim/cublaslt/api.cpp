// cudasim/cublaslt/api.cpp: the emulated cuBLASLt's object calls: handles, matmul
// descriptors, matrix layouts and preferences, their attributes (each checked for its
// documented size), status names, and the element conversions of objects.h.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <new>

#include "objects.h"

namespace cudasim::lt {

bool is_fp8(cudaDataType_t t) {
  return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}

size_t element_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      return 1;
    default:
      return 0;
  }
}

const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_16F:
      return "CUDA_R_16F";
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
    case CUDA_R_8F_E4M3:
      return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2:
      return "CUDA_R_8F_E5M2";
    default:
      return "another cudaDataType_t";
  }
}

double load(const void* base, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[i];
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(base)[i],
                                                   t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
      return __half2float(__half(h));
    }
    default:
      return 0.0;
  }
}

void store(void* base, cudaDataType_t t, int64_t i, float v) {
  switch (t) {
    case CUDA_R_32F:
      static_cast<float*>(base)[i] = v;
      break;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
      break;
    case CUDA_R_16F:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      break;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      static_cast<__nv_fp8_storage_t*>(base)[i] =
          __nv_cvt_float_to_fp8(v, __NV_SATFINITE, t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
      break;
    default:
      break;
  }
}

namespace {

// Copies the attribute value when `size` is its documented size (else INVALID_VALUE, as
// the library answers a buffer of the wrong size).
template <class T>
cublasStatus_t take(T& field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace cudasim::lt

using namespace cudasim::lt;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasLtContext;
  if (*handle == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  cudaGetDevice(&(*handle)->device);  // recorded in the call log
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "unknown error";
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* out, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Desc* d = new (std::nothrow) Desc;
  if (d == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  d->compute = compute;
  d->scale_type = scale_type;
  *out = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete desc(d);
  return CUBLAS_STATUS_SUCCESS;
}

// Sizes per cublasLtMatmulDescAttributes_t (cuBLAS documentation 3.3.9): int32_t for modes,
// transposes and types, uint32_t for the epilogue, int8_t for FAST_ACCUM, pointers.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t handle,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  Desc* d = desc(handle);
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return take(d->compute, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return take(d->scale_type, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return take(d->pointer_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take(d->trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take(d->trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSC:
      return take(d->trans_c, buf, size);
    case CUBLASLT_MATMUL_DESC_FILL_MODE:
      return take(d->fill_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return take(d->bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      return take(d->a_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      return take(d->b_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
      return take(d->c_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
      return take(d->d_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
      return take(d->amax_d, buf, size);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
      return take(d->fast_accum, buf, size);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
      return take(d->a_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
      return take(d->b_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_C_SCALE_MODE:
      return take(d->c_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_D_SCALE_MODE:
      return take(d->d_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE:
      return take(d->aux_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE:
      return take(d->d_out_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER:
      return take(d->d_out_scale, buf, size);
    default:
      // Accepted here like the library does; the heuristic and matmul then refuse the
      // descriptor, since the emulation cannot honour an attribute it does not model.
      if (buf == nullptr || size == 0) return CUBLAS_STATUS_INVALID_VALUE;
      d->other_set = true;
      d->other_attribute = static_cast<int>(attr);
      return CUBLAS_STATUS_SUCCESS;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* out, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Layout* l = new (std::nothrow) Layout;
  if (l == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *out = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete layout(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t handle,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  Layout* l = layout(handle);
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return take(l->type, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return take(l->order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return take(l->rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return take(l->cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return take(l->ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return take(l->batch, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated (batch strides, planar complex)
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Preference* p = new (std::nothrow) Preference;
  if (p == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  *out = reinterpret_cast<cublasLtMatmulPreference_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete preference(p);
  return CUBLAS_STATUS_SUCCESS;
}

// Sizes per cublasLtMatmulPreferenceAttributes_t: uint64_t workspace, uint32_t alignments.
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t handle,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  Preference* p = preference(handle);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return take(p->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return take(p->align_a, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return take(p->align_b, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return take(p->align_c, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return take(p->align_d, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  }
}

}  // extern "C"
