// tests/kernels/test_swiglu.cpp: kernels::swiglu_forward/backward against a float64
// reference with derived bounds and finite differences, and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/swiglu.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;

constexpr int64_t kSwigluRows = 2 * 9, kHidden = 40;

using testing::expf_on;

// The kernel's fp32 formulas in float64 with their running error bounds (Approx):
//   forward  out = (g / (1 + exp(-g))) * u
//   backward s = 1 / (1 + exp(-g)); dgate = (dout * u) * (s * (1 + g * (1 - s)));
//            dup = dout * (g * s)
// and 2^-8 relative for a bf16 result. These are the tolerances; `device` picks the
// bound of exp (the only operation whose accuracy differs between the devices: the
// CUDA kernel rounds every other operation as the CPU does).
struct SwiGluReference {
  std::vector<Approx> out, dgate_up;
};

SwiGluReference reference(const std::vector<double>& gate_up, const std::vector<double>& dout,
                          int64_t rows, int64_t hidden, DType dtype, Device device) {
  SwiGluReference ref{{}, std::vector<Approx>(gate_up.size())};
  const Approx one = exact(1.0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < hidden; ++j) {
      const Approx g = exact(gate_up[t * 2 * hidden + j]);
      const Approx u = exact(gate_up[t * 2 * hidden + hidden + j]);
      const Approx d = exact(dout[t * hidden + j]);
      const Approx e = expf_on(device, -g);
      ref.out.push_back(testing::round_to(dtype, g / (one + e) * u));
      const Approx s = one / (one + e);
      ref.dgate_up[t * 2 * hidden + j] =
          testing::round_to(dtype, (d * u) * (s * (one + g * (one - s))));
      ref.dgate_up[t * 2 * hidden + hidden + j] = testing::round_to(dtype, d * (g * s));
    }
  }
  return ref;
}
SwiGluReference reference(const std::vector<double>& gate_up, const std::vector<double>& dout,
                          DType dtype, Device device) {
  return reference(gate_up, dout, kSwigluRows, kHidden, dtype, device);
}

class SwiGluOnDevice : public ::testing::TestWithParam<Device> {};

// Forward and backward (also in place) against the float64 reference, both dtypes.
void expect_matches_float64(Device device, testing::Rng& rng) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    // Gates from -12 to 12: both tails of the sigmoid and its middle.
    std::vector<double> gate_up = testing::uniform(kSwigluRows * 2 * kHidden, -12, 12, rng);
    std::vector<double> dout = testing::uniform(kSwigluRows * kHidden, -1, 1, rng);
    const auto x = testing::upload(device, dtype, {kSwigluRows, 2 * kHidden}, gate_up);
    const auto g = testing::upload(device, dtype, {kSwigluRows, kHidden}, dout);
    const auto out = testing::upload(device, dtype, {kSwigluRows, kHidden},
                                     std::vector<double>(kSwigluRows * kHidden));
    const auto dx = testing::upload(device, dtype, {kSwigluRows, 2 * kHidden},
                                    std::vector<double>(kSwigluRows * 2 * kHidden));
    const SwiGluReference ref = reference(gate_up, dout, dtype, device);
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

TEST_P(SwiGluOnDevice, ForwardAndBackwardMatchFloat64WithinRunningErrorBounds) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  expect_matches_float64(device, rng);
}

// The CPU kernels exist per instruction-set level (scalar, AVX2 and AVX-512 rows; OCTET_CPU_ISA
// caps the level): each level the machine has against the same float64 bounds. Rows of 40: five
// whole AVX2 vectors, two AVX-512 ones and a tail.
TEST(SwiGluCpu, EveryInstructionSetLevelMatchesFloat64) {
  testing::Rng rng(testing::fresh_seed());
  testing::for_each_cpu_isa([&] { expect_matches_float64(Device::cpu(), rng); });
}

TEST_P(SwiGluOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  std::vector<double> gate_up = testing::uniform(kSwigluRows * 2 * kHidden, -4, 4, rng);
  std::vector<double> r = testing::uniform(kSwigluRows * kHidden, -1, 1, rng);
  const auto rt = testing::upload(device, DType::f32, {kSwigluRows, kHidden}, r);
  const auto x = testing::upload(device, DType::f32, {kSwigluRows, 2 * kHidden}, gate_up);
  const auto out = testing::upload(device, DType::f32, {kSwigluRows, kHidden},
                                   std::vector<double>(kSwigluRows * kHidden));
  const auto dx = testing::upload(device, DType::f32, {kSwigluRows, 2 * kHidden},
                                  std::vector<double>(kSwigluRows * 2 * kHidden));
  kernels::swiglu_backward(rt.tensor, x.tensor, dx.tensor);
  const SwiGluReference ref = reference(gate_up, r, DType::f32, device);
  std::vector<double> out_bound, grad_bound;
  for (const Approx& a : ref.out) out_bound.push_back(a.e);
  for (const Approx& a : ref.dgate_up) grad_bound.push_back(a.e);
  auto forward = [&](const std::vector<double>& xs) {
    const auto in = testing::upload(device, DType::f32, {kSwigluRows, 2 * kHidden}, xs);
    kernels::swiglu_forward(in.tensor, out.tensor);
    return testing::download(out.tensor);
  };
  // L = sum r out; |gate_up| < 4 and h = 2^-5: truncation estimated from the h / 2h pair,
  // rounding from the forward bounds (see the helper).
  testing::expect_gradient_matches_finite_differences(
      gate_up, forward, r, out_bound, testing::download(dx.tensor), grad_bound, 0x1p-5, "swiglu");
}

