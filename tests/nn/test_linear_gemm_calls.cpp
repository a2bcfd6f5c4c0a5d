// tests/nn/test_linear_gemm_calls.cpp: on the emulated device (cudasim), the cuBLASLt calls one
// Linear forward and backward issues under each precision and FP8 recipe, read from the
// emulated cuBLASLt's call log: shapes, types, the "TN" layout FP8 needs on Hopper, scale
// modes, fast accumulation and beta (docs/DESIGN.md "FP8 GEMM layout"). Built only with
// OCTET_CUDASIM: a real cuBLASLt keeps no such log.
#if defined(OCTET_CUDASIM)

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/device_backend.h"
#include "cudasim/cublaslt_log.h"
#include "kernels/gemm.h"
#include "linear_testing.h"

namespace octet {
namespace {

// Two emulated devices, for AGemmOfCuda1TensorsRunsOnCuda1 (read before the first CUDA call;
// every other test here uses cuda:0).
const bool kTwoDevices = setenv("CUDASIM_DEVICES", "2", 0) == 0;

constexpr int32_t kScalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
constexpr int32_t kOuter = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
constexpr int32_t kVec128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
constexpr int32_t kBlk128 = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;

// One expected matmul in cuBLASLt's column-major terms (cuBLASLt's A is octet's B).
struct Call {
  const char* what;
  int64_t m, n, k;
  cudaDataType_t a, b, d;
  cublasOperation_t ta, tb;
  int32_t a_mode, b_mode;
  bool scaled, fast_accum;
  float beta;
};

std::string show(const cudasim::LtCallRecord& r) {
  std::ostringstream os;
  os << "m=" << r.m << " n=" << r.n << " k=" << r.k << " types " << r.a_type << "," << r.b_type
     << "->" << r.d_type << " trans " << r.trans_a << r.trans_b << " modes " << r.a_scale_mode
     << "," << r.b_scale_mode << " scales set " << r.a_scale_set << r.b_scale_set << " fast "
     << r.fast_accum << " beta " << r.beta << " status " << r.status << " " << r.reason;
  return os.str();
}

void expect_calls(const std::vector<Call>& want, const std::string& what) {
  std::vector<cudasim::LtCallRecord> got;
  for (const auto& r : cudasim::cublaslt_calls())
    if (r.kind == cudasim::LtCallKind::matmul) got.push_back(r);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const Call& w = want[i];
    const auto& r = got[i];
    const std::string where = what + " " + w.what + ": " + show(r);
    EXPECT_EQ(r.status, CUBLAS_STATUS_SUCCESS) << where;
    EXPECT_EQ(r.m, w.m) << where;
    EXPECT_EQ(r.n, w.n) << where;
    EXPECT_EQ(r.k, w.k) << where;
    EXPECT_EQ(r.a_type, w.a) << where;
    EXPECT_EQ(r.b_type, w.b) << where;
    EXPECT_EQ(r.d_type, w.d) << where;
    EXPECT_EQ(r.trans_a, w.ta) << where;
    EXPECT_EQ(r.trans_b, w.tb) << where;
    EXPECT_EQ(r.a_scale_mode, w.a_mode) << where;
    EXPECT_EQ(r.b_scale_mode, w.b_mode) << where;
    EXPECT_EQ(r.a_scale_set && r.b_scale_set, w.scaled) << where;
    EXPECT_EQ(r.fast_accum, w.fast_accum) << where;
    EXPECT_EQ(r.beta, w.beta) << where;
  }
}

void run_layer(nn::Precision precision, const char* recipe, int64_t t, int64_t in, int64_t out) {
  testing::Rng rng(testing::fresh_seed());
  nn::LinearConfig c;
  c.in_features = in;
  c.out_features = out;
  c.max_tokens = t;
  c.precision = precision;
  if (recipe != nullptr) c.recipe = fp8::Recipe::parse(recipe);
  c.device = Device::cuda(0);
  testing::LinearHarness h(c, rng);
  const DType dt = nn::activation_dtype(precision);
  cudasim::cublaslt_clear_calls();
  h.forward(testing::random_normal(t * in, 1.0, dt, rng));
  h.backward(testing::random_normal(t * out, 0x1p-8, dt, rng));
}

TEST(CudaLinearGemmCalls, Bf16ForwardDgradWgradLayouts) {
  const int64_t t = 64, in = 96, out = 80;
  run_layer(nn::Precision::bf16, nullptr, t, in, out);
  const auto bf = CUDA_R_16BF;
  expect_calls(
      {// y [T, out] = x Wᵀ: cuBLASLt D [out, T] = Wᵀ-as-stored (T) · xᵀ-as-stored (N)
       {"forward", out, t, in, bf, bf, bf, CUBLAS_OP_T, CUBLAS_OP_N, kScalar, kScalar, false, false,
        0.0f},
       // dx [T, in] = dy W: W stored [out, in] is cuBLASLt's A [in, out] as is (N)
       {"dgrad", in, t, out, bf, bf, bf, CUBLAS_OP_N, CUBLAS_OP_N, kScalar, kScalar, false, false,
        0.0f},
       // dW [out, in] += dyᵀ x into f32: x as is (N), dy transposed (T)
       {"wgrad", in, out, t, bf, bf, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, kScalar, kScalar, false,
        false, 1.0f}},
      "bf16");
}

TEST(CudaLinearGemmCalls, Fp8RecipesIssueTnGemmsWithTheirScaleModes) {
  // Multiples of 16. x and W in E4M3; dy in E5M2 under the hybrid formats (the default of
  // the per-tensor modes), in E4M3 under `:e4m3` (the default of row and block).
  const int64_t t = 64, in = 96, out = 80;
  const auto e4 = CUDA_R_8F_E4M3, e5 = CUDA_R_8F_E5M2, bf = CUDA_R_16BF, f32 = CUDA_R_32F;
  const auto T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  struct Recipe {
    const char* name;
    int32_t w, x_or_dy, wgrad;  // scale modes: the weight's, the activations', wgrad's
    bool fast_forward;
    cudaDataType_t dy;  // dy's FP8 type in dgrad and wgrad
  };
  // (tensor-delayed issues tensor-current's GEMMs; only its scales differ.)
  // block: W in 128x128 blocks (BLK128x128) against 1x128 tiles (VEC128); wgrad reads the
  // transposed copies of x and dy, both 1x128-tiled. Block-scaled GEMMs never ask for fast
  // accumulation; the others do in the forward GEMM only.
  const Recipe recipes[] = {{"tensor-current", kScalar, kScalar, kScalar, true, e5},
                            {"tensor-current:e4m3", kScalar, kScalar, kScalar, true, e4},
                            {"row:hybrid", kOuter, kOuter, kOuter, true, e5},
                            {"row", kOuter, kOuter, kOuter, true, e4},
                            {"block:hybrid", kBlk128, kVec128, kVec128, false, e5},
                            {"block", kBlk128, kVec128, kVec128, false, e4}};
  for (const Recipe& r : recipes) {
    run_layer(nn::Precision::fp8, r.name, t, in, out);
    expect_calls(
        {{"forward", out, t, in, e4, e4, bf, T, N, r.w, r.x_or_dy, true, r.fast_forward, 0.0f},
         {"dgrad", in, t, out, e4, r.dy, bf, T, N, r.w, r.x_or_dy, true, false, 0.0f},
         {"wgrad", in, out, t, e4, r.dy, f32, T, N, r.wgrad, r.wgrad, true, false, 1.0f}},
        r.name);
  }
  // mx: Hopper's cuBLASLt has no 1x32 E8M0 mode (3.1.4: VEC32_UE8M0 is 10.0+), so every GEMM
  // is emulated: operands dequantized exactly into bf16, then unscaled bf16 TN GEMMs.
  run_layer(nn::Precision::fp8, "mx", t, in, out);
  expect_calls({{"forward", out, t, in, bf, bf, bf, T, N, kScalar, kScalar, false, false, 0.0f},
                {"dgrad", in, t, out, bf, bf, bf, T, N, kScalar, kScalar, false, false, 0.0f},
                {"wgrad", in, out, t, bf, bf, f32, T, N, kScalar, kScalar, false, false, 1.0f}},
               "mx");
}

// Restores the cuBLAS version the emulated cuBLASLt answers as.
struct EmulatedVersion {
  int saved;
  explicit EmulatedVersion(int version) : saved(cudasim::cublaslt_set_version(version)) {}
  ~EmulatedVersion() { cudasim::cublaslt_set_version(saved); }
};

// |got - exact GEMM of the FP8 operands read| within the emulation's bound: each operand
// dequantized into f32 (one rounding each, 2u on a product) then an fp32 GEMM of K products
// and its epilogue: gamma_{K+7} sum |a b| (output_bound's gamma_{K+5} plus the two
// dequantization roundings), and a bf16 output's 2^-8.
void expect_emulated(const std::vector<float>& got, const testing::Fp8Operand64& a,
                     const testing::Fp8Operand64& b, int64_t m, int64_t n, int64_t k, DType out,
                     const std::string& what) {
  const testing::Gemm64 c = testing::gemm64(a.value, b.value, m, n, k);
  std::vector<double> bound(c.value.size());
  for (size_t i = 0; i < bound.size(); ++i) {
    bound[i] = testing::gamma(k + 7) * c.abs[i];
    if (out == DType::bf16) bound[i] += testing::kUBf16 * (std::abs(c.value[i]) + bound[i]);
  }
  testing::expect_within(got, c.value, bound, what);
}

TEST(CudaLinearGemmCalls, RowScalingOnACublasLtWithoutOuterVectorsIsEmulatedAndSaidOnce) {
  // cuBLAS 12.8 has no OUTER_VEC_32F (12.9 brought it): the heuristic refuses each row-scaled
  // GEMM, gemm() emulates it instead, says so once per problem and keeps the decision.
  const EmulatedVersion version(120800);
  // Shapes no other test uses, so that no plan for them is cached yet in this process.
  const int64_t t = 32, in = 112, out = 48;
  testing::Rng rng(testing::fresh_seed());
  nn::LinearConfig c;
  c.in_features = in;
  c.out_features = out;
  c.max_tokens = t;
  c.precision = nn::Precision::fp8;
  c.recipe = fp8::Recipe::parse("row");
  c.device = Device::cuda(0);
  testing::LinearHarness h(c, rng);
  const std::vector<float> x = testing::random_normal(t * in, 1.0, DType::bf16, rng);
  const std::vector<float> dy = testing::random_normal(t * out, 0x1p-8, DType::bf16, rng);
  cudasim::cublaslt_clear_calls();
  ::testing::internal::CaptureStderr();
  std::vector<float> y, dx;
  for (int pass = 0; pass < 2; ++pass) {
    h.zero_grads();
    y = h.forward(x);
    dx = h.backward(dy);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  int said = 0;
  for (size_t at = err.find("octet [gemm]: cuBLASLt has no algorithm"); at != std::string::npos;
       at = err.find("octet [gemm]: cuBLASLt has no algorithm", at + 1))
    ++said;
  EXPECT_EQ(said, 3) << err;  // forward, dgrad, wgrad: once each over both passes

  int refused = 0, matmuls = 0;
  for (const auto& r : cudasim::cublaslt_calls()) {
    if (r.kind == cudasim::LtCallKind::heuristic && r.status != CUBLAS_STATUS_SUCCESS) {
      ++refused;
      EXPECT_EQ(r.status, CUBLAS_STATUS_NOT_SUPPORTED) << show(r);
      EXPECT_EQ(r.a_scale_mode, kOuter) << show(r);
    }
    if (r.kind == cudasim::LtCallKind::matmul) {
      ++matmuls;
      // The emulation: operands dequantized into f32 (row scales are not powers of two).
      EXPECT_EQ(r.status, CUBLAS_STATUS_SUCCESS) << show(r);
      EXPECT_EQ(r.a_type, CUDA_R_32F) << show(r);
      EXPECT_FALSE(r.a_scale_set || r.b_scale_set) << show(r);
    }
  }
  EXPECT_EQ(refused, 3);
  EXPECT_EQ(matmuls, 6);

  const fp8::Recipe& recipe = c.recipe;
  const auto qx = testing::quantize64(x, t, in, recipe, fp8::Role::activation);
  const auto qw = testing::quantize64(h.w, out, in, recipe, fp8::Role::weight);
  const auto qdy = testing::quantize64(dy, t, out, recipe, fp8::Role::gradient);
  expect_emulated(y, qx.stored, qw.stored, t, out, in, DType::bf16, "forward");
  expect_emulated(dx, qdy.stored, qw.transposed, t, in, out, DType::bf16, "dgrad");
  expect_emulated(h.weight_grad.read(), qdy.transposed, qx.transposed, out, in, t, DType::f32,
                  "wgrad");
}

TEST(CudaLinearGemmCalls, ATensorwideScaleOffA16ByteBoundaryIsCopiedAndTheGemmStaysNative) {
  // A real cuBLASLt (13.1, H100) refuses at the call a tensorwide FP8 matmul whose scale is not
  // 16-byte aligned, and so does the emulation: gemm() reads such a scale from an aligned
  // workspace copy, so the GEMM runs natively (no refusal, no emulation) and exactly.
  const Device device = Device::cuda(0);
  const int64_t m = 48, n = 32, k = 64;  // a shape no other test here uses: a fresh plan
  // e4m3 codes of small integers (0x38 + 8 j is 2^j: 1, 2, 4) and their signs: every product
  // and every sum of 64 of them is exact in fp32, so C is exact whatever the accumulator.
  testing::Rng rng(testing::fresh_seed());
  std::vector<uint8_t> a_codes(m * k), b_codes(n * k);
  std::vector<double> a_val(m * k), b_val(n * k);
  auto fill = [&rng](std::vector<uint8_t>& codes, std::vector<double>& values) {
    for (size_t i = 0; i < codes.size(); ++i) {
      const uint64_t r = rng();
      codes[i] = static_cast<uint8_t>(0x38 + 8 * (r % 3) + (r & 8 ? 0x80 : 0));
      values[i] = double(e4m3_to_f32(codes[i]));
    }
  };
  fill(a_codes, a_val);
  fill(b_codes, b_val);
  Buffer a_buf(device, a_codes.size()), b_buf(device, b_codes.size()), c_buf(device, m * n * 4);
  copy_bytes(a_buf.data(), device, a_codes.data(), Device::cpu(), a_codes.size());
  copy_bytes(b_buf.data(), device, b_codes.data(), Device::cpu(), b_codes.size());
  // Scales at bytes 4 and 8 of one allocation: neither on a 16-byte boundary.
  const float scales[3] = {0.0f, 0.5f, 0.25f};
  Buffer s_buf(device, sizeof scales);
  copy_bytes(s_buf.data(), device, scales, Device::cpu(), sizeof scales);
  const Tensor a = a_buf.view(DType::e4m3, {m, k}), b = b_buf.view(DType::e4m3, {n, k}),
               c = c_buf.view(DType::f32, {m, n});
  kernels::GemmOptions o;
  o.a_scale_inv = s_buf.view(DType::f32, {1, 1}, 4);
  o.b_scale_inv = s_buf.view(DType::f32, {1, 1}, 8);
  Buffer ws(device, kernels::gemm_workspace_bytes(a, b, c, o));
  o.workspace = ws.view(DType::u8, {static_cast<int64_t>(ws.bytes())});
  cudasim::cublaslt_clear_calls();
  kernels::gemm(a, b, c, o);

  int matmuls = 0;
  for (const auto& r : cudasim::cublaslt_calls()) {
    EXPECT_EQ(r.status, CUBLAS_STATUS_SUCCESS) << show(r);
    if (r.kind != cudasim::LtCallKind::matmul) continue;
    ++matmuls;
    EXPECT_EQ(r.a_type, CUDA_R_8F_E4M3) << show(r);  // native, not the emulation's f32
    EXPECT_TRUE(r.a_scale_set && r.b_scale_set) << show(r);
    EXPECT_EQ(r.a_scale_mode, kScalar) << show(r);
  }
  EXPECT_EQ(matmuls, 1);
  std::vector<float> got(m * n);
  copy_bytes(got.data(), Device::cpu(), c.data, device, got.size() * 4);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t l = 0; l < k; ++l) sum += a_val[i * k + l] * b_val[j * k + l];
      ASSERT_EQ(double(got[i * n + j]), 0.5 * 0.25 * sum) << "C[" << i << ", " << j << "]";
    }
}

