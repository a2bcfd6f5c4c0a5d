// cudasim/cublaslt/tests/test_cublaslt.cpp: the emulated cuBLASLt against the documented
// sm_90 rules (each accepted or refused as the cuBLAS documentation says, with the status the
// library returns) and its numbers against a double reference.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cudasim/cublaslt_log.h"

namespace {

// Two emulated devices for OperandsOfAnotherDeviceFault (read once, before the first CUDA call).
const bool kTwoDevices = setenv("CUDASIM_DEVICES", "2", 0) == 0;

// A device buffer (cudaMalloc) holding a copy of `bytes`.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess); }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  std::vector<T> read(size_t n) const {
    std::vector<T> out(n);
    cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
  }
};

uint8_t to_fp8(float v, bool e5m2) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}
double from_fp8(uint8_t v, bool e5m2) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, e5m2 ? __NV_E5M2 : __NV_E4M3)));
}

// One FP8 matmul in cuBLASLt terms, TN by default: A stored k x m (lda k), B stored k x n
// (ldb k), C = D m x n (ld m). Fields are set, then heuristic() / matmul() run it.
struct Fp8Gemm {
  int64_t m = 32, n = 8, k = 256;
  cudaDataType_t a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E4M3, d_type = CUDA_R_32F;
  cudaDataType_t c_type = CUDA_R_32F;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int8_t fast_accum = 0;
  uint32_t align = 16;
  float alpha = 1.0f, beta = 0.0f;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  const void* d_scale = nullptr;

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;

  Fp8Gemm() { EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS); }
  ~Fp8Gemm() {
    release();
    cublasLtDestroy(handle);
  }
  void release() {
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {la, lb, lc, ld})
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    desc = nullptr, la = lb = lc = ld = nullptr, pref = nullptr;
  }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, T v) {
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof v), CUBLAS_STATUS_SUCCESS);
  }
  void build() {
    release();
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(ta));
    set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(tb));
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
    set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum);
    if (a_scale != nullptr) set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    if (b_scale != nullptr) set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
    if (d_scale != nullptr) set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale);
    const bool at = ta == CUBLAS_OP_T, bt = tb == CUBLAS_OP_T;
    cublasLtMatrixLayoutCreate(&la, a_type, at ? k : m, at ? m : k, at ? k : m);
    cublasLtMatrixLayoutCreate(&lb, b_type, bt ? n : k, bt ? k : n, bt ? n : k);
    cublasLtMatrixLayoutCreate(&lc, c_type, m, n, m);
    cublasLtMatrixLayoutCreate(&ld, d_type, m, n, m);
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t ws = 0;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
  }
  cublasStatus_t heuristic() {
    build();
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, 1, &result, &found);
    EXPECT_EQ(found, s == CUBLAS_STATUS_SUCCESS ? 1 : 0);
    return s;
  }
  cublasStatus_t matmul(const void* a, const void* b, void* c, void* d, void* ws = nullptr,
                        size_t ws_bytes = 0) {
    build();
    return cublasLtMatmul(handle, desc, &alpha, a, la, b, lb, &beta, c, lc, d, ld, nullptr, ws,
                          ws_bytes, nullptr);
  }
};

