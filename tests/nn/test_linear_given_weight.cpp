// tests/nn/test_linear_given_weight.cpp: nn::Linear::use_quantized_weight, the hook through
// which data parallelism hands a layer W's FP8 copies gathered from the ranks' shards: fed
// the layer's own quantization of W, forward, dgrad and wgrad are bit for bit those of the
// layer quantizing W itself, under every scaling mode; an empty hook goes back to that.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fp8/quantized_tensor.h"
#include "fp8/scaling.h"
#include "linear_testing.h"

namespace octet {
namespace {

using testing::LinearHarness;

class LinearGivenWeight : public ::testing::TestWithParam<Device> {};

TEST_P(LinearGivenWeight, OwnQuantizationGivenIsBitIdenticalUnderEveryMode) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  const uint64_t seed = testing::fresh_seed();
  // out = 160: a partial 128x128 block and MX block along W's rows in the transposed copy.
  const int64_t t = 32, in = 64, out = 160;
  for (const fp8::ScalingModeInfo& info : fp8::scaling_modes()) {
    const fp8::Recipe recipe = fp8::Recipe::defaults(info.mode);
    const std::string what = recipe.str();
    nn::LinearConfig c;
    c.in_features = in;
    c.out_features = out;
    c.max_tokens = t;
    c.precision = nn::Precision::fp8;
    c.recipe = recipe;
    c.device = device;
    testing::Rng rng_a(seed), rng_b(seed);
    LinearHarness a(c, rng_a), b(c, rng_b);  // the same weights
    ASSERT_EQ(a.w, b.w);
    // W quantized as the layer would (a fresh delayed state: scale 1, as the layer's own).
    fp8::QuantizedTensor qw(device, out, in, recipe, fp8::Role::weight, true);
    std::unique_ptr<fp8::DelayedScalingState> state;
    if (recipe.stateful()) {
      state = std::make_unique<fp8::DelayedScalingState>(device, recipe.delayed);
      qw.use_scaling_state(*state);
      state->allocate();
    }
    fp8::quantize(b.weight.tensor(), qw, recipe);
    b.layer.use_quantized_weight({qw.data, qw.scale_inv, qw.data_t, qw.scale_inv_t});
    EXPECT_TRUE(b.layer.uses_quantized_weight());
    // The bound W is not read any more: zeros there would change any quantization of it.
    b.weight.fill(0.0f);
    b.layer.weights_changed();

    testing::Rng data(seed + 1);
    const std::vector<float> x = testing::random_normal(t * in, 1.0, DType::bf16, data);
    const std::vector<float> dy = testing::random_normal(t * out, 1.0, DType::bf16, data);
    EXPECT_EQ(b.forward(x), a.forward(x)) << what << " forward";
    EXPECT_EQ(b.backward(dy), a.backward(dy)) << what << " dgrad";
    EXPECT_EQ(b.weight_grad.read(), a.weight_grad.read()) << what << " wgrad";

    // Back to quantizing the bound weight (zeros now): the forward output is all zeros.
    b.layer.use_quantized_weight({});
    EXPECT_FALSE(b.layer.uses_quantized_weight());
    const std::vector<float> y0 = b.forward(x);
    EXPECT_EQ(y0, std::vector<float>(y0.size(), 0.0f)) << what;
  }
}

TEST_P(LinearGivenWeight, RefusesCopiesOfTheWrongShapeOrFormat) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  const fp8::Recipe recipe = fp8::Recipe::defaults(fp8::ScalingMode::block);
  nn::LinearConfig c;
  c.in_features = 64;
  c.out_features = 32;
  c.max_tokens = 16;
  c.precision = nn::Precision::fp8;
  c.recipe = recipe;
  c.device = device;
  testing::Rng rng(testing::fresh_seed());
  LinearHarness h(c, rng);
  // Made for W transposed: [in, out] where [out, in] is needed.
  fp8::QuantizedTensor wrong(device, 64, 32, recipe, fp8::Role::weight, true);
  EXPECT_THROW(
      h.layer.use_quantized_weight({wrong.data, wrong.scale_inv, wrong.data_t, wrong.scale_inv_t}),
      Error);
  // The activation grid (1x128) instead of the weight's (128x128 blocks).
  fp8::QuantizedTensor act(device, 32, 64, recipe, fp8::Role::activation, true);
  EXPECT_THROW(h.layer.use_quantized_weight({act.data, act.scale_inv, act.data_t, act.scale_inv_t}),
               Error);
  EXPECT_FALSE(h.layer.uses_quantized_weight());
}

INSTANTIATE_TEST_SUITE_P(Devices, LinearGivenWeight, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet
