// scripts/probe_cublaslt_fp8.cu: which FP8 GEMMs (e4m3 x e4m3, "TN", per-tensor scales) does
// the cuBLASLt at hand take? Prints, in cuBLASLt's column-major terms (m rows of D, n columns,
// k), the heuristic's and the matmul's status for D bf16 and f32, with and without fast
// accumulation, for small m, n and k. Needs a GPU; docs/perf/gpu-h100.md has one run's answer.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -o /tmp/probe scripts/probe_cublaslt_fp8.cu \
//        -lcublasLt && /tmp/probe [octet]     # octet: scale modes set and alignment preferences
//                                             # as kernels/cuda/cublaslt.cpp sets them
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#define CK(x)                                                 \
  do {                                                        \
    auto e_ = (x);                                            \
    if (e_ != 0) {                                            \
      printf("fail %s line %d: %d\n", #x, __LINE__, (int)e_); \
    }                                                         \
  } while (0)
int main(int argc, char**) {
  const bool octet_way = argc > 1;  // scale modes set explicitly, 256-byte alignment preferences
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  printf("cublasLt version %zu\n", cublasLtGetVersion());
  void *a, *b, *d, *ws;
  float *sa, *sb;
  CK(cudaMalloc(&a, 1 << 20));
  CK(cudaMalloc(&b, 1 << 20));
  CK(cudaMalloc(&d, 1 << 22));
  CK(cudaMalloc(&ws, 32 << 20));
  CK(cudaMalloc(&sa, 16));
  CK(cudaMalloc(&sb, 16));
  CK(cudaMemset(a, 0x38, 1 << 20));
  CK(cudaMemset(b, 0x38, 1 << 20));
  float one = 1;
  CK(cudaMemcpy(sa, &one, 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sb, &one, 4, cudaMemcpyHostToDevice));
  int ms[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
  int ks[] = {16, 32, 48, 64, 80};
  for (int dt = 0; dt < 2; ++dt)
    for (int fa = 0; fa < 2; ++fa)
      for (int k : ks)
        for (int m : ms)
          for (int n : ms) {
            cudaDataType_t dty = dt ? CUDA_R_32F : CUDA_R_16BF;
            cublasLtMatmulDesc_t desc;
            CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
            int8_t f = fa;
            CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
            CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
            CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &f, sizeof f));
            CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
                                              sizeof sa));
            CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
                                              sizeof sb));
            if (octet_way) {
              int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
              CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                                sizeof mode));
              CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                                sizeof mode));
            }
            cublasLtMatrixLayout_t la, lb, ld;
            CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k));
            CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k));
            CK(cublasLtMatrixLayoutCreate(&ld, dty, m, n, m));
            cublasLtMatmulPreference_t p;
            CK(cublasLtMatmulPreferenceCreate(&p));
            uint64_t wsb = 32 << 20;
            CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &wsb, sizeof wsb));
            if (octet_way) {
              uint32_t al = 256;
              CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                      &al, sizeof al));
              CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                      &al, sizeof al));
              CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                      &al, sizeof al));
              CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                      &al, sizeof al));
            }
            cublasLtMatmulHeuristicResult_t r{};
            int found = 0;
            cublasStatus_t hs =
                cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, p, 1, &r, &found);
            cublasStatus_t ms_ = CUBLAS_STATUS_NOT_SUPPORTED;
            float alpha = 1, beta = 0;
            if (hs == 0 && found)
              ms_ = cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &r.algo, ws,
                                   wsb, 0);
            cudaError_t ce = cudaDeviceSynchronize();
            float got = 0;
            if (ms_ == 0 && dt) cudaMemcpy(&got, d, 4, cudaMemcpyDeviceToHost);
            printf("D=%s fast=%d m=%d n=%d k=%d heur=%d found=%d matmul=%d cuda=%d d00=%g\n",
                   dt ? "f32" : "bf16", fa, m, n, k, (int)hs, found, (int)ms_, (int)ce, got);
            cublasLtMatmulPreferenceDestroy(p);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(ld);
            cublasLtMatmulDescDestroy(desc);
          }
  return 0;
}
