// tests/kernels/test_norm.cpp: kernels::rmsnorm_forward/backward against float64
// references with derived bounds and finite differences, on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/norm.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;

constexpr int64_t kNormRows = 2 * 7, kDim = 40;
constexpr float kEps = 1e-5f;

// The forward and backward formulas in float64, step by step as the kernel evaluates
// them in fp32, each value with its running error bound (testing::Approx): that is
// the tolerance of every assertion below (plus 2^-8 relative per bf16 rounding, which
// round_to adds where the kernel rounds).
struct NormReference {
  std::vector<Approx> y, rstd, dx, dweight;
};

// Sums in any order (testing::sum), so the bounds hold for the CPU's lanes and for the CUDA
// kernel's tree of warp sums and its per-block dweight partials alike.
NormReference reference(const std::vector<double>& x, const std::vector<double>& w,
                        const std::vector<double>& dy, const std::vector<double>& dweight0,
                        DType dtype, int64_t rows = kNormRows, int64_t dim = kDim) {
  NormReference ref;
  std::vector<std::vector<Approx>> dw_terms(dim);
  for (int64_t j = 0; j < dim; ++j) dw_terms[j] = {exact(dweight0[j])};
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<Approx> squares, dot_terms;
    for (int64_t j = 0; j < dim; ++j)
      squares.push_back(exact(x[t * dim + j]) * exact(x[t * dim + j]));
    const Approx r = exact(1.0) / testing::sqrt(testing::sum(squares) / exact(dim) + exact(kEps));
    ref.rstd.push_back(r);
    std::vector<Approx> dn(dim);
    for (int64_t j = 0; j < dim; ++j) {
      const Approx xj = exact(x[t * dim + j]), dyj = exact(dy[t * dim + j]);
      const Approx n = testing::round_to(dtype, xj * r);
      ref.y.push_back(testing::round_to(dtype, exact(w[j]) * n));
      dn[j] = dyj * exact(w[j]);
      dot_terms.push_back(dn[j] * xj);
      dw_terms[j].push_back(dyj * n);
    }
    const Approx c = testing::sum(dot_terms) * r * r * r / exact(dim);
    for (int64_t j = 0; j < dim; ++j) {
      ref.dx.push_back(testing::round_to(dtype, r * dn[j] - c * exact(x[t * dim + j])));
    }
  }
  for (int64_t j = 0; j < dim; ++j) ref.dweight.push_back(testing::sum(dw_terms[j]));
  return ref;
}

// Rows of different scales (2^-3 .. 2^3): RMSNorm must not care.
std::vector<double> random_rows(testing::Rng& rng, int64_t rows = kNormRows, int64_t dim = kDim) {
  std::vector<double> x = testing::uniform(rows * dim, -2, 2, rng);
  for (int64_t t = 0; t < rows; ++t) {
    const double scale = std::exp2(testing::uniform(1, -3, 3, rng)[0]);
    for (int64_t j = 0; j < dim; ++j) x[t * dim + j] *= scale;
  }
  return x;
}

class RmsNormOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(RmsNormOnDevice, ForwardAndBackwardMatchFloat64WithinRunningErrorBounds) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (DType wdtype : {DType::f32, DType::bf16}) {
      const std::string what = std::string(dtype_name(dtype)) + " weight " + dtype_name(wdtype);
      std::vector<double> x = random_rows(rng), w = testing::uniform(kDim, -1.5, 1.5, rng);
      std::vector<double> dy = testing::uniform(kNormRows * kDim, -1, 1, rng);
      std::vector<double> dweight0 = testing::uniform(kDim, -1, 1, rng);
      const auto xt = testing::upload(device, dtype, {kNormRows, kDim}, x);
      const auto wt = testing::upload(device, wdtype, {kDim}, w);
      const auto dyt = testing::upload(device, dtype, {kNormRows, kDim}, dy);
      const auto dwt = testing::upload(device, DType::f32, {kDim}, dweight0);
      const auto yt =
          testing::upload(device, dtype, {kNormRows, kDim}, std::vector<double>(kNormRows * kDim));
      const auto rstd =
          testing::upload(device, DType::f32, {kNormRows}, std::vector<double>(kNormRows));
      const auto dxt =
          testing::upload(device, dtype, {kNormRows, kDim}, std::vector<double>(kNormRows * kDim));
      const NormReference ref = reference(x, w, dy, dweight0, dtype);