// Operands of exact FP8 values, stored K-major (TN), and a device D/C for them.
struct Operands {
  std::vector<uint8_t> a, b;
  DeviceBuffer da, db, dd;
  Operands(const Fp8Gemm& g, unsigned seed)
      : a(make(g.m * g.k, g.a_type == CUDA_R_8F_E5M2, seed)),
        b(make(g.n * g.k, g.b_type == CUDA_R_8F_E5M2, seed + 1)),
        da(a),
        db(b),
        dd(static_cast<size_t>(g.m * g.n) * 4) {}
  static std::vector<uint8_t> make(int64_t count, bool e5m2, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<uint8_t> v(static_cast<size_t>(count));
    for (auto& x : v) x = to_fp8(dist(rng), e5m2);
    return v;
  }
  // sum_l a(i, l) b(l, j) over K [k0, k1) in double (A and B both K-major); with `absolute`,
  // sum_l |a(i, l) b(l, j)|.
  double dot(const Fp8Gemm& g, int64_t i, int64_t j, int64_t k0, int64_t k1,
             bool absolute = false) const {
    double s = 0;
    for (int64_t l = k0; l < k1; ++l) {
      const double t = from_fp8(a[i * g.k + l], g.a_type == CUDA_R_8F_E5M2) *
                       from_fp8(b[j * g.k + l], g.b_type == CUDA_R_8F_E5M2);
      s += absolute ? std::fabs(t) : t;
    }
    return s;
  }
};

// The bound on an FP8 matmul's sum against the exact one, per unit of sum |a b| (times its
// scales): the tensor cores' additions keep 13 fraction bits and truncate, each within 2^-13
// of its result (an H100's, measured; matmul.cpp emulates them), and the promotions into fp32
// and the scale products round to nearest in f32, within 2^-24 each: gamma_{K+5}(2^-13) covers
// K additions and five more roundings (Higham (3.5)).
double fp8_sum_bound(int64_t k) {
  const double u = 0x1p-13;
  return (k + 5) * u / (1 - (k + 5) * u);
}

class CudasimCublasLt : public ::testing::Test {
 protected:
  void SetUp() override { cudasim::cublaslt_clear_calls(); }
};

TEST_F(CudasimCublasLt, Fp8TensorwideTnMatchesDoubleReference) {
  Fp8Gemm g;
  Operands ops(g, 1);
  DeviceBuffer sa(std::vector<float>{0.5f}), sb(std::vector<float>{3.0f});
  g.a_scale = sa.ptr;
  g.b_scale = sb.ptr;
  g.alpha = 2.0f;
  ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr), CUBLAS_STATUS_SUCCESS);
  const auto d = ops.dd.read<float>(static_cast<size_t>(g.m * g.n));
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      const double want = 2.0 * 0.5 * 3.0 * ops.dot(g, i, j, 0, g.k);
      const double mag = 2.0 * 0.5 * 3.0 * ops.dot(g, i, j, 0, g.k, true);
      EXPECT_NEAR(d[i + j * g.m], want, mag * fp8_sum_bound(g.k) + 1e-30) << i << "," << j;
    }
}

TEST_F(CudasimCublasLt, Fp8SumsKeep13FractionBitsAndArePromotedEvery128KAsOnAnH100) {
  // The H100 measurement (scripts/probe_fp8_accumulator.py, docs/perf/gpu-h100.md): D(0, 0) =
  // 16 * 16 + x * y with x y = 256 * 2^-j as the last product of K. Within 128 products
  // 256 + 256 * 2^-13 survives and 256 + 256 * 2^-14 is lost; with K = 256 the last product
  // sits in the second 128 and survives down to 2^-23 (its own sum, promoted into fp32),
  // unless fast accumulation keeps one sum for all of K.
  for (const int64_t k : {int64_t{128}, int64_t{256}}) {
    for (const int8_t fast : {int8_t{0}, int8_t{1}}) {
      for (int j = 8; j <= 25; ++j) {
        Fp8Gemm g;
        g.m = 16, g.n = 16, g.k = k;
        g.fast_accum = fast;
        std::vector<uint8_t> a(static_cast<size_t>(g.m * g.k), 0),
            b(static_cast<size_t>(g.n * g.k), 0);
        a[0] = b[0] = to_fp8(16.0f, false);
        const int ea = (j - 8) / 2, eb = (j - 8) - ea;  // e4m3 reaches 2^-9
        a[static_cast<size_t>(k - 1)] = to_fp8(std::ldexp(1.0f, -ea), false);
        b[static_cast<size_t>(k - 1)] = to_fp8(std::ldexp(1.0f, -eb), false);
        DeviceBuffer da(a), db(b), dd(static_cast<size_t>(g.m * g.n) * 4);
        ASSERT_EQ(g.matmul(da.ptr, db.ptr, dd.ptr, dd.ptr), CUBLAS_STATUS_SUCCESS);
        const double got = dd.read<float>(1)[0];
        const bool own_sum = k == 256 && fast == 0;
        const bool kept = j <= (own_sum ? 23 : 13);
        EXPECT_EQ(got, kept ? 256.0 + std::ldexp(256.0, -j) : 256.0)
            << "K " << k << " fast " << int{fast} << " j " << j;
      }
    }
  }
}

