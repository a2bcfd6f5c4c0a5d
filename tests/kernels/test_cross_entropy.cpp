// tests/kernels/test_cross_entropy.cpp: kernels::cross_entropy (loss and fused gradient)
// against a float64 reference with derived bounds and finite differences, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cross_entropy.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;

constexpr int64_t kRows = 2 * 7;

// Both devices' logf are within 1 ulp, as testing::log assumes.
using testing::expf_on;

// The bound on the rounding of the sum of exp(x_j - m) over a row of `vocab` logits,
// relative to the sum of the terms' magnitudes: gamma_K, K the most roundings on any
// term's way into the sum.
//  - CPU: one running sum, K = V - 1 additions.
//  - CUDA (kernels/cuda/cross_entropy.cu): an online softmax with 256 to 1024 threads
//    per row and packs of N <= 8 elements. A thread adds its at most
//    2 + N ceil(V / (256 N)) <= V / 256 + 10 terms one by one and rescales its sum at
//    most once per pack (an expf, <= 2 ulp = 4u, and a product: 5 roundings); the
//    threads' sums then meet in log2(1024) = 10 butterfly levels of one rescale and one
//    addition each. So K <= 6 (V / 256 + 10) + 6 * 10. The rescales' arguments are
//    rounded differences of running maxima, whose errors add up along a term's way to
//    at most u (m - x_j): the error of the rounded x_j - m the reference's terms carry.
double sum_rounding(Device device, int64_t vocab) {
  if (!device.is_cuda()) return testing::gamma(vocab - 1);
  return testing::gamma(6 * ((vocab + 255) / 256 + 20));
}

// The kernel's fp32 steps in float64 with their running error bounds (Approx); the
// max of the logits is exact, the rest rounds:
//   lse = m + log(sum_j exp(x_j - m)),  loss = lse - x_target,
//   dlogits_j = ((exp(x_j - lse) - [j == target]) * grad_scale), 2^-8 relative for bf16.
struct CrossEntropyReference {
  std::vector<Approx> losses, dlogits;
};

CrossEntropyReference reference(const std::vector<double>& logits,
                                const std::vector<int32_t>& targets, int64_t vocab,
                                float grad_scale, DType dtype, Device device) {
  CrossEntropyReference ref;
  const int64_t rows = static_cast<int64_t>(targets.size());
  const double gamma_sum = sum_rounding(device, vocab);
  for (int64_t t = 0; t < rows; ++t) {
    const double* x = logits.data() + t * vocab;
    const Approx m = exact(*std::max_element(x, x + vocab));
    Approx sum;
    double magnitude = 0.0;
    for (int64_t j = 0; j < vocab; ++j) {
      const Approx p = expf_on(device, exact(x[j]) - m);
      sum.v += p.v, sum.e += p.e, magnitude += std::abs(p.v) + p.e;
    }
    sum.e += gamma_sum * magnitude;
    const Approx lse = m + testing::log(sum);
    ref.losses.push_back(lse - exact(x[targets[t]]));
    for (int64_t j = 0; j < vocab; ++j) {
      Approx d = expf_on(device, exact(x[j]) - lse);
      if (j == targets[t]) d = d - exact(1.0);
      ref.dlogits.push_back(testing::round_to(dtype, d * exact(grad_scale)));
    }
  }
  return ref;
}

std::vector<int32_t> random_targets(int64_t rows, int64_t vocab, testing::Rng& rng) {
  std::vector<int32_t> targets(rows);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % vocab);
  targets[0] = 0;
  targets[1] = static_cast<int32_t>(vocab - 1);
  return targets;
}

class CrossEntropyOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(CrossEntropyOnDevice, LossesAndGradientMatchFloat64InPlaceOrNot) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (int64_t vocab : {37, 301}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string what = "V=" + std::to_string(vocab) + " " + dtype_name(dtype);
      std::vector<double> logits = testing::uniform(kRows * vocab, -4, 4, rng);
      const std::vector<int32_t> targets = random_targets(kRows, vocab, rng);
      // A confident row (the target far above the rest) and a hopeless one (far below).
      logits[2 * vocab + targets[2]] = 30.0;
      logits[3 * vocab + targets[3]] = -30.0;
      const float grad_scale = static_cast<float>(testing::uniform(1, 0.01, 1.0, rng)[0]);
      const auto x = testing::upload(device, dtype, {kRows, vocab}, logits);
      const auto tg = testing::upload_ids(device, targets);
      const auto losses = testing::upload(device, DType::f32, {kRows}, std::vector<double>(kRows));
      const auto dx =
          testing::upload(device, dtype, {kRows, vocab}, std::vector<double>(kRows * vocab));
      const CrossEntropyReference ref =
          reference(logits, targets, vocab, grad_scale, dtype, device);

      kernels::cross_entropy(x.tensor, tg.tensor, losses.tensor, dx.tensor, grad_scale);
      const std::vector<double> loss_values = testing::download(losses.tensor);
      const std::vector<double> grad = testing::download(dx.tensor);
      testing::expect_within(loss_values, ref.losses, what + " losses");
      testing::expect_within(grad, ref.dlogits, what + " dlogits");

      // Losses only: the same losses, and the logits are left as they were.
      const auto losses2 = testing::upload(device, DType::f32, {kRows}, std::vector<double>(kRows));
      kernels::cross_entropy(x.tensor, tg.tensor, losses2.tensor, Tensor(), grad_scale);
      EXPECT_EQ(testing::download(losses2.tensor), loss_values) << what;
      EXPECT_EQ(testing::download(x.tensor), logits) << what;
      // The gradient written over the logits: the same bits.
      kernels::cross_entropy(x.tensor, tg.tensor, losses2.tensor, x.tensor, grad_scale);
      EXPECT_EQ(testing::download(losses2.tensor), loss_values) << what << " in place";
      EXPECT_EQ(testing::download(x.tensor), grad) << what << " in place";
    }
  }
}

TEST_P(CrossEntropyOnDevice, GradientMatchesFiniteDifferencesOfTheLoss) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = 29;
  std::vector<double> logits = testing::uniform(kRows * vocab, -4, 4, rng);
  testing::round_in_place(DType::f32, logits);
  const std::vector<int32_t> targets = random_targets(kRows, vocab, rng);
  const float grad_scale = 1.0f / kRows;
  const auto tg = testing::upload_ids(device, targets);
  const auto losses = testing::upload(device, DType::f32, {kRows}, std::vector<double>(kRows));
  const auto x = testing::upload(device, DType::f32, {kRows, vocab}, logits);
  kernels::cross_entropy(x.tensor, tg.tensor, losses.tensor, x.tensor, grad_scale);
  const CrossEntropyReference ref =
      reference(logits, targets, vocab, grad_scale, DType::f32, device);
  std::vector<double> out_bound, grad_bound;
  for (const Approx& a : ref.losses) out_bound.push_back(a.e);
  for (const Approx& a : ref.dlogits) grad_bound.push_back(a.e);
  auto forward = [&](const std::vector<double>& xs) {
    const auto in = testing::upload(device, DType::f32, {kRows, vocab}, xs);
    kernels::cross_entropy(in.tensor, tg.tensor, losses.tensor, Tensor(), grad_scale);
    return testing::download(losses.tensor);
  };
  // L = grad_scale * sum_t loss_t (r = grad_scale everywhere), h = 2^-5 for |x| < 4:
  // truncation estimated from the h / 2h pair, rounding from the loss bounds.
  testing::expect_gradient_matches_finite_differences(
      logits, forward, std::vector<double>(kRows, grad_scale), out_bound,
      testing::download(x.tensor), grad_bound, 0x1p-5, "cross_entropy");
}

struct CrossEntropyResult {
  std::vector<double> losses, dlogits;
};

// cross_entropy on `device` with logits and dlogits at the given element offsets into
// their buffers; also checks that the gradient written over the logits is the same bits.
CrossEntropyResult run_cross_entropy(Device device, DType dtype, std::vector<double> logits,
                                     const std::vector<int32_t>& targets, float grad_scale,
                                     int64_t logits_offset, int64_t dlogits_offset) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  const int64_t vocab = static_cast<int64_t>(logits.size()) / rows;
  std::vector<double> zeros(logits.size());
  const auto x = testing::upload_at(device, dtype, rows, vocab, logits, logits_offset);
  const auto dx = testing::upload_at(device, dtype, rows, vocab, zeros, dlogits_offset);
  const auto tg = testing::upload_ids(device, targets);
  const auto losses = testing::upload(device, DType::f32, {rows}, std::vector<double>(rows));
  kernels::cross_entropy(x.tensor, tg.tensor, losses.tensor, dx.tensor, grad_scale);
  CrossEntropyResult r{testing::download(losses.tensor), testing::download(dx.tensor)};
  const auto losses2 = testing::upload(device, DType::f32, {rows}, std::vector<double>(rows));
  kernels::cross_entropy(x.tensor, tg.tensor, losses2.tensor, x.tensor, grad_scale);
  EXPECT_EQ(testing::download(losses2.tensor), r.losses) << device_name(device) << " in place";
  EXPECT_EQ(testing::download(x.tensor), r.dlogits) << device_name(device) << " in place";
  return r;
}

