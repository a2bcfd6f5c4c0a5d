// tests/kernels/test_gemm.cpp: kernels::gemm (f32, bf16, FP8) against a float64
// reference on fresh random inputs, on every device and every CPU engine, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "gemm_testing.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/gemm.h"
#include "testing.h"

namespace octet {
namespace {

using kernels::GemmOptions;
using kernels::cpu::GemmImpl;
using testing::Dims;
using testing::EngineGuard;
using testing::expect_close_to_cpu;
using testing::expect_within_bound;
using testing::Expected;

using testing::gamma;
using testing::kU;
using testing::kUBf16;

// The unit roundoff of the accumulation a device's GEMM of these operands performs.
// CPU: fp32 rounded to nearest, 2^-24. CUDA (cuBLASLt on Hopper): f32 operands run on the
// FMA units, rounded to nearest: 2^-24. bf16 operands run on tensor cores, whose fp32
// adders align the addends and truncate (Fasi, Higham, Mikaitis, Pranesh, "Numerical
// behavior of NVIDIA tensor cores", 2021): under one ulp, 2^-23. FP8 operands run on
// Hopper's FP8 tensor cores, which accumulate in e8m13 with truncation (the FP22
// accumulator DeepSeek-V3 and PyTorch's float8 work measured) between cuBLASLt's fp32
// promotions, and with fast accumulation for the whole of K: 2^-13 bounds every step.
double accumulation_unit(Device device, DType operands) {
  if (device.is_cpu() || operands == DType::f32) return kU;
  return operands == DType::bf16 ? 0x1p-23 : 0x1p-13;
}

// A matrix on the host: its encoding and the exact value of every element.
struct HostMatrix {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};

double decode(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    }
    default:
      return fp8_to_f32(*p, dtype);
  }
}

void decode_all(HostMatrix& m) {
  const size_t size = dtype_size(m.dtype);
  m.values.resize(m.bytes.size() / size);
  for (size_t i = 0; i < m.values.size(); ++i) m.values[i] = decode(m.dtype, &m.bytes[i * size]);
}

// f32 in [-1, 1), bf16 in [-2, 2) rounded, FP8: any finite code (subnormals,
// the largest values and negative zero included).
HostMatrix random_matrix(DType dtype, int64_t rows, int64_t cols, testing::Rng& rng) {
  HostMatrix m{dtype, rows, cols, std::vector<uint8_t>(rows * cols * dtype_size(dtype)), {}};
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (dtype == DType::f32) {
      const float f = uniform(rng);
      std::memcpy(&m.bytes[i * 4], &f, 4);
    } else if (dtype == DType::bf16) {
      const uint16_t h = f32_to_bf16(2.0f * uniform(rng));
      std::memcpy(&m.bytes[i * 2], &h, 2);
    } else {
      uint8_t code;
      do code = static_cast<uint8_t>(rng());
      while (!std::isfinite(fp8_to_f32(code, dtype)));
      m.bytes[i] = code;
    }
  }
  decode_all(m);
  return m;
}

// What one GEMM call is: operands, C's dtype and options (alpha, beta, transposes,
// scale_inv values; nullopt passes nullptr).
struct Problem {
  HostMatrix a, b, c0;
  bool trans_a, trans_b;
  float alpha, beta;
  std::optional<float> a_scale_inv, b_scale_inv;
};

Problem make_problem(DType ab_a, DType ab_b, DType c, int64_t m, int64_t n, int64_t k, bool ta,
                     bool tb, float alpha, float beta, testing::Rng& rng) {
  return {random_matrix(ab_a, ta ? k : m, ta ? m : k, rng),
          random_matrix(ab_b, tb ? n : k, tb ? k : n, rng),
          random_matrix(c, m, n, rng),
          ta,
          tb,
          alpha,
          beta,
          std::nullopt,
          std::nullopt};
}