TEST_F(CudasimCublasLt, Fp8NeedsTnOnSm90) {
  // cublasLtMatmul() FP8 requirements: "A must be transposed and B non-transposed".
  for (auto [ta, tb] : {std::pair{CUBLAS_OP_N, CUBLAS_OP_N},
                        {CUBLAS_OP_N, CUBLAS_OP_T},
                        {CUBLAS_OP_T, CUBLAS_OP_T}}) {
    Fp8Gemm g;
    g.ta = ta;
    g.tb = tb;
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED) << ta << tb;
    Operands ops(g, 2);
    EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
  const auto calls = cudasim::cublaslt_calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_NE(calls.back().reason.find("TN"), std::string::npos) << calls.back().reason;
}

TEST_F(CudasimCublasLt, Fp8TypeTable) {
  struct Case {
    cudaDataType_t a, b, c, d;
    cublasStatus_t want;
  };
  const Case cases[] = {
      {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_STATUS_SUCCESS},
      {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_32F, CUDA_R_32F, CUBLAS_STATUS_SUCCESS},
      {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_8F_E5M2, CUBLAS_STATUS_SUCCESS},
      {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_8F_E4M3, CUBLAS_STATUS_SUCCESS},
      // no E5M2 x E5M2 row; an E5M2 D needs an E5M2 operand; C f32 only with D f32
      {CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_STATUS_NOT_SUPPORTED},
      {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_8F_E5M2, CUBLAS_STATUS_NOT_SUPPORTED},
      {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_16BF, CUBLAS_STATUS_INVALID_VALUE},
      {CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_STATUS_NOT_SUPPORTED},
  };
  for (const Case& c : cases) {
    Fp8Gemm g;
    g.a_type = c.a;
    g.b_type = c.b;
    g.c_type = c.c;
    g.d_type = c.d;
    EXPECT_EQ(g.heuristic(), c.want) << c.a << " " << c.b << " " << c.c << " " << c.d;
  }
}

TEST_F(CudasimCublasLt, Fp8SixteenByteAlignment) {
  {  // D rows of bf16 spanning 20 * 2 = 40 bytes
    Fp8Gemm g;
    g.m = 20;
    g.c_type = g.d_type = CUDA_R_16BF;
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // K of 8 FP8 elements: A and B rows span 8 bytes
    Fp8Gemm g;
    g.k = 8;
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // the preference promises only 8-byte aligned operands
    Fp8Gemm g;
    g.align = 8;
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // A pointer 8 bytes past an allocation's start
    Fp8Gemm g;
    Operands ops(g, 3);
    DeviceBuffer shifted(ops.a.size() + 8);
    EXPECT_EQ(g.matmul(static_cast<char*>(shifted.ptr) + 8, ops.db.ptr, ops.dd.ptr, ops.dd.ptr),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // odd N (columns of D) needs no padding: only contiguous dimensions count
    Fp8Gemm g;
    g.n = 7;
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
  }
}

TEST_F(CudasimCublasLt, PointersMustBeDeviceMemory) {
  Fp8Gemm g;
  Operands ops(g, 4);
  const float host_scale = 1.0f;
  g.a_scale = &host_scale;
  EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr),
            CUBLAS_STATUS_EXECUTION_FAILED);
  g.a_scale = nullptr;
  EXPECT_EQ(g.matmul(ops.a.data(), ops.db.ptr, ops.dd.ptr, ops.dd.ptr),
            CUBLAS_STATUS_EXECUTION_FAILED);
  alignas(256) static char host_ws[512];
  EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr, host_ws, sizeof host_ws),
            CUBLAS_STATUS_EXECUTION_FAILED);
  DeviceBuffer ws(1024);
  EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr,
                     static_cast<char*>(ws.ptr) + 128, 512),
            CUBLAS_STATUS_INVALID_VALUE);  // workspace "Must be 256B aligned"
  EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr, ws.ptr, 1024),
            CUBLAS_STATUS_SUCCESS);
}

TEST_F(CudasimCublasLt, BlackwellScaleModesAreRefusedOnSm90) {
  for (int32_t mode :
       {CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0}) {
    Fp8Gemm g;
    DeviceBuffer s(4096);
    g.a_mode = g.b_mode = mode;
    g.a_scale = g.b_scale = s.ptr;
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

TEST_F(CudasimCublasLt, OuterVectorScalingWithF32OutputBetaAndFastAccum) {
  // 3.1.4.3: D_ij = alpha sA_i sB_j sum_l a_il b_lj + beta scale_C C_ij, D in {16F, 16BF, 32F}.
  Fp8Gemm g;
  g.n = 12;
  Operands ops(g, 5);
  std::vector<float> sa(g.m), sb(g.n), c0(g.m * g.n);
  for (int64_t i = 0; i < g.m; ++i) sa[i] = 0.25f * static_cast<float>(i + 1);
  for (int64_t j = 0; j < g.n; ++j) sb[j] = 1.0f / static_cast<float>(j + 2);
  for (size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>(i % 7) - 3.0f;
  DeviceBuffer dsa(sa), dsb(sb), dc(c0);
  g.a_mode = g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  g.a_scale = dsa.ptr;
  g.b_scale = dsb.ptr;
  g.fast_accum = 1;
  g.beta = 1.0f;
  ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, dc.ptr, dc.ptr), CUBLAS_STATUS_SUCCESS);
  const auto d = dc.read<float>(c0.size());
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      const double scale = static_cast<double>(sa[i]) * sb[j];
      const double prod = scale * ops.dot(g, i, j, 0, g.k);
      const double want = prod + static_cast<double>(c0[i + j * g.m]);
      // The sum's bound, then the f32 epilogue: the sum with C rounded once.
      const double mag = scale * ops.dot(g, i, j, 0, g.k, true);
      EXPECT_NEAR(d[i + j * g.m], want,
                  mag * fp8_sum_bound(g.k) + std::fabs(want) * 0x1p-23 + 1e-30);
    }
  // OUTER_VEC on one operand only, or with an FP8 D, is not promised.
  g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  g.c_type = CUDA_R_16BF;
  g.d_type = CUDA_R_8F_E4M3;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  // Before cuBLAS 12.9 there is no OUTER_VEC_32F.
  g.c_type = g.d_type = CUDA_R_32F;
  const int previous = cudasim::cublaslt_set_version(120800);
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  cudasim::cublaslt_set_version(previous);
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
}

