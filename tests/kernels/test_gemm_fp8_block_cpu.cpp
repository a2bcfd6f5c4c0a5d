// tests/kernels/test_gemm_fp8_block_cpu.cpp: the AVX512_BF16 and AMX kernels for FP8 GEMMs
// with f32 scales per K slice (kernels/cpu/gemm_fp8_block_cpu.cpp) against float64, on ragged
// shapes, both formats, both C dtypes and beta; and each one's result the same bits on 1 and 2
// threads. The fused path's way through them is in tests/fp8/test_scaled_gemm.cpp. Also the
// bf16 weight gradients that take the AMX kernel with unit scales (bf16_amx_gemm).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/convert.h"
#include "gemm_testing.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/gemm.h"
#include "kernels/quantize_testing.h"
#include "testing.h"

namespace octet {
namespace {

using kernels::cpu::Fp8BlockGemm;

// A finite code of `fp8`, subnormals and zeros included (never NaN; E5M2: never Inf).
uint8_t random_code(DType fp8, testing::Rng& rng) {
  for (;;) {
    const auto code = static_cast<uint8_t>(rng() & 0xFF);
    if (std::isfinite(fp8_to_f32(code, fp8))) return code;
  }
}

struct Case {
  int64_t m, n, k, slice;
  DType a_dtype, b_dtype, c_dtype;
  float alpha, beta;
  bool tiny_scales = false;  // every third scale_inv of A 1 / FLT_MAX (subnormal)
  std::string describe() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " slice " +
           std::to_string(slice) + " " + dtype_name(a_dtype) + "x" + dtype_name(b_dtype) + " C " +
           dtype_name(c_dtype) + " alpha " + std::to_string(alpha) + " beta " +
           std::to_string(beta) + (tiny_scales ? " tiny scales" : "");
  }
};

struct Operands {
  std::vector<uint8_t> a, b;
  std::vector<float> sa, sb;
  std::vector<float> c0;  // C's initial values (bf16 values where C is bf16)
};

void tiny_scale_inv(float& s) {
  s = 1.0f / std::numeric_limits<float>::max();
}

Operands random_operands(const Case& t, testing::Rng& rng) {
  const int64_t slices = (t.k + t.slice - 1) / t.slice;
  Operands o{std::vector<uint8_t>(t.m * t.k), std::vector<uint8_t>(t.n * t.k),
             std::vector<float>(t.m * slices), std::vector<float>(t.n * slices),
             std::vector<float>(t.m * t.n)};
  for (auto& x : o.a) x = random_code(t.a_dtype, rng);
  for (auto& x : o.b) x = random_code(t.b_dtype, rng);
  // Scales with full 24-bit significands over 2^-12 .. 2^12, as block scaling makes them.
  std::uniform_real_distribution<float> exponent(-12.0f, 12.0f), value(-4.0f, 4.0f);
  for (auto& s : o.sa) s = std::exp2(exponent(rng));
  for (size_t i = 0; t.tiny_scales && i < o.sa.size(); i += 3) tiny_scale_inv(o.sa[i]);
  for (auto& s : o.sb) s = std::exp2(exponent(rng));
  for (auto& c : o.c0)
    c = t.c_dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(value(rng))) : value(rng);
  return o;
}

// Runs the kernel on `threads` threads, multiplying as f32 FMAs or with vdpbf16ps; C as f32
// values.
std::vector<float> run_block(const Case& t, const Operands& o, int threads, bool f32 = false) {
  std::vector<float> c32 = o.c0;
  std::vector<uint16_t> c16(c32.size());
  for (size_t i = 0; i < c16.size(); ++i) c16[i] = f32_to_bf16(o.c0[i]);
  const bool bf16 = t.c_dtype == DType::bf16;
  std::vector<char> workspace(
      kernels::cpu::fp8_block_gemm_workspace_bytes(t.m, t.n, t.k, t.slice, f32));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernels::cpu::fp8_block_gemm(
      {o.a.data(), t.a_dtype, o.b.data(), t.b_dtype, t.m, t.n, t.k, t.slice, o.sa.data(),
       o.sb.data(), bf16 ? static_cast<void*>(c16.data()) : c32.data(), t.c_dtype, t.alpha, t.beta,
       false, false, f32},
      workspace.data());
  omp_set_num_threads(saved);
  if (bf16) {
    for (size_t i = 0; i < c16.size(); ++i) c32[i] = bf16_to_f32(c16[i]);
  }
  return c32;
}