// The exact result in float64 and its error bound per element. Products of f32
// values are exact in float64 (24 + 24 < 53 bits); the float64 sums err by at most
// K * 2^-53 * sum |a b|, 2^-29 of the fp32 bound below, so they count as exact.
Expected reference(const Problem& p, double u_acc = kU) {
  const int64_t m = p.c0.rows, n = p.c0.cols, k = p.trans_a ? p.a.rows : p.a.cols;
  const double scale =
      double{p.alpha} * p.a_scale_inv.value_or(1.0f) * p.b_scale_inv.value_or(1.0f);
  // Tolerance, u = 2^-24: fp32 accumulation of K products in any order gives
  // |acc - sum| <= gamma_K * sum |a b|, gamma_n = n u / (1 - n u) (Higham (3.5): K - 1
  // rounded adds, plus one rounding per product for f32 operands; products of
  // bf16/FP8 values are exact in fp32). The epilogue rounds alpha * a_scale_inv *
  // b_scale_inv (2), alpha * acc (1), beta * C (1) and the add (1), and
  // gamma_a + gamma_b + gamma_a gamma_b <= gamma_{a+b} folds them in: gamma_{K+5}.
  // A bf16 C rounds once more, by at most 2^-8 of its magnitude (half an ulp). On devices
  // whose accumulation rounds coarser (u_acc > 2^-24) every rounding is counted at u_acc.
  const double g = gamma(k + 5, u_acc);
  const bool bf16_out = p.c0.dtype == DType::bf16;
  Expected e{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0, sum_abs = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double a = p.a.values[p.trans_a ? kk * m + i : i * k + kk];
        const double b = p.b.values[p.trans_b ? j * k + kk : kk * n + j];
        sum += a * b;
        sum_abs += std::abs(a * b);
      }
      const double c0 = p.beta == 0.0f ? 0.0 : p.beta * p.c0.values[i * n + j];
      const double value = scale * sum + c0;
      double bound = g * (std::abs(scale) * sum_abs + std::abs(c0));
      if (bf16_out) bound += kUBf16 * (std::abs(value) + bound);
      e.value[i * n + j] = value;
      e.bound[i * n + j] = bound;
    }
  }
  return e;
}

// Runs the problem on `device` (operands, scale factors and workspace copied
// there) and returns C decoded. `workspace_offset` places the workspace view at
// an unaligned address.
std::vector<double> run_gemm(Device device, const Problem& p, size_t workspace_offset = 0) {
  auto upload = [&](const HostMatrix& h, Buffer& buf) {
    buf = Buffer(device, h.bytes.size());
    copy_bytes(buf.data(), device, h.bytes.data(), Device::cpu(), h.bytes.size());
    return buf.view(h.dtype, {h.rows, h.cols});
  };
  Buffer a_buf, b_buf, c_buf, scales(device, 8), workspace;
  const Tensor a = upload(p.a, a_buf), b = upload(p.b, b_buf), c = upload(p.c0, c_buf);
  const float scale_values[2] = {p.a_scale_inv.value_or(1.0f), p.b_scale_inv.value_or(1.0f)};
  copy_bytes(scales.data(), device, scale_values, Device::cpu(), 8);

  GemmOptions o;
  o.trans_a = p.trans_a;
  o.trans_b = p.trans_b;
  o.alpha = p.alpha;
  o.beta = p.beta;
  if (p.a_scale_inv) o.a_scale_inv = scales.view(DType::f32, {1, 1}, 0);
  if (p.b_scale_inv) o.b_scale_inv = scales.view(DType::f32, {1, 1}, 4);
  const size_t bytes = kernels::gemm_workspace_bytes(a, b, c, o);
  if (bytes > 0) {
    workspace = Buffer(device, bytes + workspace_offset);
    o.workspace = workspace.view(DType::u8, {static_cast<int64_t>(bytes)}, workspace_offset);
  }
  kernels::gemm(a, b, c, o);

  HostMatrix out{p.c0.dtype, p.c0.rows, p.c0.cols, std::vector<uint8_t>(p.c0.bytes.size()), {}};
  copy_bytes(out.bytes.data(), Device::cpu(), c.data, device, out.bytes.size());
  decode_all(out);
  return out.values;
}

std::string describe(const Problem& p, const char* engine) {
  return std::string(dtype_name(p.a.dtype)) + "x" + dtype_name(p.b.dtype) + "->" +
         dtype_name(p.c0.dtype) + " m=" + std::to_string(p.c0.rows) +
         " n=" + std::to_string(p.c0.cols) +
         " k=" + std::to_string(p.trans_a ? p.a.rows : p.a.cols) +
         " ta=" + std::to_string(p.trans_a) + " tb=" + std::to_string(p.trans_b) +
         " alpha=" + std::to_string(p.alpha) + " beta=" + std::to_string(p.beta) +
         " engine=" + engine;
}