TEST_F(CudasimCublasLt, BlockScalingLayoutsAndCombinations) {
  // 3.1.4.5: A (m = 384 rows of D, three row blocks) in 128x128 blocks, B (n = 8) in 1x128
  // tiles, K = 384 (L = 3, padded to L4 = 4 per row block).
  Fp8Gemm g;
  g.m = 384;
  g.n = 8;
  g.k = 384;
  Operands ops(g, 6);
  const int64_t L = 3, L4 = 4;
  // BLK128x128: K-major, L4 x ceil(M/128); VEC128: N-major, N x L (3.1.4.5.1).
  std::vector<float> sa(static_cast<size_t>(L4 * 3), 0.0f), sb(static_cast<size_t>(g.n * L));
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t b = 0; b < L; ++b) sa[p * L4 + b] = std::ldexp(1.0f, static_cast<int>(p * 3 + b));
  for (int64_t b = 0; b < L; ++b)
    for (int64_t j = 0; j < g.n; ++j) sb[b * g.n + j] = 0.5f + static_cast<float>(j + 8 * b);
  DeviceBuffer dsa(sa), dsb(sb);
  g.a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  g.a_scale = dsa.ptr;
  g.b_scale = dsb.ptr;
  ASSERT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr), CUBLAS_STATUS_SUCCESS);
  const auto d = ops.dd.read<float>(static_cast<size_t>(g.m * g.n));
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double want = 0, mag = 0;
      for (int64_t b = 0; b < L; ++b) {
        const double scale = sa[(i / 128) * L4 + b] * sb[b * g.n + j];
        want += scale * ops.dot(g, i, j, b * 128, b * 128 + 128);
        mag += scale * ops.dot(g, i, j, b * 128, b * 128 + 128, true);
      }
      EXPECT_NEAR(d[i + j * g.m], want, mag * fp8_sum_bound(g.k) + 1e-30) << i << "," << j;
    }
  // Not promised: 128x128 on both operands, fast accumulation, M or N not a multiple of 4,
  // a block mode beside a tensorwide one, an FP8 D.
  g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  g.fast_accum = 1;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  g.fast_accum = 0;
  g.n = 6;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  g.n = 8;
  g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  g.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  g.c_type = CUDA_R_16BF;
  g.d_type = CUDA_R_8F_E4M3;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  g.c_type = g.d_type = CUDA_R_16BF;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
  // Block scales must start 16-byte aligned (3.1.4.5.1).
  DeviceBuffer big(sb.size() * 4 + 16);
  g.b_scale = static_cast<char*>(big.ptr) + 4;
  EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(CudasimCublasLt, Fp8OutputAppliesDScaleAndReportsAmax) {
  Fp8Gemm g;
  g.c_type = CUDA_R_16BF;
  g.d_type = CUDA_R_8F_E4M3;
  Operands ops(g, 7);
  DeviceBuffer ds(std::vector<float>{0.125f}), amax(4);
  g.d_scale = ds.ptr;
  g.build();
  void* amax_ptr = amax.ptr;
  g.set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_ptr);
  ASSERT_EQ(cublasLtMatmul(g.handle, g.desc, &g.alpha, ops.da.ptr, g.la, ops.db.ptr, g.lb, &g.beta,
                           ops.dd.ptr, g.lc, ops.dd.ptr, g.ld, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  const auto d = ops.dd.read<uint8_t>(static_cast<size_t>(g.m * g.n));
  // D_temp, what the D scale and amax apply to: the same matmul with an f32 D (its sum's
  // accuracy is the other tests' business).
  Fp8Gemm f;
  f.m = g.m, f.n = g.n, f.k = g.k;
  DeviceBuffer dtemp(static_cast<size_t>(g.m * g.n) * 4);
  ASSERT_EQ(f.matmul(ops.da.ptr, ops.db.ptr, dtemp.ptr, dtemp.ptr), CUBLAS_STATUS_SUCCESS);
  const auto temp = dtemp.read<float>(static_cast<size_t>(g.m * g.n));
  float want_amax = 0;
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      const float acc = temp[i + j * g.m];
      want_amax = std::max(want_amax, std::fabs(acc));
      // D = scale_D * D_temp rounded once to E4M3 (saturating): exact to compare bitwise.
      EXPECT_EQ(d[i + j * g.m], to_fp8(acc * 0.125f, false)) << i << "," << j;
    }
  EXPECT_EQ(amax.read<float>(1)[0], want_amax);
  // A D scale on a non-FP8 D is an error (3.1.4 note).
  g.d_type = g.c_type;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(CudasimCublasLt, Bf16IsNotScaled) {
  // bf16 x bf16 -> f32, NN, no scales: the plain "Datatypes Supported" row.
  const int64_t m = 5, n = 3, k = 7;
  std::vector<__nv_bfloat16> a(m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = __float2bfloat16_rn(0.5f * static_cast<float>(i % 5) - 1);
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = __float2bfloat16_rn(0.25f * static_cast<float>(i % 3) + 1);
  DeviceBuffer da(a), db(b), dd(static_cast<size_t>(m * n) * 4);
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m);
  const float alpha = 1.0f, beta = 0.0f;
  ASSERT_EQ(cublasLtMatmul(h, desc, &alpha, da.ptr, la, db.ptr, lb, &beta, dd.ptr, lc, dd.ptr, lc,
                           nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  const auto d = dd.read<float>(static_cast<size_t>(m * n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double want = 0;
      for (int64_t l = 0; l < k; ++l)
        want +=
            static_cast<double>(__bfloat162float(a[i + l * m])) * __bfloat162float(b[l + j * k]);
      EXPECT_FLOAT_EQ(d[i + j * m], static_cast<float>(want));
    }
  // A scale on a non-narrow A is an error (3.1.4 note; INVALID_VALUE per 3.3.9).
  DeviceBuffer s(std::vector<float>{1.0f});
  const void* sp = s.ptr;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sp, sizeof sp);
  EXPECT_EQ(cublasLtMatmul(h, desc, &alpha, da.ptr, la, db.ptr, lb, &beta, dd.ptr, lc, dd.ptr, lc,
                           nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // An attribute of the wrong size.
  const int64_t wide = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
            CUBLAS_STATUS_INVALID_VALUE);
  for (auto* l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);
}

TEST_F(CudasimCublasLt, RecordsEveryCall) {
  Fp8Gemm g;
  Operands ops(g, 8);
  g.fast_accum = 1;
  ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr), CUBLAS_STATUS_SUCCESS);
  g.ta = CUBLAS_OP_N;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  const auto calls = cudasim::cublaslt_calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].kind, cudasim::LtCallKind::heuristic);
  EXPECT_EQ(calls[1].kind, cudasim::LtCallKind::matmul);
  EXPECT_EQ(calls[1].m, 32);
  EXPECT_EQ(calls[1].n, 8);
  EXPECT_EQ(calls[1].k, 256);
  EXPECT_EQ(calls[1].a_type, CUDA_R_8F_E4M3);
  EXPECT_EQ(calls[1].d_type, CUDA_R_32F);
  EXPECT_EQ(calls[1].trans_a, CUBLAS_OP_T);
  EXPECT_EQ(calls[1].trans_b, CUBLAS_OP_N);
  EXPECT_EQ(calls[1].lda, 256);
  EXPECT_TRUE(calls[1].fast_accum);
  EXPECT_EQ(calls[1].a_scale_mode, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
  EXPECT_EQ(calls[2].status, CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_FALSE(calls[2].reason.empty());
}

TEST_F(CudasimCublasLt, OperandsOfAnotherDeviceFault) {
  ASSERT_TRUE(kTwoDevices);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_GE(count, 2);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  {
    Fp8Gemm g;  // the handle made on device 1
    Operands ops(g, 9);
    // Without peer access a kernel on device 0 cannot read device 1's memory.
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr),
              CUBLAS_STATUS_EXECUTION_FAILED);
    EXPECT_NE(cudasim::cublaslt_calls().back().reason.find("device 1"), std::string::npos)
        << cudasim::cublaslt_calls().back().reason;
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(g.matmul(ops.da.ptr, ops.db.ptr, ops.dd.ptr, ops.dd.ptr), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudasim::cublaslt_calls().back().device, 1);
    EXPECT_EQ(cudasim::cublaslt_calls().back().handle_device, 1);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