      kernels::rmsnorm_forward(xt.tensor, wt.tensor, yt.tensor, rstd.tensor, kEps);
      testing::expect_within(testing::download(yt.tensor), ref.y, what + " y");
      testing::expect_within(testing::download(rstd.tensor), ref.rstd, what + " rstd");

      kernels::rmsnorm_backward(dyt.tensor, xt.tensor, wt.tensor, rstd.tensor, dxt.tensor,
                                dwt.tensor);
      testing::expect_within(testing::download(dxt.tensor), ref.dx, what + " dx");
      testing::expect_within(testing::download(dwt.tensor), ref.dweight, what + " dweight");

      // In place (y = x, dx = dy) gives the same bits.
      const std::vector<double> y = testing::download(yt.tensor),
                                dx = testing::download(dxt.tensor);
      kernels::rmsnorm_backward(dyt.tensor, xt.tensor, wt.tensor, rstd.tensor, dyt.tensor,
                                dwt.tensor);
      EXPECT_EQ(testing::download(dyt.tensor), dx) << what << " in place";
      kernels::rmsnorm_forward(xt.tensor, wt.tensor, xt.tensor, rstd.tensor, kEps);
      EXPECT_EQ(testing::download(xt.tensor), y) << what << " in place";
    }
  }
}

// Forward and backward on `device` for [rows, dim] against float64 and, off the CPU, against
// the CPU kernel on the same inputs, within the sum of the two bounds (the devices sum in
// different orders; each result is within its bound of the exact value).
void expect_norm_matches(Device device, int64_t rows, int64_t dim, bool misaligned,
                         testing::Rng& rng) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (DType wdtype : {DType::f32, DType::bf16}) {
      const std::string what = std::string(dtype_name(dtype)) + " weight " + dtype_name(wdtype) +
                               " [" + std::to_string(rows) + ", " + std::to_string(dim) + "]" +
                               (misaligned ? " misaligned" : "");
      std::vector<double> x = random_rows(rng, rows, dim),
                          w = testing::uniform(dim, -1.5, 1.5, rng);
      std::vector<double> dy = testing::uniform(rows * dim, -1, 1, rng);
      std::vector<double> dweight0 = testing::uniform(dim, -1, 1, rng);
      const auto xt = misaligned ? testing::upload_misaligned(device, dtype, {rows, dim}, x)
                                 : testing::upload(device, dtype, {rows, dim}, x);
      const auto wt = testing::upload(device, wdtype, {dim}, w);
      const auto dyt = testing::upload(device, dtype, {rows, dim}, dy);
      const auto dwt = testing::upload(device, DType::f32, {dim}, dweight0);
      const auto yt = testing::upload(device, dtype, {rows, dim}, std::vector<double>(rows * dim));
      const auto rstd = testing::upload(device, DType::f32, {rows}, std::vector<double>(rows));
      const auto dxt = testing::upload(device, dtype, {rows, dim}, std::vector<double>(rows * dim));
      kernels::rmsnorm_forward(xt.tensor, wt.tensor, yt.tensor, rstd.tensor, kEps);
      kernels::rmsnorm_backward(dyt.tensor, xt.tensor, wt.tensor, rstd.tensor, dxt.tensor,
                                dwt.tensor);
      const std::vector<std::vector<double>> got = {
          testing::download(yt.tensor), testing::download(rstd.tensor),
          testing::download(dxt.tensor), testing::download(dwt.tensor)};

      const NormReference ref = reference(x, w, dy, dweight0, dtype, rows, dim);
      const std::vector<Approx>* want[] = {&ref.y, &ref.rstd, &ref.dx, &ref.dweight};
      const char* names[] = {" y", " rstd", " dx", " dweight"};
      for (int k = 0; k < 4; ++k) testing::expect_within(got[k], *want[k], what + names[k]);
      if (device.is_cpu()) continue;

      const Device cpu = Device::cpu();
      const auto xc = testing::upload(cpu, dtype, {rows, dim}, x);
      const auto wc = testing::upload(cpu, wdtype, {dim}, w);
      const auto dyc = testing::upload(cpu, dtype, {rows, dim}, dy);
      const auto dwc = testing::upload(cpu, DType::f32, {dim}, dweight0);
      const auto yc = testing::upload(cpu, dtype, {rows, dim}, std::vector<double>(rows * dim));
      const auto rc = testing::upload(cpu, DType::f32, {rows}, std::vector<double>(rows));
      kernels::rmsnorm_forward(xc.tensor, wc.tensor, yc.tensor, rc.tensor, kEps);
      kernels::rmsnorm_backward(dyc.tensor, xc.tensor, wc.tensor, rc.tensor, dyc.tensor,
                                dwc.tensor);
      const std::vector<std::vector<double>> cpu_got = {
          testing::download(yc.tensor), testing::download(rc.tensor), testing::download(dyc.tensor),
          testing::download(dwc.tensor)};
      for (int k = 0; k < 4; ++k) {
        testing::expect_within(got[k], testing::centred_on(cpu_got[k], *want[k], *want[k]),
                               what + names[k] + " vs cpu");
      }
    }
  }
}