// The CPU runs every test once per engine (testing::cpu_engines); other devices have one
// implementation.
std::vector<std::optional<GemmImpl>> engines(Device device) {
  if (!device.is_cpu()) return {std::nullopt};
  std::vector<std::optional<GemmImpl>> e;
  for (GemmImpl impl : testing::cpu_engines()) e.push_back(impl);
  return e;
}

void check_on_all_engines(Device device, const Problem& p, size_t workspace_offset = 0) {
  const Expected expected = reference(p, accumulation_unit(device, p.a.dtype));
  EngineGuard guard;
  std::vector<double> got;
  for (const auto& engine : engines(device)) {
    if (engine) kernels::cpu::set_gemm_impl(*engine);
    const char* name = engine ? kernels::cpu::gemm_impl_name(*engine) : "device";
    got = run_gemm(device, p, workspace_offset);
    expect_within_bound(got, expected, describe(p, name));
  }
  if (!device.is_cpu()) {
    expect_close_to_cpu(got, run_gemm(Device::cpu(), p), expected, reference(p),
                        describe(p, "device"));
  }
}

class GemmOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(GemmOnDevice, F32AndBf16MatchFloat64WithinGammaK) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  // Odd and even shapes, K of any size; some span several cache blocks of the reference.
  // Odd sizes everywhere (leading dimensions of any alignment), and on CUDA shapes that
  // span many thread blocks of cuBLASLt's kernels.
  const Dims shapes[] = {{1, 1, 1},     {7, 13, 3},      {64, 48, 17},    {129, 67, 100},
                         {5, 130, 300}, {100, 260, 150}, {301, 333, 129}, {3, 517, 1}};
  const float alpha_beta[][2] = {{1.0f, 0.0f}, {-0.75f, 0.5f}, {1.5f, 1.0f}};
  const std::pair<DType, DType> dtypes[] = {
      {DType::f32, DType::f32}, {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}};
  int variant = 0;
  for (const auto& [ab, c] : dtypes) {
    for (const Dims& s : shapes) {
      for (int t = 0; t < 4; ++t) {
        const float* ab_pair = alpha_beta[variant++ % 3];  // every dtype/transpose sees each
        const Problem p =
            make_problem(ab, ab, c, s.m, s.n, s.k, t & 1, t & 2, ab_pair[0], ab_pair[1], rng);
        check_on_all_engines(device, p);
      }
    }
  }
}

TEST_P(GemmOnDevice, Fp8MatchesFloat64WithinGammaK) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  // N of any size (on CUDA, N % 16 != 0 runs on copies of B and C padded to a multiple of
  // 16 rows and columns), and on CUDA shapes of many thread blocks.
  const Dims shapes[] = {{1, 1, 16},      {7, 13, 32},     {64, 48, 80},   {129, 67, 144},
                         {256, 256, 256}, {520, 130, 160}, {96, 256, 1024}};
  const std::pair<DType, DType> pairs[] = {
      {DType::e4m3, DType::e4m3}, {DType::e4m3, DType::e5m2}, {DType::e5m2, DType::e4m3}};
  int variant = 0;
  for (const auto& [da, db] : pairs) {
    for (DType c : {DType::f32, DType::bf16}) {
      for (const Dims& s : shapes) {
        const float alpha = variant % 3 == 2 ? -0.5f : 1.0f;
        const float beta = variant % 2 == 1 ? 0.25f : 0.0f;
        Problem p = make_problem(da, db, c, s.m, s.n, s.k, false, true, alpha, beta, rng);
        // Scale factors that are not powers of two, so their rounding is exercised;
        // every third case passes nullptr for one of them (meaning 1).
        if (variant % 3 != 0) p.a_scale_inv = 0.0123f;
        p.b_scale_inv = 3.7f;
        ++variant;
        // On the CPU the workspace view starts at an odd address: it must be aligned inside.
        check_on_all_engines(device, p, device.is_cpu() ? 1 : 0);
      }
    }
  }
}

TEST_P(GemmOnDevice, BetaZeroNeverReadsC) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (DType ab : {DType::f32, DType::bf16, DType::e4m3}) {
    Problem p = make_problem(ab, ab, DType::f32, 9, 21, 32, false, true, 2.0f, 0.0f, rng);
    const float nan = std::nanf("");
    for (size_t i = 0; i < p.c0.values.size(); ++i) std::memcpy(&p.c0.bytes[i * 4], &nan, 4);
    // With beta = 0 the NaNs in C must not reach the result (BLAS semantics); the
    // reference() ignores C for beta == 0, so any NaN fails the bound.
    check_on_all_engines(device, p);
  }
}

TEST_P(GemmOnDevice, Fp8NaNAndInfinityPropagate) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  // A: e4m3 [2, 16] of 1.0 (0x38) with a NaN (0x7F) at [0, 3]; B: e5m2 [2, 16] of
  // 1.0 (0x3C) with +inf (0x7C) at [1, 5]. Then C[0, :] is NaN, C[1, 0] = 16 and C[1, 1] = inf.
  Problem p{{DType::e4m3, 2, 16, std::vector<uint8_t>(32, 0x38), {}},
            {DType::e5m2, 2, 16, std::vector<uint8_t>(32, 0x3C), {}},
            {DType::f32, 2, 2, std::vector<uint8_t>(16, 0), {}},
            false,
            true,
            1.0f,
            0.0f,
            std::nullopt,
            std::nullopt};
  p.a.bytes[3] = 0x7F;
  p.b.bytes[16 + 5] = 0x7C;
  EngineGuard guard;
  for (const auto& engine : engines(device)) {
    if (engine) kernels::cpu::set_gemm_impl(*engine);
    const std::vector<double> c = run_gemm(device, p);
    EXPECT_TRUE(std::isnan(c[0]) && std::isnan(c[1])) << c[0] << " " << c[1];
    EXPECT_EQ(c[2], 16.0);
    EXPECT_EQ(c[3], INFINITY);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GemmOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

// ---- argument errors (device independent: validation runs before dispatch) ----

// Storage for the error tests; the values are never read.
struct HostBytes {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(1 << 16);
  Tensor make(DType dtype, Shape shape) { return Tensor(bytes.data(), dtype, shape); }
};

// Runs fn, expecting an octet::Error whose message starts with "[gemm] " and contains `needle`.
template <typename Fn>
void expect_gemm_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.starts_with("[gemm] ")) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
  }
}

TEST(GemmErrors, ShapesDTypesAndLayoutsAreCheckedWithActionableMessages) {
  HostBytes a_mem, b_mem, c_mem;
  auto gemm = [&](DType da, Shape sa, DType db, Shape sb, DType dc, Shape sc, GemmOptions o = {}) {
    return [=, &a_mem, &b_mem, &c_mem] {
      kernels::gemm(a_mem.make(da, sa), b_mem.make(db, sb), c_mem.make(dc, sc), o);
    };
  };
  const DType f32 = DType::f32, bf16 = DType::bf16, e4m3 = DType::e4m3, e5m2 = DType::e5m2;
  expect_gemm_error(gemm(f32, {4, 8}, f32, {5, 9}, f32, {4, 5}), "inner dimensions differ");
  expect_gemm_error(gemm(f32, {4, 8}, f32, {5, 8}, f32, {5, 4}), "C must be [4, 5]");
  expect_gemm_error(gemm(DType::i32, {4, 8}, DType::i32, {5, 8}, f32, {4, 5}),
                    "operands must be f32 x f32, bf16 x bf16 or FP8");
  expect_gemm_error(gemm(f32, {4, 8}, bf16, {5, 8}, f32, {4, 5}),
                    "operands must be f32 x f32, bf16 x bf16 or FP8");
  expect_gemm_error(gemm(f32, {4, 8}, f32, {5, 8}, bf16, {4, 5}), "an f32 GEMM writes f32");
  expect_gemm_error(gemm(e5m2, {4, 16}, e5m2, {5, 16}, f32, {4, 5}), "E5M2 x E5M2");
  expect_gemm_error(gemm(e4m3, {4, 16}, bf16, {5, 16}, f32, {4, 5}), "two FP8 operands");

  // FP8 operands stored K-first (A [K, M], B [K, N]) pass the CPU's checks (CUDA refuses them:
  // cuBLASLt's FP8 GEMMs are TN); the only complaint left is the missing workspace.
  GemmOptions trans_a;
  trans_a.trans_a = true;
  expect_gemm_error(gemm(e4m3, {16, 4}, e4m3, {5, 16}, f32, {4, 5}, trans_a), "needs a workspace");
  GemmOptions not_trans_b;
  not_trans_b.trans_b = false;
  expect_gemm_error(gemm(e4m3, {4, 16}, e4m3, {16, 5}, f32, {4, 5}, not_trans_b),
                    "needs a workspace");
  expect_gemm_error(gemm(e4m3, {4, 40}, e4m3, {5, 40}, f32, {4, 5}),
                    "K=40 is not a multiple of 16");

  // FP8 on the CPU without a workspace, or with one that is too small.
  const Tensor a = a_mem.make(e4m3, {4, 32}), b = b_mem.make(e4m3, {5, 32});
  const Tensor c = c_mem.make(f32, {4, 5});
  const size_t needed = kernels::gemm_workspace_bytes(a, b, c, {});
  EXPECT_GE(needed, (4u + 5u) * 32u * 2u);  // both operands as bf16 (or f32)
  expect_gemm_error([&] { kernels::gemm(a, b, c, {}); },
                    "FP8 on the CPU needs a workspace of " + std::to_string(needed) +
                        " bytes (got 0) on the " + kernels::cpu_gemm_engine() +
                        " engine; size it with gemm_workspace_bytes after choosing the engine");
  HostBytes w;
  GemmOptions small;
  small.workspace = w.make(DType::u8, {static_cast<int64_t>(needed - 1)});
  expect_gemm_error([&] { kernels::gemm(a, b, c, small); },
                    "(got " + std::to_string(needed - 1) + ")");
}