struct SwiGluResult {
  std::vector<double> out, dgate_up;
};

// swiglu_forward and swiglu_backward on `device`, every tensor `offset` elements into its
// buffer; also checks that the backward pass in place over gate_up gives the same bits.
SwiGluResult run_swiglu(Device device, DType dtype, int64_t rows, int64_t hidden,
                        std::vector<double> gate_up, std::vector<double> dout, int64_t offset) {
  std::vector<double> out_init(rows * hidden), dx_init(rows * 2 * hidden);
  const auto x = testing::upload_at(device, dtype, rows, 2 * hidden, gate_up, offset);
  const auto g = testing::upload_at(device, dtype, rows, hidden, dout, offset);
  const auto out = testing::upload_at(device, dtype, rows, hidden, out_init, offset);
  const auto dx = testing::upload_at(device, dtype, rows, 2 * hidden, dx_init, offset);
  kernels::swiglu_forward(x.tensor, out.tensor);
  kernels::swiglu_backward(g.tensor, x.tensor, dx.tensor);
  SwiGluResult r{testing::download(out.tensor), testing::download(dx.tensor)};
  kernels::swiglu_backward(g.tensor, x.tensor, x.tensor);
  EXPECT_EQ(testing::download(x.tensor), r.dgate_up) << device_name(device) << " in place";
  return r;
}

TEST_P(SwiGluOnDevice, LargeOddAndMisalignedShapesMatchFloat64AndTheCpuKernel) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  struct Case {
    int64_t rows, hidden, offset;
  };
  // LLaMA-7B's and TinyLlama's F (16-byte packs over many CUDA blocks), an odd F and
  // F = 1 (one element at a time), and a packable F whose rows start one element off a
  // 16-byte boundary (the one-element path again).
  for (const Case c :
       {Case{3, 11008, 0}, Case{2, 5632, 0}, Case{5, 1001, 0}, Case{3, 1, 0}, Case{4, 2048, 1}}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string what = std::string(dtype_name(dtype)) + " [" + std::to_string(c.rows) +
                               ", 2 x " + std::to_string(c.hidden) + "] offset " +
                               std::to_string(c.offset);
      std::vector<double> gate_up = testing::uniform(c.rows * 2 * c.hidden, -12, 12, rng);
      std::vector<double> dout = testing::uniform(c.rows * c.hidden, -1, 1, rng);
      testing::round_in_place(dtype, gate_up);
      testing::round_in_place(dtype, dout);
      const SwiGluReference ref = reference(gate_up, dout, c.rows, c.hidden, dtype, device);
      const SwiGluResult got = run_swiglu(device, dtype, c.rows, c.hidden, gate_up, dout, c.offset);
      testing::expect_within(got.out, ref.out, what + " out");
      testing::expect_within(got.dgate_up, ref.dgate_up, what + " dgate_up");
      if (!device.is_cuda()) continue;
      const Device cpu = Device::cpu();
      const SwiGluReference ref_cpu = reference(gate_up, dout, c.rows, c.hidden, dtype, cpu);
      const SwiGluResult want = run_swiglu(cpu, dtype, c.rows, c.hidden, gate_up, dout, 0);
      testing::expect_within(got.out, testing::centred_on(want.out, ref.out, ref_cpu.out),
                             what + " out against the CPU kernel");
      testing::expect_within(got.dgate_up,
                             testing::centred_on(want.dgate_up, ref.dgate_up, ref_cpu.dgate_up),
                             what + " dgate_up against the CPU kernel");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, SwiGluOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

// The amax outputs are max |value| of what the kernels wrote (as stored: the bf16 or f32 bits),
// NaN where one is NaN, on every instruction-set level, over rows split among the threads (96
// rows of 688: past the parallel threshold) and a short tail row (the vector loops' last part).
TEST(SwiGluCpu, AmaxOutputsAreTheLargestMagnitudeWrittenOnEveryLevel) {
  testing::Rng rng(testing::fresh_seed());
  const Device cpu = Device::cpu();
  auto host_amax = [](const std::vector<double>& v) {
    double m = 0.0;
    for (double x : v) {
      if (std::isnan(x)) return static_cast<double>(NAN);
      m = std::max(m, std::fabs(x));
    }
    return m;
  };
  testing::for_each_cpu_isa([&] {
    for (DType dtype : {DType::bf16, DType::f32}) {
      for (const auto& [rows, hidden] : {std::pair<int64_t, int64_t>{96, 688}, {3, 37}}) {
        for (const bool nan : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " [" + std::to_string(rows) + ", " +
                       std::to_string(hidden) + "]" + (nan ? " with a NaN" : ""));
          std::vector<double> gate_up = testing::uniform(rows * 2 * hidden, -12, 12, rng);
          std::vector<double> dout = testing::uniform(rows * hidden, -1, 1, rng);
          if (nan) gate_up[static_cast<size_t>((rows - 1) * 2 * hidden + hidden - 1)] = NAN;
          const auto x = testing::upload(cpu, dtype, {rows, 2 * hidden}, gate_up);
          const auto g = testing::upload(cpu, dtype, {rows, hidden}, dout);
          const auto out =
              testing::upload(cpu, dtype, {rows, hidden}, std::vector<double>(rows * hidden));
          const auto dx = testing::upload(cpu, dtype, {rows, 2 * hidden},
                                          std::vector<double>(rows * 2 * hidden));
          const auto amax = testing::upload(cpu, DType::f32, {1}, std::vector<double>{-1.0});
          // The amax the kernel wrote against the host's over `written`.
          const auto expect_amax = [&](const Tensor& written, const char* what) {
            const double want = host_amax(testing::download(written));
            const double got = testing::download(amax.tensor)[0];
            EXPECT_TRUE(nan ? std::isnan(got) : got == want && got > 0.0)
                << what << ": " << got << ", want " << want;
          };
          kernels::swiglu_forward(x.tensor, out.tensor, amax.tensor);
          expect_amax(out.tensor, "out");
          kernels::swiglu_backward(g.tensor, x.tensor, dx.tensor, amax.tensor);
          expect_amax(dx.tensor, "dgate_up");
          // Without the output the kernels write the same values.
          const auto out2 =
              testing::upload(cpu, dtype, {rows, hidden}, std::vector<double>(rows * hidden));
          kernels::swiglu_forward(x.tensor, out2.tensor);
          const std::vector<double> a = testing::download(out.tensor),
                                    b = testing::download(out2.tensor);
          for (size_t i = 0; i < a.size(); ++i) {
            ASSERT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << i;
          }
        }
      }
    }
  });
}

