// cudasim/cublaslt/objects.h: the emulated cuBLASLt's objects behind NVIDIA's opaque handles
// (matmul descriptor, matrix layout, preference, context) and the element conversions its
// matmul uses. Internal to cudasim/cublaslt.
// defines: cudasim::lt::Desc, Layout, Preference, element_size, is_fp8, load, store,
//          kAlgoMagic
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

struct cublasLtContext {
  uint64_t magic = 0x6c74637478ull;  // "ltctx"
  int device = 0;
};

namespace cudasim::lt {

constexpr uint64_t kAlgoMagic = 0x63756461736c7431ull;  // stamped into algo.data[0]

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N, trans_c = CUBLAS_OP_N;
  int32_t fill_mode = CUBLAS_FILL_MODE_FULL;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  const void* c_scale = nullptr;
  const void* d_scale = nullptr;
  void* amax_d = nullptr;
  int8_t fast_accum = 0;
  int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t c_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t d_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t aux_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t d_out_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  const void* d_out_scale = nullptr;
  bool other_set = false;  // an attribute the emulation does not model was set
  int other_attribute = -1;
};

struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
};

struct Preference {
  uint64_t max_workspace = 0;
  uint32_t align_a = 256, align_b = 256, align_c = 256, align_d = 256;  // documented defaults
};

inline Desc* desc(cublasLtMatmulDesc_t d) {
  return reinterpret_cast<Desc*>(d);
}
inline Layout* layout(cublasLtMatrixLayout_t l) {
  return reinterpret_cast<Layout*>(l);
}
inline Preference* preference(cublasLtMatmulPreference_t p) {
  return reinterpret_cast<Preference*>(p);
}

bool is_fp8(cudaDataType_t t);
// Bytes of one element; 0 for a type the emulation does not know.
size_t element_size(cudaDataType_t t);
// Element i of an array of type t, widened exactly to double.
double load(const void* base, cudaDataType_t t, int64_t i);
// Stores v (already rounded to f32 by the epilogue) as element i, rounded to nearest even;
// FP8 saturates to the largest finite value.
void store(void* base, cudaDataType_t t, int64_t i, float v);
const char* type_name(cudaDataType_t t);

}  // namespace cudasim::lt