// What each CPU engine needs: FP8 GEMMs room for both operands widened (bf16, or f32 on
// onednn-f32) and an f32 M x N accumulator with a scale per row and column (the fused path's
// epilogue, per tensor too; onednn-f32's f32 C for a bf16 one shares its bytes); bf16 GEMMs
// nothing, but on onednn-f32 f32 copies of A, B and a bf16 C; f32 GEMMs nothing. Each within
// 64-byte alignment slack.
TEST(GemmWorkspace, TheCpuEnginesNeedTheirCopiesAndNothingElse) {
  EngineGuard guard;
  HostBytes m;
  const Tensor a = m.make(DType::bf16, {3, 7}), b = m.make(DType::bf16, {5, 7});
  const Tensor a32 = m.make(DType::f32, {3, 7}), b32 = m.make(DType::f32, {5, 7});
  const Tensor a8 = m.make(DType::e4m3, {300, 64}), b8 = m.make(DType::e5m2, {20, 64});
  for (GemmImpl engine : testing::cpu_engines()) {
    kernels::cpu::set_gemm_impl(engine);
    SCOPED_TRACE(kernels::cpu::gemm_impl_name(engine));
    const bool f32_engine = engine == GemmImpl::onednn_f32;
    EXPECT_EQ(kernels::gemm_workspace_bytes(a32, b32, m.make(DType::f32, {3, 5}), {}), 0u);
    const size_t bf16_to_f32 = kernels::gemm_workspace_bytes(a, b, m.make(DType::f32, {3, 5}), {});
    const size_t bf16_to_bf16 =
        kernels::gemm_workspace_bytes(a, b, m.make(DType::bf16, {3, 5}), {});
    EXPECT_EQ(bf16_to_f32, f32_engine ? 64u + (3u * 7u + 5u * 7u) * 4u : 0u);
    EXPECT_EQ(bf16_to_bf16, f32_engine ? 64u + (3u * 7u + 5u * 7u + 3u * 5u) * 4u : 0u);
    const size_t bytes = kernels::gemm_workspace_bytes(a8, b8, m.make(DType::bf16, {300, 20}), {});
    const size_t want =
        (300u + 20u) * 64u * (f32_engine ? 4u : 2u) + 300u * 20u * 4u + (300u + 20u) * 4u;
    EXPECT_GE(bytes, want);
    EXPECT_LE(bytes, want + 4 * 64u);  // plus alignment slack only
  }
}

// onednn-f32 takes its f32 copies from the workspace: a bf16 GEMM without one is refused with
// the size it needs (kernels never allocate).
TEST(GemmWorkspace, ABf16GemmOnOnednnF32WithoutItsWorkspaceIsRefused) {
  if (!kernels::cpu::onednn_available()) GTEST_SKIP() << "this build has no oneDNN";
  EngineGuard guard;
  kernels::cpu::set_gemm_impl(GemmImpl::onednn_f32);
  HostBytes m;
  const Tensor a = m.make(DType::bf16, {3, 7}), b = m.make(DType::bf16, {5, 7});
  const Tensor c = m.make(DType::bf16, {3, 5});
  const size_t needed = kernels::gemm_workspace_bytes(a, b, c, {});
  expect_gemm_error([&] { kernels::gemm(a, b, c, {}); },
                    "needs a workspace of " + std::to_string(needed) + " bytes");
}