TEST(SwiGluErrors, AnAmaxOutputMustBeF32OfOneOnTheCpu) {
  const Device cpu = Device::cpu();
  const auto gu = testing::upload(cpu, DType::bf16, {3, 8}, std::vector<double>(24));
  const auto out = testing::upload(cpu, DType::bf16, {3, 4}, std::vector<double>(12));
  const auto two = testing::upload(cpu, DType::f32, {2}, std::vector<double>(2));
  const auto bf16 = testing::upload(cpu, DType::bf16, {1}, std::vector<double>(1));
  testing::expect_op_error([&] { kernels::swiglu_forward(gu.tensor, out.tensor, two.tensor); },
                           "swiglu_forward", "out_amax must be f32[1] on the CPU, got f32[2]");
  testing::expect_op_error(
      [&] { kernels::swiglu_backward(out.tensor, gu.tensor, gu.tensor, bf16.tensor); },
      "swiglu_backward", "dgate_up_amax must be f32[1] on the CPU");
  // Refused before any kernel runs, so views of host memory show it in every build.
  Tensor gu_cuda = gu.tensor, out_cuda = out.tensor, amax_cuda = two.tensor;
  gu_cuda.device = out_cuda.device = amax_cuda.device = Device::cuda(0);
  amax_cuda.shape = Shape{1};
  testing::expect_op_error([&] { kernels::swiglu_forward(gu_cuda, out_cuda, amax_cuda); },
                           "swiglu_forward", "out_amax is computed on the CPU only");
}

TEST(SwiGluErrors, ShapesAndDTypesAreRefused) {
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
#if !defined(OCTET_HAVE_CUDA)
  // (In a CUDA build these views of host memory would reach the CUDA kernels.)
  Tensor gu_cuda = gu.tensor, out_cuda = out.tensor;
  gu_cuda.device = out_cuda.device = Device::cuda(0);
  testing::expect_op_error([&] { kernels::swiglu_forward(gu_cuda, out_cuda); }, "swiglu_forward",
                           "built without CUDA");
  testing::expect_op_error([&] { kernels::swiglu_backward(out_cuda, gu_cuda, gu_cuda); },
                           "swiglu_backward", "built without CUDA");
#endif
}

}  // namespace
}  // namespace octet
