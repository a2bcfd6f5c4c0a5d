// tests/kernels/test_cross_entropy.cpp: kernels::cross_entropy (loss and fused gradient)
// against a float64 reference with derived bounds and finite differences, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cross_entropy.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;

constexpr int64_t kRows = 2 * 7;

// The kernel's fp32 steps in float64 with their running error bounds (Approx); the
// max of the logits is exact, the rest rounds:
//   lse = m + log(sum_j exp(x_j - m)),  loss = lse - x_target,
//   dlogits_j = ((exp(x_j - lse) - [j == target]) * grad_scale), 2^-8 relative for bf16.
struct CrossEntropyReference {
  std::vector<Approx> losses, dlogits;
};

CrossEntropyReference reference(const std::vector<double>& logits,
                                const std::vector<int32_t>& targets, int64_t vocab,
                                float grad_scale, DType dtype) {
  CrossEntropyReference ref;
  for (int64_t t = 0; t < kRows; ++t) {
    const double* x = logits.data() + t * vocab;
    const Approx m = exact(*std::max_element(x, x + vocab));
    std::vector<Approx> p;
    for (int64_t j = 0; j < vocab; ++j) p.push_back(testing::exp(exact(x[j]) - m));
    const Approx lse = m + testing::log(testing::sum(p));
    ref.losses.push_back(lse - exact(x[targets[t]]));
    for (int64_t j = 0; j < vocab; ++j) {
      Approx d = testing::exp(exact(x[j]) - lse);
      if (j == targets[t]) d = d - exact(1.0);
      ref.dlogits.push_back(testing::round_to(dtype, d * exact(grad_scale)));
    }
  }
  return ref;
}

std::vector<int32_t> random_targets(int64_t vocab, testing::Rng& rng) {
  std::vector<int32_t> targets(kRows);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % vocab);
  targets[0] = 0;
  targets[1] = static_cast<int32_t>(vocab - 1);
  return targets;
}

class CrossEntropyOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(CrossEntropyOnDevice, LossesAndGradientMatchFloat64InPlaceOrNot) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  for (int64_t vocab : {37, 301}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string what = "V=" + std::to_string(vocab) + " " + dtype_name(dtype);
      std::vector<double> logits = testing::uniform(kRows * vocab, -4, 4, rng);
      const std::vector<int32_t> targets = random_targets(vocab, rng);
      // A confident row (the target far above the rest) and a hopeless one (far below).
      logits[2 * vocab + targets[2]] = 30.0;
      logits[3 * vocab + targets[3]] = -30.0;
      const float grad_scale = static_cast<float>(testing::uniform(1, 0.01, 1.0, rng)[0]);
      const auto x = testing::upload(device, dtype, {kRows, vocab}, logits);
      const auto tg = testing::upload_ids(device, targets);
      const auto losses = testing::upload(device, DType::f32, {kRows}, std::vector<double>(kRows));
      const auto dx =
          testing::upload(device, dtype, {kRows, vocab}, std::vector<double>(kRows * vocab));
      const CrossEntropyReference ref = reference(logits, targets, vocab, grad_scale, dtype);

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
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t vocab = 29;
  std::vector<double> logits = testing::uniform(kRows * vocab, -4, 4, rng);
  testing::round_in_place(DType::f32, logits);
  const std::vector<int32_t> targets = random_targets(vocab, rng);
  const float grad_scale = 1.0f / kRows;
  const auto tg = testing::upload_ids(device, targets);
  const auto losses = testing::upload(device, DType::f32, {kRows}, std::vector<double>(kRows));
  const auto x = testing::upload(device, DType::f32, {kRows, vocab}, logits);
  kernels::cross_entropy(x.tensor, tg.tensor, losses.tensor, x.tensor, grad_scale);
  const CrossEntropyReference ref = reference(logits, targets, vocab, grad_scale, DType::f32);
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

INSTANTIATE_TEST_SUITE_P(Devices, CrossEntropyOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(CrossEntropyErrors, TargetsOutOfRangeShapesAndCudaAreRefused) {
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
  auto on_cuda = [](Tensor t) { return t.device = Device::cuda(0), t; };
  testing::expect_op_error(
      [&] {
        kernels::cross_entropy(on_cuda(logits.tensor), on_cuda(good.tensor), on_cuda(losses.tensor),
                               Tensor(), 1.0f);
      },
      op, "has no CUDA implementation yet");
}

}  // namespace
}  // namespace octet