// K = 0 gives C = beta * C (and beta = 0 an exact zero) on every engine, bf16 and f32.
TEST(GemmOnCpu, AnEmptyReductionGivesBetaTimesCOnEveryEngine) {
  EngineGuard guard;
  for (GemmImpl engine : testing::cpu_engines()) {
    kernels::cpu::set_gemm_impl(engine);
    for (DType ab : {DType::f32, DType::bf16}) {
      for (const float beta : {0.0f, 0.5f}) {
        std::vector<uint8_t> none(16);
        std::vector<float> c(6, 3.0f);
        const Tensor a(none.data(), ab, {2, 0}), b(none.data(), ab, {3, 0});
        const Tensor ct(c.data(), DType::f32, {2, 3});
        GemmOptions o;
        o.beta = beta;
        std::vector<uint8_t> ws(kernels::gemm_workspace_bytes(a, b, ct, o) + 1);
        o.workspace = Tensor(ws.data(), DType::u8, {static_cast<int64_t>(ws.size())});
        kernels::gemm(a, b, ct, o);
        for (float v : c)
          EXPECT_EQ(v, beta * 3.0f)
              << kernels::cpu::gemm_impl_name(engine) << " " << dtype_name(ab) << " beta " << beta;
      }
    }
  }
}

// ---- CUDA only: the plan cache and the refusals that happen after dispatch ----

TEST(CudaGemmPlans, ASecondCallWithTheSameShapeReusesItsPlan) {
  const Device cuda = Device::cuda(0);
  OCTET_SKIP_WITHOUT(cuda);
  testing::Rng rng(testing::fresh_seed());
  const Problem p =
      make_problem(DType::bf16, DType::bf16, DType::f32, 37, 45, 64, false, true, 1, 0, rng);
  run_gemm(cuda, p);
  const size_t after_first = kernels::gemm_cuda_plan_count();
  EXPECT_GE(after_first, 1u);
  // New buffers of the same shape (cudaMalloc aligns them alike): the same plan.
  run_gemm(cuda, p);
  run_gemm(cuda, p);
  EXPECT_EQ(kernels::gemm_cuda_plan_count(), after_first);
  // Another shape, and the same shape with beta != 0, are other problems.
  run_gemm(cuda,
           make_problem(DType::bf16, DType::bf16, DType::f32, 38, 45, 64, false, true, 1, 0, rng));
  EXPECT_EQ(kernels::gemm_cuda_plan_count(), after_first + 1);
  run_gemm(cuda, make_problem(DType::bf16, DType::bf16, DType::f32, 37, 45, 64, false, true, 1,
                              0.5f, rng));
  EXPECT_EQ(kernels::gemm_cuda_plan_count(), after_first + 2);
}

