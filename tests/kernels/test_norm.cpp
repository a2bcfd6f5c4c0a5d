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

constexpr int64_t kRows = 2 * 7, kDim = 40;
constexpr float kEps = 1e-5f;

// The forward and backward formulas in float64, step by step as the kernel evaluates
// them in fp32, each value with its running error bound (testing::Approx): that is
// the tolerance of every assertion below (plus 2^-8 relative per bf16 rounding, which
// round_to adds where the kernel rounds).
struct NormReference {
  std::vector<Approx> y, rstd, dx, dweight;
};

NormReference reference(const std::vector<double>& x, const std::vector<double>& w,
                        const std::vector<double>& dy, const std::vector<double>& dweight0,
                        DType dtype) {
  NormReference ref;
  std::vector<Approx> dw_terms[kDim];
  for (int64_t j = 0; j < kDim; ++j) dw_terms[j] = {exact(dweight0[j])};
  for (int64_t t = 0; t < kRows; ++t) {
    std::vector<Approx> squares, dot_terms;
    for (int64_t j = 0; j < kDim; ++j)
      squares.push_back(exact(x[t * kDim + j]) * exact(x[t * kDim + j]));
    const Approx r = exact(1.0) / testing::sqrt(testing::sum(squares) / exact(kDim) + exact(kEps));
    ref.rstd.push_back(r);
    std::vector<Approx> dn(kDim);
    for (int64_t j = 0; j < kDim; ++j) {
      const Approx xj = exact(x[t * kDim + j]), dyj = exact(dy[t * kDim + j]);
      const Approx n = testing::round_to(dtype, xj * r);
      ref.y.push_back(testing::round_to(dtype, exact(w[j]) * n));
      dn[j] = dyj * exact(w[j]);
      dot_terms.push_back(dn[j] * xj);
      dw_terms[j].push_back(dyj * n);
    }
    const Approx c = testing::sum(dot_terms) * r * r * r / exact(kDim);
    for (int64_t j = 0; j < kDim; ++j) {
      ref.dx.push_back(testing::round_to(dtype, r * dn[j] - c * exact(x[t * kDim + j])));
    }
  }
  for (int64_t j = 0; j < kDim; ++j) ref.dweight.push_back(testing::sum(dw_terms[j]));
  return ref;
}

// Rows of different scales (2^-3 .. 2^3): RMSNorm must not care.
std::vector<double> random_rows(testing::Rng& rng) {
  std::vector<double> x = testing::uniform(kRows * kDim, -2, 2, rng);
  for (int64_t t = 0; t < kRows; ++t) {
    const double scale = std::exp2(testing::uniform(1, -3, 3, rng)[0]);
    for (int64_t j = 0; j < kDim; ++j) x[t * kDim + j] *= scale;
  }
  return x;
}

class RmsNormOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(RmsNormOnDevice, ForwardAndBackwardMatchFloat64WithinRunningErrorBounds) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (DType wdtype : {DType::f32, DType::bf16}) {
      const std::string what = std::string(dtype_name(dtype)) + " weight " + dtype_name(wdtype);
      std::vector<double> x = random_rows(rng), w = testing::uniform(kDim, -1.5, 1.5, rng);
      std::vector<double> dy = testing::uniform(kRows * kDim, -1, 1, rng);
      std::vector<double> dweight0 = testing::uniform(kDim, -1, 1, rng);
      const auto xt = testing::upload(device, dtype, {kRows, kDim}, x);
      const auto wt = testing::upload(device, wdtype, {kDim}, w);
      const auto dyt = testing::upload(device, dtype, {kRows, kDim}, dy);
      const auto dwt = testing::upload(device, DType::f32, {kDim}, dweight0);
      const auto yt =
          testing::upload(device, dtype, {kRows, kDim}, std::vector<double>(kRows * kDim));
      const auto rstd = testing::upload(device, DType::f32, {kRows}, std::vector<double>(kRows));
      const auto dxt =
          testing::upload(device, dtype, {kRows, kDim}, std::vector<double>(kRows * kDim));
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

TEST_P(RmsNormOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  std::vector<double> x = testing::uniform(kRows * kDim, -1, 1, rng);
  std::vector<double> w = testing::uniform(kDim, -1.5, 1.5, rng);
  std::vector<double> r = testing::uniform(kRows * kDim, -1, 1, rng);
  const auto xt = testing::upload(device, DType::f32, {kRows, kDim}, x);
  const auto wt = testing::upload(device, DType::f32, {kDim}, w);
  const auto rt = testing::upload(device, DType::f32, {kRows, kDim}, r);
  const auto yt =
      testing::upload(device, DType::f32, {kRows, kDim}, std::vector<double>(kRows * kDim));
  const auto rstd = testing::upload(device, DType::f32, {kRows}, std::vector<double>(kRows));
  const auto dxt =
      testing::upload(device, DType::f32, {kRows, kDim}, std::vector<double>(kRows * kDim));
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
    const auto in = testing::upload(device, DType::f32, {kRows, kDim}, xs);
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

TEST(RmsNormErrors, ShapesDTypesAndCudaAreRefused) {
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
  auto on_cuda = [](Tensor t) { return t.device = Device::cuda(0), t; };
  testing::expect_op_error(
      [&] {
        kernels::rmsnorm_forward(on_cuda(x.tensor), on_cuda(w.tensor), on_cuda(y.tensor),
                                 on_cuda(rstd.tensor), kEps);
      },
      "rmsnorm_forward", "has no CUDA implementation yet");
  testing::expect_op_error(
      [&] {
        kernels::rmsnorm_backward(on_cuda(y.tensor), on_cuda(x.tensor), on_cuda(w.tensor),
                                  on_cuda(rstd.tensor), on_cuda(y.tensor), on_cuda(dw.tensor));
      },
      "rmsnorm_backward", "has no CUDA implementation yet");
}

}  // namespace
}  // namespace octet