// Rows of 16-byte groups with 256 threads (D = 4096) and 512 threads (D = 8192, the widest
// the CUDA kernel takes), idle threads (D = 1000), the element-wise paths (D = 1001, or x off
// a 16-byte boundary), and enough rows that the backward kernel's blocks take several rows
// each and dweight sums hundreds of block partials (1100 rows).
TEST_P(RmsNormOnDevice, WideOddAndMisalignedRowsMatchFloat64AndTheCpu) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  expect_norm_matches(device, 24, 4096, false, rng);
  expect_norm_matches(device, 3, 8192, false, rng);
  expect_norm_matches(device, 37, 1000, false, rng);
  expect_norm_matches(device, 9, 1001, false, rng);
  expect_norm_matches(device, 11, 256, true, rng);
  expect_norm_matches(device, 1100, 64, false, rng);
  expect_norm_matches(device, 2, 3, false, rng);
  if (device.is_cuda()) {
    // Wider rows than 512 threads of 16 columns are refused, not computed wrong.
    const int64_t dim = 8200;
    const auto x = testing::upload(device, DType::bf16, {2, dim}, std::vector<double>(2 * dim));
    const auto w = testing::upload(device, DType::f32, {dim}, std::vector<double>(dim));
    const auto r = testing::upload(device, DType::f32, {2}, std::vector<double>(2));
    testing::expect_op_error(
        [&] { kernels::rmsnorm_forward(x.tensor, w.tensor, x.tensor, r.tensor, kEps); },
        "rmsnorm_forward", "D=8200 is wider than the CUDA kernel's 8192 columns");
  }
}

TEST_P(RmsNormOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  std::vector<double> x = testing::uniform(kNormRows * kDim, -1, 1, rng);
  std::vector<double> w = testing::uniform(kDim, -1.5, 1.5, rng);
  std::vector<double> r = testing::uniform(kNormRows * kDim, -1, 1, rng);
  const auto xt = testing::upload(device, DType::f32, {kNormRows, kDim}, x);
  const auto wt = testing::upload(device, DType::f32, {kDim}, w);
  const auto rt = testing::upload(device, DType::f32, {kNormRows, kDim}, r);
  const auto yt =
      testing::upload(device, DType::f32, {kNormRows, kDim}, std::vector<double>(kNormRows * kDim));
  const auto rstd =
      testing::upload(device, DType::f32, {kNormRows}, std::vector<double>(kNormRows));
  const auto dxt =
      testing::upload(device, DType::f32, {kNormRows, kDim}, std::vector<double>(kNormRows * kDim));
  const auto dwt = testing::upload(device, DType::f32, {kDim}, std::vector<double>(kDim));
  const NormReference ref = reference(x, w, r, std::vector<double>(kDim), DType::f32);
  kernels::rmsnorm_forward(xt.tensor, wt.tensor, yt.tensor, rstd.tensor, kEps);
  kernels::rmsnorm_backward(rt.tensor, xt.tensor, wt.tensor, rstd.tensor, dxt.tensor, dwt.tensor);

  std::vector<double> out_bound, dx_bound, dw_bound;
  for (const Approx& a : ref.y) out_bound.push_back(a.e);
  for (const Approx& a : ref.dx) dx_bound.push_back(a.e);
  for (const Approx& a : ref.dweight) dw_bound.push_back(a.e);
  // L = sum r y; h = 2^-6 of the inputs' scale (|x| < 1): truncation and rounding terms
  // as derived in expect_gradient_matches_finite_differences.
  auto y_of_x = [&](const std::vector<double>& xs) {
    const auto in = testing::upload(device, DType::f32, {kNormRows, kDim}, xs);
    kernels::rmsnorm_forward(in.tensor, wt.tensor, yt.tensor, rstd.tensor, kEps);
    return testing::download(yt.tensor);
  };
  testing::expect_gradient_matches_finite_differences(
      x, y_of_x, r, out_bound, testing::download(dxt.tensor), dx_bound, 0x1p-6, "rmsnorm dx");
  auto y_of_w = [&](const std::vector<double>& ws) {
    const auto in = testing::upload(device, DType::f32, {kDim}, ws);
    kernels::rmsnorm_forward(xt.tensor, in.tensor, yt.tensor, rstd.tensor, kEps);
    return testing::download(yt.tensor);
  };
  testing::expect_gradient_matches_finite_differences(
      w, y_of_w, r, out_bound, testing::download(dwt.tensor), dw_bound, 0x1p-6, "rmsnorm dweight");
}