TEST(CudaGemmErrors, MisalignedFp8OperandsAndAShortWorkspaceAreRefused) {
  const Device cuda = Device::cuda(0);
  OCTET_SKIP_WITHOUT(cuda);
  const int64_t m = 8, n = 16, k = 64;
  Buffer a_buf(cuda, m * k + 16), b_buf(cuda, n * k), c_buf(cuda, m * n * 4);
  Buffer scales(cuda, 256), workspace(cuda, 1 << 20);
  zero_bytes(a_buf.data(), cuda, a_buf.bytes());
  zero_bytes(b_buf.data(), cuda, b_buf.bytes());
  zero_bytes(scales.data(), cuda, scales.bytes());
  const Tensor b = b_buf.view(DType::e4m3, {n, k}), c = c_buf.view(DType::f32, {m, n});
  GemmOptions o;
  o.workspace = workspace.view(DType::u8, {1 << 20});
  // A starting 8 bytes into its buffer: cuBLASLt's FP8 kernels need 16-byte alignment.
  const Tensor a_odd = a_buf.view(DType::e4m3, {m, k}, 8);
  expect_gemm_error([&] { kernels::gemm(a_odd, b, c, o); },
                    "FP8 GEMMs on CUDA need A 16-byte aligned");
  // MX is emulated: both operands are dequantized into the workspace, which must hold them.
  const Tensor a = a_buf.view(DType::e4m3, {m, k});
  GemmOptions mx;
  mx.a_grid = mx.b_grid = kernels::ScaleGrid{1, 32, true};
  mx.a_scale_inv = scales.view(DType::e8m0, {m, k / 32});
  mx.b_scale_inv = scales.view(DType::e8m0, {n, k / 32}, 64);
  const size_t needed = kernels::gemm_workspace_bytes(a, b, c, mx);
  EXPECT_GE(needed, static_cast<size_t>((m + n) * k * 2));  // both operands as bf16
  mx.workspace = workspace.view(DType::u8, {100});
  expect_gemm_error([&] { kernels::gemm(a, b, c, mx); }, "this CUDA GEMM needs a workspace of");
  // With the size gemm_workspace_bytes asks for it runs (zeros in, zeros out).
  Buffer enough(cuda, needed);
  mx.workspace = enough.view(DType::u8, {static_cast<int64_t>(needed)});
  kernels::gemm(a, b, c, mx);
  std::vector<float> out(m * n, 1.0f);
  copy_bytes(out.data(), Device::cpu(), c.data, cuda, out.size() * 4);
  EXPECT_EQ(*std::max_element(out.begin(), out.end()), 0.0f);
  EXPECT_EQ(*std::min_element(out.begin(), out.end()), 0.0f);
}

TEST(CpuGemmEngine, AnEngineThisBuildOrCpuLacksIsRefused) {
  EngineGuard guard;
  if (kernels::cpu::onednn_available()) {
    kernels::cpu::set_gemm_impl(GemmImpl::onednn_f32);
    EXPECT_EQ(kernels::cpu::gemm_impl(), GemmImpl::onednn_f32);
  } else {
    expect_gemm_error([] { kernels::cpu::set_gemm_impl(GemmImpl::onednn_f32); }, "without oneDNN");
  }
  if (kernels::cpu::onednn_bf16_available()) {
    kernels::cpu::set_gemm_impl(GemmImpl::onednn);
    EXPECT_EQ(kernels::cpu::gemm_impl(), GemmImpl::onednn);
  } else {
    expect_gemm_error(
        [] { kernels::cpu::set_gemm_impl(GemmImpl::onednn); },
        kernels::cpu::onednn_available() ? "no bf16 matmul on this CPU" : "without oneDNN");
  }
  kernels::cpu::set_gemm_impl(GemmImpl::reference);
  EXPECT_EQ(kernels::cpu::gemm_impl(), GemmImpl::reference);
}

// The default engine is the fastest that runs here: oneDNN's bf16 where it has one and f32 FMAs
// do not outrun the CPU's bf16 dot products, else oneDNN on f32 copies (an AVX2 CPU, or an Intel
// one with AVX512_BF16 and no AMX), else the reference.
TEST(CpuGemmEngine, TheDefaultIsOneThatRunsOnThisCpu) {
  const char* env = std::getenv("OCTET_CPU_GEMM");
  if (env != nullptr && *env != '\0') GTEST_SKIP() << "OCTET_CPU_GEMM=" << env << " chooses";
  const bool bf16 =
      kernels::cpu::onednn_bf16_available() && !kernels::cpu::f32_fma_outruns_bf16_dot();
  const GemmImpl expected = !kernels::cpu::onednn_available() ? GemmImpl::reference
                            : bf16                            ? GemmImpl::onednn
                                                              : GemmImpl::onednn_f32;
  EXPECT_EQ(kernels::cpu::gemm_impl(), expected);
}

// The public switch (kernels/gemm.h) that `octet bench gemm --impl` uses, by name.
TEST(CpuGemmEngine, IsChosenByNameThroughTheKernelsApi) {
  EngineGuard guard;
  kernels::set_cpu_gemm_engine("reference");
  EXPECT_STREQ(kernels::cpu_gemm_engine(), "reference");
  for (GemmImpl impl : testing::cpu_engines()) {
    kernels::set_cpu_gemm_engine(kernels::cpu::gemm_impl_name(impl));
    EXPECT_EQ(kernels::cpu::gemm_impl(), impl);
  }
  expect_gemm_error([] { kernels::set_cpu_gemm_engine("blas"); }, "unknown CPU GEMM engine 'blas'");
}

}  // namespace
}  // namespace octet