TEST(CudaLinearGemmCalls, AGemmOfCuda1TensorsRunsOnCuda1WhateverDeviceIsCurrent) {
  ASSERT_TRUE(kTwoDevices);
  ASSERT_GE(detail::cuda_count(), 2);
  // bf16 A [M, K], B [N, K] of small integers: every sum is exact in fp32 and in bf16.
  const int64_t m = 16, n = 32, k = 48;
  std::vector<uint16_t> a(m * k), b(n * k);
  for (size_t i = 0; i < a.size(); ++i) a[i] = f32_to_bf16(static_cast<float>(int(i % 5) - 2));
  for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(static_cast<float>(int(i % 3) - 1));
  const Device cuda1 = Device::cuda(1);
  Buffer ba(cuda1, a.size() * 2), bb(cuda1, b.size() * 2), bc(cuda1, m * n * 4);
  copy_bytes(ba.data(), cuda1, a.data(), Device::cpu(), a.size() * 2);
  copy_bytes(bb.data(), cuda1, b.data(), Device::cpu(), b.size() * 2);
  const Tensor ta = ba.view(DType::bf16, {m, k}), tb = bb.view(DType::bf16, {n, k}),
               tc = bc.view(DType::f32, {m, n});
  kernels::GemmOptions o;
  const size_t ws = kernels::gemm_workspace_bytes(ta, tb, tc, o);
  Buffer bw(cuda1, ws);
  o.workspace = bw.view(DType::u8, {static_cast<int64_t>(ws)});
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // another device is current, as in a DP worker
  cudasim::cublaslt_clear_calls();
  kernels::gemm(ta, tb, tc, o);
  const auto calls = cudasim::cublaslt_calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().status, CUBLAS_STATUS_SUCCESS) << show(calls.back());
  EXPECT_EQ(calls.back().device, 1);
  EXPECT_EQ(calls.back().handle_device, 1);  // cuda:1's own handle
  std::vector<float> got(m * n);
  copy_bytes(got.data(), Device::cpu(), tc.data, cuda1, got.size() * 4);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t l = 0; l < k; ++l)
        want += double(bf16_to_f32(a[i * k + l])) * bf16_to_f32(b[j * k + l]);
      EXPECT_EQ(got[i * n + j], want) << i << "," << j;
    }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
}  // namespace octet

#endif  // OCTET_CUDASIM