TEST_P(CrossEntropyOnDevice, LargeVocabulariesMatchFloat64AndTheCpuKernel) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t rows = 6;
  struct Case {
    int64_t vocab, logits_offset, dlogits_offset;
  };
  // LLaMA's 32000 (rows start 16-byte aligned) and GPT-2's odd 50257 (rows start
  // anywhere: head and tail elements beside the packs); 32000 with the logits one
  // element off alignment (a head on every row) and dlogits aligned (packed loads,
  // element stores).
  for (const Case c : {Case{32000, 0, 0}, Case{50257, 0, 0}, Case{32000, 1, 0}}) {
    const int64_t vocab = c.vocab;
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string what = "V=" + std::to_string(vocab) + " " + dtype_name(dtype) +
                               " offsets " + std::to_string(c.logits_offset) + "/" +
                               std::to_string(c.dlogits_offset);
      std::vector<double> logits = testing::uniform(rows * vocab, -4, 4, rng);
      const std::vector<int32_t> targets = random_targets(rows, vocab, rng);
      // A confident row, a row of equal logits (the max never moves), and a rising row
      // (the max moves at every pack: the most rescaling).
      logits[2 * vocab + targets[2]] = 30.0;
      std::fill(logits.begin() + 3 * vocab, logits.begin() + 4 * vocab, 0.5);
      for (int64_t j = 0; j < vocab; ++j) logits[4 * vocab + j] = -8.0 + 16.0 * j / vocab;
      testing::round_in_place(dtype, logits);
      const float grad_scale = static_cast<float>(testing::uniform(1, 0.01, 1.0, rng)[0]);
      const CrossEntropyReference ref =
          reference(logits, targets, vocab, grad_scale, dtype, device);
      const CrossEntropyResult got = run_cross_entropy(device, dtype, logits, targets, grad_scale,
                                                       c.logits_offset, c.dlogits_offset);
      testing::expect_within(got.losses, ref.losses, what + " losses");
      testing::expect_within(got.dlogits, ref.dlogits, what + " dlogits");
      if (!device.is_cuda()) continue;
      const Device cpu = Device::cpu();
      const CrossEntropyReference ref_cpu =
          reference(logits, targets, vocab, grad_scale, dtype, cpu);
      const CrossEntropyResult want =
          run_cross_entropy(cpu, dtype, logits, targets, grad_scale, 0, 0);
      testing::expect_within(got.losses,
                             testing::centred_on(want.losses, ref.losses, ref_cpu.losses),
                             what + " losses against the CPU kernel");
      testing::expect_within(got.dlogits,
                             testing::centred_on(want.dlogits, ref.dlogits, ref_cpu.dlogits),
                             what + " dlogits against the CPU kernel");
    }
  }
}

// -inf logits (masked vocabulary entries) take no probability and get a zero gradient, as
// exp(-inf) = 0; the rest of the row is a softmax over the finite logits. Whole 16-byte packs
// of -inf at the start of a row, and single ones, so that a CUDA thread sees nothing but
// -inf before its first finite logit.
TEST_P(CrossEntropyOnDevice, MinusInfinityLogitsTakeNoProbability) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t rows = 2, vocab = 4099;
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<double> logits = testing::uniform(rows * vocab, -4, 4, rng);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = 0; j < 64; ++j) logits[t * vocab + j] = -INFINITY;
      for (int64_t j = 100; j < vocab; j += 97) logits[t * vocab + j] = -INFINITY;
    }
    const std::vector<int32_t> targets = {77, static_cast<int32_t>(vocab - 1)};
    const auto x = testing::upload(device, dtype, {rows, vocab}, logits);
    const auto tg = testing::upload_ids(device, targets);
    const auto losses = testing::upload(device, DType::f32, {rows}, std::vector<double>(rows));
    kernels::cross_entropy(x.tensor, tg.tensor, losses.tensor, x.tensor, 1.0f);
    const std::vector<double> got = testing::download(losses.tensor);
    const std::vector<double> grad = testing::download(x.tensor);
    for (int64_t t = 0; t < rows; ++t) {
      const double* row = logits.data() + t * vocab;
      double sum = 0.0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j]);  // exp(-inf) = 0
      const double lse = std::log(sum);
      // A loose bound: this is about NaN, not rounding (the other tests bound that).
      EXPECT_NEAR(got[t], lse - row[targets[t]], 1e-3) << dtype_name(dtype) << " row " << t;
      for (int64_t j = 0; j < vocab; ++j) {
        const double want = std::exp(row[j] - lse) - (j == targets[t] ? 1.0 : 0.0);
        ASSERT_NEAR(grad[t * vocab + j], want, 1e-2)
            << dtype_name(dtype) << " row " << t << " " << j;
      }
    }
  }
}