// The float64 value and error bound of every element. Each float64 term sa sb a b carries
// 24 + 24 + 4 + 4 bits (exact) and the float64 sum errs by ~K 2^-53 of sum |term|: exact
// next to the bound.
//
// Bound (u = 2^-24, gamma_n = n u / (1 - n u)), for slices of at most L columns, S of them:
// - a_ik b_jk of two FP8 values is exact in fp32 (<= 4 x 4 significant bits) and every
//   partial sum is a multiple of the smallest product unit (2^-18 for E4M3 x E4M3, 2^-25 with
//   E5M2): zero or normal, so vdpbf16ps's flush of denormal inputs and outputs (tdpbf16ps's too)
//   never acts.
// - vdpbf16ps, and AMX's tdpbf16ps (Intel's pseudo-code for both: two fp32 additions per K
//   pair), round (RNE) at most twice per K pair, so each product in a slice's fp32 sum p_s
//   sees at most L roundings: |p_s - P_s| <= gamma_L sum_{k in s} |a b| (AMX's zero padding
//   of K to its 32-wide steps adds exact zeros).
// - sa_is * sb_js rounds once; main += p_s * (sa sb) is one fma, and a slice's term sees
//   the fma of its own and of every later slice: at most S roundings.
// - alpha * main (1) and fma(beta, C0, .) (1, counted as 2 for beta C0 and the sum).
// Total gamma_{L+S+4} of |alpha| sum_k |sa sb a b| + |beta C0| (the same as the per-slice
// reference path's bound in tests/fp8/test_scaled_gemm.cpp); a bf16 C rounds once more, by
// at most 2^-8 of its magnitude (round to nearest even, 8 significant bits).
// Underflow (a scale_inv of 1 / FLT_MAX, as a tile whose amax is tiny gets, is subnormal):
// each multiplication and fma may add an absolute error of at most 2^-150 (half of f32's
// smallest subnormal; additions of subnormals are exact): sa * sb's, times |p_s| <=
// (1 + gamma_L) sum_{k in s} |a b|, and the S fmas, all times |alpha| and at most (1 + gamma)
// of later roundings, plus alpha * main and the last fma: at most
// 2^-150 (2 |alpha| (sum_k |a b| + S) + 2), as (1 + gamma)^2 < 2. A bf16 C may add 2^-134
// (half of bf16's smallest subnormal).
void expect_within_bound(const Case& t, const Operands& o, const std::vector<float>& got) {
  const int64_t slices = (t.k + t.slice - 1) / t.slice;
  const int64_t l = std::min(t.slice, t.k);
  const double u = 0x1p-24, n_u = static_cast<double>(l + slices + 4) * u;
  const double gamma = n_u / (1.0 - n_u);
  double worst = 0.0;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < t.n; ++j) {
      double sum = 0.0, sum_abs = 0.0, codes_abs = 0.0;
      for (int64_t k = 0; k < t.k; ++k) {
        const double codes = double{fp8_to_f32(o.a[i * t.k + k], t.a_dtype)} *
                             fp8_to_f32(o.b[j * t.k + k], t.b_dtype);
        const double term =
            double{o.sa[i * slices + k / t.slice]} * o.sb[j * slices + k / t.slice] * codes;
        sum += term;
        sum_abs += std::abs(term);
        codes_abs += std::abs(codes);
      }
      const double c0 = t.beta == 0.0f ? 0.0 : double{t.beta} * o.c0[i * t.n + j];
      const double value = double{t.alpha} * sum + c0;
      double bound =
          gamma * (std::abs(double{t.alpha}) * sum_abs + std::abs(c0)) +
          0x1p-150 *
              (2.0 * std::abs(double{t.alpha}) * (codes_abs + static_cast<double>(slices)) + 2.0);
      if (t.c_dtype == DType::bf16) bound += 0x1p-8 * (std::abs(value) + bound) + 0x1p-134;
      const double err = std::abs(got[i * t.n + j] - value);
      ASSERT_LE(err, bound) << t.describe() << " at (" << i << ", " << j << "): got "
                            << got[i * t.n + j] << ", exact " << value;
      if (bound > 0.0) worst = std::max(worst, err / bound);
    }
  }
  std::printf("%s: worst error %.3g of the bound\n", t.describe().c_str(), worst);
}

