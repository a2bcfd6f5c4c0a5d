// tests/kernels/test_swiglu.cpp: kernels::swiglu_forward/backward against a float64
// reference with derived bounds and finite differences, and their errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/swiglu.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;

constexpr int64_t kRows = 2 * 9, kHidden = 40;

// The kernel's fp32 formulas in float64 with their running error bounds (Approx):
//   forward  out = (g / (1 + exp(-g))) * u
//   backward s = 1 / (1 + exp(-g)); dgate = (dout * u) * (s * (1 + g * (1 - s)));
//            dup = dout * (g * s)
// and 2^-8 relative for a bf16 result. These are the tolerances.
struct SwiGluReference {
  std::vector<Approx> out, dgate_up;
};

SwiGluReference reference(const std::vector<double>& gate_up, const std::vector<double>& dout,
                          DType dtype) {
  SwiGluReference ref{{}, std::vector<Approx>(gate_up.size())};
  const Approx one = exact(1.0);
  for (int64_t t = 0; t < kRows; ++t) {
    for (int64_t j = 0; j < kHidden; ++j) {
      const Approx g = exact(gate_up[t * 2 * kHidden + j]);
      const Approx u = exact(gate_up[t * 2 * kHidden + kHidden + j]);
      const Approx d = exact(dout[t * kHidden + j]);
      const Approx e = testing::exp(-g);
      ref.out.push_back(testing::round_to(dtype, g / (one + e) * u));
      const Approx s = one / (one + e);
      ref.dgate_up[t * 2 * kHidden + j] =
          testing::round_to(dtype, (d * u) * (s * (one + g * (one - s))));
      ref.dgate_up[t * 2 * kHidden + kHidden + j] = testing::round_to(dtype, d * (g * s));
    }
  }
  return ref;
}

class SwiGluOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(SwiGluOnDevice, ForwardAndBackwardMatchFloat64WithinRunningErrorBounds) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  for (DType dtype : {DType::f32, DType::bf16}) {
    // Gates from -12 to 12: both tails of the sigmoid and its middle.
    std::vector<double> gate_up = testing::uniform(kRows * 2 * kHidden, -12, 12, rng);
    std::vector<double> dout = testing::uniform(kRows * kHidden, -1, 1, rng);
    const auto x = testing::upload(device, dtype, {kRows, 2 * kHidden}, gate_up);
    const auto g = testing::upload(device, dtype, {kRows, kHidden}, dout);
    const auto out =
        testing::upload(device, dtype, {kRows, kHidden}, std::vector<double>(kRows * kHidden));
    const auto dx = testing::upload(device, dtype, {kRows, 2 * kHidden},
                                    std::vector<double>(kRows * 2 * kHidden));
    const SwiGluReference ref = reference(gate_up, dout, dtype);
    kernels::swiglu_forward(x.tensor, out.tensor);
    testing::expect_within(testing::download(out.tensor), ref.out,
                           std::string(dtype_name(dtype)) + " out");
    kernels::swiglu_backward(g.tensor, x.tensor, dx.tensor);
    const std::vector<double> dgate_up = testing::download(dx.tensor);
    testing::expect_within(dgate_up, ref.dgate_up, std::string(dtype_name(dtype)) + " dgate_up");
    // In place over gate_up: the same bits.
    kernels::swiglu_backward(g.tensor, x.tensor, x.tensor);
    EXPECT_EQ(testing::download(x.tensor), dgate_up) << dtype_name(dtype) << " in place";
  }
}

TEST_P(SwiGluOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  std::vector<double> gate_up = testing::uniform(kRows * 2 * kHidden, -4, 4, rng);
  std::vector<double> r = testing::uniform(kRows * kHidden, -1, 1, rng);
  const auto rt = testing::upload(device, DType::f32, {kRows, kHidden}, r);
  const auto x = testing::upload(device, DType::f32, {kRows, 2 * kHidden}, gate_up);
  const auto out =
      testing::upload(device, DType::f32, {kRows, kHidden}, std::vector<double>(kRows * kHidden));
  const auto dx = testing::upload(device, DType::f32, {kRows, 2 * kHidden},
                                  std::vector<double>(kRows * 2 * kHidden));
  kernels::swiglu_backward(rt.tensor, x.tensor, dx.tensor);
  const SwiGluReference ref = reference(gate_up, r, DType::f32);
  std::vector<double> out_bound, grad_bound;
  for (const Approx& a : ref.out) out_bound.push_back(a.e);
  for (const Approx& a : ref.dgate_up) grad_bound.push_back(a.e);
  auto forward = [&](const std::vector<double>& xs) {
    const auto in = testing::upload(device, DType::f32, {kRows, 2 * kHidden}, xs);
    kernels::swiglu_forward(in.tensor, out.tensor);
    return testing::download(out.tensor);
  };
  // L = sum r out; |gate_up| < 4 and h = 2^-5: truncation estimated from the h / 2h pair,
  // rounding from the forward bounds (see the helper).
  testing::expect_gradient_matches_finite_differences(
      gate_up, forward, r, out_bound, testing::download(dx.tensor), grad_bound, 0x1p-5, "swiglu");
}

INSTANTIATE_TEST_SUITE_P(Devices, SwiGluOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(SwiGluErrors, ShapesDTypesAndCudaAreRefused) {
  const Device cpu = Device::cpu();
  const auto gu = testing::upload(cpu, DType::bf16, {3, 8}, std::vector<double>(24));
  const auto gu_odd = testing::upload(cpu, DType::bf16, {3, 7}, std::vector<double>(21));
  const auto out = testing::upload(cpu, DType::bf16, {3, 4}, std::vector<double>(12));
  const auto out_f32 = testing::upload(cpu, DType::f32, {3, 4}, std::vector<double>(12));
  const auto out_wide = testing::upload(cpu, DType::bf16, {3, 8}, std::vector<double>(24));
  testing::expect_op_error([&] { kernels::swiglu_forward(gu_odd.tensor, out.tensor); },
                           "swiglu_forward", "gate_up must be [T, 2F]");
  testing::expect_op_error([&] { kernels::swiglu_forward(gu.tensor, out_wide.tensor); },
                           "swiglu_forward", "out must be f32 or bf16 [3, 4]");
  testing::expect_op_error([&] { kernels::swiglu_forward(gu.tensor, out_f32.tensor); },
                           "swiglu_forward", "out must have gate_up's dtype bf16");
  testing::expect_op_error([&] { kernels::swiglu_backward(out.tensor, gu.tensor, out.tensor); },
                           "swiglu_backward", "dgate_up must be f32 or bf16 [3, 8]");
  testing::expect_op_error([&] { kernels::swiglu_backward(out_f32.tensor, gu.tensor, gu.tensor); },
                           "swiglu_backward", "dout and dgate_up must have gate_up's dtype");
  Tensor gu_cuda = gu.tensor, out_cuda = out.tensor;
  gu_cuda.device = out_cuda.device = Device::cuda(0);
  testing::expect_op_error([&] { kernels::swiglu_forward(gu_cuda, out_cuda); }, "swiglu_forward",
                           "has no CUDA implementation yet");
  testing::expect_op_error([&] { kernels::swiglu_backward(out_cuda, gu_cuda, gu_cuda); },
                           "swiglu_backward", "has no CUDA implementation yet");
}

}  // namespace
}  // namespace octet