INSTANTIATE_TEST_SUITE_P(Devices, RmsNormOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(RmsNormErrors, ShapesDTypesAndAbsentDevicesAreRefused) {
  const Device cpu = Device::cpu();
  const auto x = testing::upload(cpu, DType::bf16, {3, 8}, std::vector<double>(24, 1.0));
  const auto y = testing::upload(cpu, DType::bf16, {3, 8}, std::vector<double>(24, 1.0));
  const auto y_f32 = testing::upload(cpu, DType::f32, {3, 8}, std::vector<double>(24, 1.0));
  const auto w = testing::upload(cpu, DType::f32, {8}, std::vector<double>(8, 1.0));
  const auto w7 = testing::upload(cpu, DType::f32, {7}, std::vector<double>(7, 1.0));
  const auto rstd = testing::upload(cpu, DType::f32, {3}, std::vector<double>(3));
  const auto rstd2 = testing::upload(cpu, DType::f32, {2}, std::vector<double>(2));
  const auto dw_bf16 = testing::upload(cpu, DType::bf16, {8}, std::vector<double>(8));
  const auto dw = testing::upload(cpu, DType::f32, {8}, std::vector<double>(8));
  testing::expect_op_error(
      [&] { kernels::rmsnorm_forward(x.tensor, w7.tensor, y.tensor, rstd.tensor, kEps); },
      "rmsnorm_forward", "weight must be f32 with 8 elements");
  testing::expect_op_error(
      [&] { kernels::rmsnorm_forward(x.tensor, w.tensor, y_f32.tensor, rstd.tensor, kEps); },
      "rmsnorm_forward", "y must have x's dtype bf16");
  testing::expect_op_error(
      [&] { kernels::rmsnorm_forward(x.tensor, w.tensor, y.tensor, rstd2.tensor, kEps); },
      "rmsnorm_forward", "rstd must be f32 with 3 elements");
  testing::expect_op_error(
      [&] { kernels::rmsnorm_forward(x.tensor, w.tensor, y.tensor, rstd.tensor, -1.0f); },
      "rmsnorm_forward", "eps must be finite and >= 0");
  testing::expect_op_error(
      [&] {
        kernels::rmsnorm_backward(y.tensor, x.tensor, w.tensor, rstd.tensor, y.tensor,
                                  dw_bf16.tensor);
      },
      "rmsnorm_backward", "dweight must be f32 with 8 elements");
  testing::expect_op_error(
      [&] {
        kernels::rmsnorm_backward(y.tensor, x.tensor, w.tensor, rstd.tensor, y_f32.tensor,
                                  dw.tensor);
      },
      "rmsnorm_backward", "dy and dx must have x's dtype");
  auto on_cuda = [](Tensor t) { return t.device = testing::absent_cuda_device(), t; };
  testing::expect_op_error(
      [&] {
        kernels::rmsnorm_forward(on_cuda(x.tensor), on_cuda(w.tensor), on_cuda(y.tensor),
                                 on_cuda(rstd.tensor), kEps);
      },
      "rmsnorm_forward", "CUDA device");
  testing::expect_op_error(
      [&] {
        kernels::rmsnorm_backward(on_cuda(y.tensor), on_cuda(x.tensor), on_cuda(w.tensor),
                                  on_cuda(rstd.tensor), on_cuda(y.tensor), on_cuda(dw.tensor));
      },
      "rmsnorm_backward", "CUDA device");
}

}  // namespace
}  // namespace octet