// The kernel a case runs on: OCTET_CPU_ISA=avx512 keeps it to AVX512_BF16, amx lets it take AMX.
class CpuFp8BlockGemm : public ::testing::TestWithParam<const char*> {};

// M not a multiple of the 8-row tile nor of AMX's 32, N not of the 32-column panel, K not of
// the slice nor of AMX's 32-wide step (and odd: the last K pair is padded), one element, the
// block recipe's own 128 slices, K long enough for AMX to pad A's rows, and A widened a task at
// a time.
TEST_P(CpuFp8BlockGemm, MatchesFloat64WithinGammaOfTheSlicesAndIsTheSameOnOneAndTwoThreads) {
  const testing::ScopedEnv isa("OCTET_CPU_ISA", GetParam());
  if (!kernels::cpu::fp8_block_gemm_available()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  const bool amx = std::string(GetParam()) == "amx";
  if (amx && !kernels::cpu::fp8_block_gemm_uses_amx(128))
    GTEST_SKIP() << "this CPU has no AMX-BF16 (or Linux refused its tile state)";
  testing::Rng rng(testing::fresh_seed());
  const Case cases[] = {
      {37, 53, 144, 128, DType::e4m3, DType::e4m3, DType::f32, 1.0f, 0.0f},
      {13, 70, 250, 128, DType::e4m3, DType::e5m2, DType::bf16, -0.5f, 0.25f},
      {1, 1, 16, 128, DType::e5m2, DType::e4m3, DType::f32, 1.5f, 1.0f},
      {7, 33, 131, 128, DType::e4m3, DType::e4m3, DType::bf16, 1.0f, 1.0f},
      {64, 96, 300, 32, DType::e5m2, DType::e4m3, DType::f32, -0.5f, 0.25f},
      {130, 67, 272, 128, DType::e4m3, DType::e5m2, DType::f32, 1.0f, 1.0f},
      {96, 160, 384, 128, DType::e4m3, DType::e4m3, DType::bf16, 1.0f, 0.0f},
      {45, 70, 300, 128, DType::e4m3, DType::e5m2, DType::f32, 1.0f, 0.0f, true},
      {45, 70, 300, 128, DType::e4m3, DType::e4m3, DType::bf16, -0.5f, 0.0f, true},
      {33, 40, 200, 40, DType::e4m3, DType::e4m3, DType::f32, 1.0f, 0.5f},  // AMX: slice not x32
      // AMX: K of 512 and 1024, whose rows of A are stored with a cache line more (BlockLayout::
      // lda); one slice (the row recipe's) and B larger than A (the panels before the tiles).
      {40, 70, 512, 512, DType::e4m3, DType::e4m3, DType::bf16, 1.0f, 0.0f},
      {35, 100, 1024, 128, DType::e4m3, DType::e5m2, DType::f32, 1.0f, 0.5f},
      // AVX-512: A larger than B and 64 rows a thread, A widened by the tasks (block_tasks): the
      // last task's rows partly past M, K unpadded (one run of codes) and odd (row by row).
      {200, 70, 256, 128, DType::e4m3, DType::e5m2, DType::f32, 1.0f, 0.5f},
      {150, 40, 131, 128, DType::e5m2, DType::e4m3, DType::bf16, -0.5f, 1.0f},
  };
  for (const Case& t : cases) {
    // Which kernel runs this case: AMX's takes slices that are whole 32-wide steps.
    EXPECT_EQ(kernels::cpu::fp8_block_gemm_uses_amx(t.slice), amx && t.slice % 32 == 0)
        << t.describe();
    const Operands o = random_operands(t, rng);
    const std::vector<float> one = run_block(t, o, 1);
    const std::vector<float> two = run_block(t, o, 2);
    ASSERT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
        << t.describe() << ": 1 and 2 threads differ";
    expect_within_bound(t, o, one);
    // Multiplying as f32 FMAs (Fp8BlockGemm::f32; AMX ignores it): every product of two FP8
    // values is exact in fp32 and the FMAs add them odd K first, as vdpbf16ps does: the same
    // bits, not merely within the bound.
    for (int threads : {1, 2}) {
      const std::vector<float> fma = run_block(t, o, threads, true);
      ASSERT_EQ(std::memcmp(one.data(), fma.data(), one.size() * sizeof(float)), 0)
          << t.describe() << ": f32 FMAs on " << threads << " threads differ from vdpbf16ps";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuFp8BlockGemm, ::testing::Values("avx512", "amx"),
                         [](const auto& info) { return std::string(info.param); });

// bf16 weight gradients, dW = alpha dyᵀ x + beta dW with dy stored [K, M] and x [K, N], through
// kernels::gemm: on AMX (OCTET_CPU_ISA=amx, A the larger operand) the block kernel with unit
// scales (kernels::cpu::bf16_amx_gemm), else oneDNN. Both against float64, and AMX's result the
// same bits on 1 and 2 threads.
//
// Bound (u = 2^-24): a product of two bf16 (8 significant bits each) is exact in fp32, and the
// values (normal, |x| in [2^-4, 4]) keep every product and partial sum normal, so neither
// tdpbf16ps's nor oneDNN's flush of denormals acts. Each product then sees at most K roundings of
// the fp32 sum (tdpbf16ps: two additions per K pair; any summation order: K - 1), then alpha *
// acc and the fma with beta C0: gamma_{K+4} of |alpha| sum |a b| + |beta C0|, and a bf16 C rounds
// once more, by at most 2^-8 of its magnitude.
std::vector<float> bf16_wgrad(int64_t m, int64_t n, int64_t k, const std::vector<uint16_t>& a,
                              const std::vector<uint16_t>& b, const std::vector<float>& c0,
                              DType c_dtype, float alpha, float beta) {
  std::vector<float> c32 = c0;
  std::vector<uint16_t> c16(c0.size());
  for (size_t i = 0; i < c16.size(); ++i) c16[i] = f32_to_bf16(c0[i]);
  const Tensor ta(const_cast<uint16_t*>(a.data()), DType::bf16, {k, m});
  const Tensor tb(const_cast<uint16_t*>(b.data()), DType::bf16, {k, n});
  const Tensor tc(c_dtype == DType::bf16 ? static_cast<void*>(c16.data()) : c32.data(), c_dtype,
                  {m, n});
  kernels::GemmOptions o;
  o.trans_a = true;
  o.trans_b = false;
  o.alpha = alpha;
  o.beta = beta;
  std::vector<uint8_t> workspace(kernels::gemm_workspace_bytes(ta, tb, tc, o));
  if (!workspace.empty()) {
    o.workspace = Tensor(workspace.data(), DType::u8, {static_cast<int64_t>(workspace.size())});
  }
  kernels::gemm(ta, tb, tc, o);
  if (c_dtype == DType::bf16) {
    for (size_t i = 0; i < c16.size(); ++i) c32[i] = bf16_to_f32(c16[i]);
  }
  return c32;
}

class CpuBf16WeightGradient : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuBf16WeightGradient,
       MatchesFloat64WithinGammaOfKOnAmxAndOneDnnAndAmxIsTheSameOnTwoThreads) {
  const testing::ScopedEnv isa("OCTET_CPU_ISA", GetParam());
  if (!kernels::cpu::onednn_bf16_available())
    GTEST_SKIP() << "oneDNN has no bf16 matmul here (or this octet has no oneDNN)";
  // oneDNN's bf16 matmul, also where the default is onednn-f32 (f32_fma_outruns_bf16_dot).
  EngineGuard engine;
  kernels::cpu::set_gemm_impl(kernels::cpu::GemmImpl::onednn);
  const bool amx = std::string(GetParam()) == "amx";
  if (amx && !kernels::cpu::fp8_block_gemm_uses_amx(32))
    GTEST_SKIP() << "this CPU has no AMX-BF16 (or Linux refused its tile state)";
  testing::Rng rng(testing::fresh_seed());
  struct Shape {
    int64_t m, n, k;
    DType c_dtype;
    float alpha, beta;
  };
  // M, N and K not multiples of AMX's 32 (K odd: a padded pair); K of 1024, whose rows AMX
  // stores with a cache line more; N >= M (oneDNN's on AMX too); the 256-wide layer's qkv.
  const Shape shapes[] = {
      {70, 33, 101, DType::f32, 1.0f, 1.0f},   {45, 20, 64, DType::bf16, -0.5f, 0.25f},
      {300, 70, 1024, DType::f32, 1.0f, 0.0f}, {40, 40, 96, DType::f32, 1.0f, 1.0f},
      {33, 64, 128, DType::bf16, 1.0f, 0.0f},  {512, 256, 2048, DType::f32, 1.0f, 1.0f},
  };
  std::uniform_real_distribution<float> magnitude(-4.0f, 2.0f), value(-4.0f, 4.0f);
  auto random_bf16 = [&] {
    const float x = std::exp2(magnitude(rng)) * ((rng() & 1) != 0 ? -1.0f : 1.0f);
    return f32_to_bf16(x);
  };
  for (const Shape& s : shapes) {
    const std::string what = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                             std::to_string(s.k) + " C " + dtype_name(s.c_dtype);
    EXPECT_EQ(kernels::cpu::bf16_amx_gemm_takes(s.m, s.n, s.k), amx && s.m > s.n) << what;
    std::vector<uint16_t> a(s.k * s.m), b(s.k * s.n);
    for (auto& x : a) x = random_bf16();
    for (auto& x : b) x = random_bf16();
    std::vector<float> c0(s.m * s.n);
    for (auto& c : c0)
      c = s.c_dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(value(rng))) : value(rng);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> one = bf16_wgrad(s.m, s.n, s.k, a, b, c0, s.c_dtype, s.alpha, s.beta);
    omp_set_num_threads(2);
    const std::vector<float> two = bf16_wgrad(s.m, s.n, s.k, a, b, c0, s.c_dtype, s.alpha, s.beta);
    omp_set_num_threads(saved);
    if (kernels::cpu::bf16_amx_gemm_takes(s.m, s.n, s.k)) {
      ASSERT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
          << what << ": 1 and 2 threads differ";
    }
    const double u = 0x1p-24, n_u = static_cast<double>(s.k + 4) * u;
    const double gamma = n_u / (1.0 - n_u);
    double worst = 0.0;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0.0, sum_abs = 0.0;
        for (int64_t k = 0; k < s.k; ++k) {
          const double p = double{bf16_to_f32(a[k * s.m + i])} * bf16_to_f32(b[k * s.n + j]);
          sum += p;
          sum_abs += std::abs(p);
        }
        const double c0_term = s.beta == 0.0f ? 0.0 : double{s.beta} * c0[i * s.n + j];
        const double exact = double{s.alpha} * sum + c0_term;
        double bound = gamma * (std::abs(double{s.alpha}) * sum_abs + std::abs(c0_term));
        if (s.c_dtype == DType::bf16) bound += 0x1p-8 * (std::abs(exact) + bound);
        for (const std::vector<float>* got : {&one, &two}) {
          const double err = std::abs((*got)[i * s.n + j] - exact);
          ASSERT_LE(err, bound) << what << " at (" << i << ", " << j << "): got "
                                << (*got)[i * s.n + j] << ", exact " << exact;
          if (bound > 0.0) worst = std::max(worst, err / bound);
        }
      }
    }
    std::printf("%s (%s): worst error %.3g of the bound\n", what.c_str(), GetParam(), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuBf16WeightGradient, ::testing::Values("avx512", "amx"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace octet