// The CUDA kernel does not read the targets back to the host (that would synchronise):
// a row whose target is outside [0, V) gets a NaN loss and NaN gradients instead of an
// error, and the other rows are unaffected.
TEST_P(CrossEntropyOnDevice, OutOfRangeTargetsGiveNaNRowsOnCuda) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  if (device.is_cpu()) GTEST_SKIP() << "the CPU kernel throws instead (CrossEntropyErrors)";
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = 1001;
  std::vector<double> logits = testing::uniform(3 * vocab, -4, 4, rng);
  testing::round_in_place(DType::f32, logits);
  const std::vector<int32_t> targets = {7, static_cast<int32_t>(vocab), -1};
  const auto x = testing::upload(device, DType::f32, {3, vocab}, logits);
  const auto tg = testing::upload_ids(device, targets);
  const auto losses = testing::upload(device, DType::f32, {3}, std::vector<double>(3));
  kernels::cross_entropy(x.tensor, tg.tensor, losses.tensor, x.tensor, 0.5f);
  const std::vector<double> loss_values = testing::download(losses.tensor);
  const std::vector<double> grad = testing::download(x.tensor);
  const std::vector<double> row0(logits.begin(), logits.begin() + vocab);
  const CrossEntropyReference ref = reference(row0, {7}, vocab, 0.5f, DType::f32, device);
  testing::expect_within({loss_values[0]}, ref.losses, "the valid row's loss");
  testing::expect_within(std::vector<double>(grad.begin(), grad.begin() + vocab), ref.dlogits,
                         "the valid row's dlogits");
  for (int64_t t = 1; t < 3; ++t) {
    EXPECT_TRUE(std::isnan(loss_values[t])) << "row " << t << " loss " << loss_values[t];
    const auto nans = std::count_if(grad.begin() + t * vocab, grad.begin() + (t + 1) * vocab,
                                    [](double v) { return std::isnan(v); });
    EXPECT_EQ(nans, vocab) << "row " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CrossEntropyOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(CrossEntropyErrors, TargetsOutOfRangeShapesAndDTypesAreRefused) {
  const Device cpu = Device::cpu();
  const auto logits = testing::upload(cpu, DType::f32, {3, 5}, std::vector<double>(15));
  const auto logits_bf16 = testing::upload(cpu, DType::bf16, {3, 5}, std::vector<double>(15));
  const auto losses = testing::upload(cpu, DType::f32, {3}, std::vector<double>(3));
  const auto good = testing::upload_ids(cpu, {0, 4, 2});
  const auto high = testing::upload_ids(cpu, {0, 5, 2});
  const auto low = testing::upload_ids(cpu, {0, 1, -1});
  const auto two = testing::upload_ids(cpu, {0, 1});
  const char* op = "cross_entropy";
  testing::expect_op_error(
      [&] { kernels::cross_entropy(logits.tensor, high.tensor, losses.tensor, Tensor(), 1.0f); },
      op, "targets[1] = 5 is outside the vocabulary [0, V=5)");
  testing::expect_op_error(
      [&] {
        kernels::cross_entropy(logits.tensor, low.tensor, losses.tensor, logits.tensor, 1.0f);
      },
      op, "targets[2] = -1 is outside the vocabulary [0, V=5)");
  testing::expect_op_error(
      [&] { kernels::cross_entropy(logits.tensor, two.tensor, losses.tensor, Tensor(), 1.0f); }, op,
      "targets must be i32 with 3 elements");
  testing::expect_op_error(
      [&] {
        kernels::cross_entropy(logits.tensor, good.tensor, losses.tensor, logits_bf16.tensor, 1.0f);
      },
      op, "dlogits must have logits' dtype f32");
  testing::expect_op_error(
      [&] { kernels::cross_entropy(logits.tensor, good.tensor, good.tensor, Tensor(), 1.0f); }, op,
      "losses must be f32 with 3 elements");
#if !defined(OCTET_HAVE_CUDA)
  // (In a CUDA build these views of host memory would reach the CUDA kernel.)
  auto on_cuda = [](Tensor t) { return t.device = Device::cuda(0), t; };
  testing::expect_op_error(
      [&] {
        kernels::cross_entropy(on_cuda(logits.tensor), on_cuda(good.tensor), on_cuda(losses.tensor),
                               Tensor(), 1.0f);
      },
      op, "built without CUDA");
#endif
}

}  // namespace
}  // namespace octet
