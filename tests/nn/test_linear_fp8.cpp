// tests/nn/test_linear_fp8.cpp: nn::Linear under fp8 for every scaling mode and format
// policy against float64 GEMMs of the FP8 operands it read and of the original operands,
// its weight caching, delayed scaling and statistics, and the GEMMs a recipe keeps in bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "fp8/quantized_tensor.h"
#include "kernels/quantize.h"
#include "linear_testing.h"
#include "nn/linear.h"

namespace octet {
namespace {

using fp8::Role;
using fp8::ScalingMode;
using testing::Fp8Operand64;
using testing::gemm64;
using testing::LinearHarness;
using testing::quantize64;
using testing::transposed;

nn::LinearConfig fp8_config(const fp8::Recipe& recipe, int64_t in, int64_t out, int64_t max_tokens,
                            Device device) {
  nn::LinearConfig c;
  c.in_features = in;
  c.out_features = out;
  c.max_tokens = max_tokens;
  c.precision = nn::Precision::fp8;
  c.recipe = recipe;
  c.device = device;
  return c;
}

fp8::Recipe make_recipe(ScalingMode mode, fp8::FormatPolicy formats = fp8::FormatPolicy::hybrid) {
  fp8::Recipe r;
  r.mode = mode;
  r.formats = formats;
  return r;
}

float amax_of(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

float scale_for(float amax, DType format) {
  return kernels::scale_from_amax(amax, static_cast<float>(dtype_info(format).max_finite), 0,
                                  false);
}

// The exact GEMM of the FP8 operands a layer read (C = A Bᵀ, K-major) and the bound on
// the layer's output against it: only the accumulation and output rounding remain,
// gamma_{K+5} Σ|â||b̂| + (bf16 output) 2^-8 |y| (testing::output_bound derives it), gamma at
// the device's FP8 accumulation unit (testing::fp8_accumulation_unit).
struct Reference {
  std::vector<double> value, bound;
};
Reference dequantized_reference(const Fp8Operand64& qa, const Fp8Operand64& qb, int64_t m,
                                int64_t n, int64_t k, DType out_dtype, Device device) {
  const testing::Gemm64 c = gemm64(qa.value, qb.value, m, n, k);
  return {c.value, testing::output_bound(c, k, out_dtype, testing::fp8_accumulation_unit(device))};
}

// One GEMM of the layer against both references: (a) the float64 GEMM of the FP8
// operands it read, within the accumulation bound; (b) the float64 GEMM of the original
// bf16 operands, within (a)'s bound plus the quantization bound derived at
// testing::quantization_bound: |y - Σ a b| <= |y - Σ â b̂| + |Σ â b̂ - Σ a b|.
void check_gemm(const std::vector<float>& got, DType out_dtype, const std::vector<float>& a,
                const Fp8Operand64& qa, DType fa, const std::vector<float>& b,
                const Fp8Operand64& qb, DType fb, int64_t m, int64_t n, int64_t k, Device device,
                const std::string& what) {
  const Reference deq = dequantized_reference(qa, qb, m, n, k, out_dtype, device);
  testing::expect_within(got, deq.value, deq.bound, what + " vs the FP8 operands it read");
  const testing::Gemm64 exact = gemm64(a, b, m, n, k);
  std::vector<double> bound = testing::quantization_bound(a, qa, fa, b, qb, fb, m, n, k);
  for (size_t i = 0; i < bound.size(); ++i) bound[i] += deq.bound[i];
  testing::expect_within(got, exact.value, bound, what + " vs the original bf16 operands");
}

class LinearFp8OnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(LinearFp8OnDevice, ForwardDgradWgradMatchFloat64WithinBoundsFromTheFormats) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  struct Dims {
    int64_t t, in, out;
  };
  // Multiples of 16, not of 128 and not all of 32: every GEMM has ragged 1x128 tiles,
  // 128x128 blocks or 1x32 MX blocks along K.
  const Dims shapes[] = {{48, 96, 80}, {64, 160, 144}};
  int variant = 0;
  for (const fp8::ScalingModeInfo& info : fp8::scaling_modes()) {
    const ScalingMode mode = info.mode;
    for (fp8::FormatPolicy formats : {fp8::FormatPolicy::hybrid, fp8::FormatPolicy::e4m3}) {
      const Dims s = shapes[variant++ % 2];
      const fp8::Recipe recipe = make_recipe(mode, formats);
      const DType fx = recipe.format(Role::activation), fw = recipe.format(Role::weight),
                  fg = recipe.format(Role::gradient);
      const bool delayed = info.stateful;
      // A state shared with the caller (as a model's is): the layer takes its three slots.
      fp8::DelayedScalingState shared(device, recipe.delayed);
      nn::LinearConfig config = fp8_config(recipe, s.in, s.out, 64, device);
      config.scaling_state = &shared;
      LinearHarness h(config, rng);
      shared.allocate();
      EXPECT_EQ(shared.size(), delayed ? 3 : 0);
      fp8::DelayedScalingState* state = delayed ? &shared : nullptr;
      const std::vector<float> x = testing::random_normal(s.t * s.in, 1.0, DType::bf16, rng);
      // Gradients are small; scaling brings them into E5M2's range.
      const std::vector<float> dy = testing::random_normal(s.t * s.out, 0x1p-12, DType::bf16, rng);
      std::vector<float> scales = {1.0f, 1.0f, 1.0f};
      if (delayed) {
        // One step first so that the checked one uses scales from amaxes; the same
        // inputs again cannot saturate (their amax maps onto fp8_max).
        h.forward(x);
        h.backward(dy);
        state->update();
        h.layer.weights_changed();
        h.zero_grads();
        scales = state->scales_host();
      }
      const std::vector<float> y = h.forward(x);
      const std::vector<float> dx = h.backward(dy);
      const std::vector<float> wg = h.weight_grad.read();

      const auto qx = quantize64(x, s.t, s.in, recipe, Role::activation, scales[0]);
      const auto qw = quantize64(h.w, s.out, s.in, recipe, Role::weight, scales[1]);
      const auto qdy = quantize64(dy, s.t, s.out, recipe, Role::gradient, scales[2]);
      const std::string what = recipe.str() + " T=" + std::to_string(s.t) +
                               " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out);
      // y [T, out] = x Wᵀ: x and W as stored (K = in); bf16 output.
      check_gemm(y, DType::bf16, x, qx.stored, fx, h.w, qw.stored, fw, s.t, s.out, s.in, device,
                 what + " forward");
      // dx [T, in] = dy W: dy as stored, W's transposed copy [in, out] (K = out).
      check_gemm(dx, DType::bf16, dy, qdy.stored, fg, transposed(h.w, s.out, s.in), qw.transposed,
                 fw, s.t, s.in, s.out, device, what + " dgrad");
      // dW [out, in] = dyᵀ x into f32 zeros: both transposed copies (K = T).
      check_gemm(wg, DType::f32, transposed(dy, s.t, s.out), qdy.transposed, fg,
                 transposed(x, s.t, s.in), qx.transposed, fx, s.out, s.in, s.t, device,
                 what + " wgrad");
    }
  }
}

TEST_P(LinearFp8OnDevice, WeightsAreQuantizedOncePerStep) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t t = 32, in = 64, out = 48;
  for (ScalingMode mode : {ScalingMode::tensor_current, ScalingMode::block}) {
    const fp8::Recipe recipe = make_recipe(mode);
    const std::string what = recipe.str();
    LinearHarness h(fp8_config(recipe, in, out, t, device), rng);
    const std::vector<float> x = testing::random_normal(t * in, 1.0, DType::bf16, rng);
    const std::vector<float> dy = testing::random_normal(t * out, 1.0, DType::bf16, rng);
    const std::vector<float> w_old = h.w;
    const auto qw_old = quantize64(w_old, out, in, recipe, Role::weight);
    const auto qx = quantize64(x, t, in, recipe, Role::activation);
    const auto qdy = quantize64(dy, t, out, recipe, Role::gradient);

    const std::vector<float> y1 = h.forward(x);
    // New values in the bound weight memory without weights_changed(): a second
    // micro-batch must reuse the FP8 copy made by the first, bit for bit.
    h.set_weights(testing::random_normal(out * in, 1.0 / std::sqrt(double(in)), DType::bf16, rng));
    const auto qw_new = quantize64(h.w, out, in, recipe, Role::weight);
    const std::vector<float> y2 = h.forward(x);
    EXPECT_EQ(y2, y1) << what << ": W was quantized again without weights_changed()";
    // dgrad reads the transposed copy made with that same quantization.
    const std::vector<float> dx = h.backward(dy);
    const Reference dgrad_old =
        dequantized_reference(qdy.stored, qw_old.transposed, t, in, out, DType::bf16, device);
    testing::expect_within(dx, dgrad_old.value, dgrad_old.bound, what + " dgrad with the old W");

    h.layer.weights_changed();
    const std::vector<float> y3 = h.forward(x);
    const Reference fwd_new =
        dequantized_reference(qx.stored, qw_new.stored, t, out, in, DType::bf16, device);
    testing::expect_within(y3, fwd_new.value, fwd_new.bound,
                           what + " forward after weights_changed()");
    // The old copy cannot explain y3 (the check above could tell them apart).
    const Reference fwd_old =
        dequantized_reference(qx.stored, qw_old.stored, t, out, in, DType::bf16, device);
    EXPECT_GT(testing::worst_ratio(y3, fwd_old.value, fwd_old.bound).ratio, 1.0) << what;
  }
}

TEST_P(LinearFp8OnDevice, DelayedScalingStartsAtOneThenUsesThePreviousAmax) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t t = 32, in = 64, out = 48;
  const fp8::Recipe recipe = make_recipe(ScalingMode::tensor_delayed);
  const DType fx = DType::e4m3, fw = DType::e4m3, fg = DType::e5m2;
  const int len = recipe.delayed.history_len;
  // Small x and dy: at scale 1 many of their values are subnormal in FP8 and at
  // fp8_max / amax none are, so the two quantizations differ visibly.
  const std::vector<float> x = testing::random_normal(t * in, 0.01, DType::bf16, rng);
  const std::vector<float> dy = testing::random_normal(t * out, 1e-4, DType::bf16, rng);

  {  // A state shared with the model (slots 1..3 of 4): the model updates it.
    fp8::DelayedScalingState state(device, recipe.delayed);
    EXPECT_EQ(state.add_slot(DType::e4m3), 0);
    nn::LinearConfig config = fp8_config(recipe, in, out, t, device);
    config.scaling_state = &state;
    LinearHarness h(config, rng);
    state.allocate();
    ASSERT_EQ(state.size(), 4);
    const auto qx1 = quantize64(x, t, in, recipe, Role::activation, 1.0f);
    const auto qw1 = quantize64(h.w, out, in, recipe, Role::weight, 1.0f);
    const auto qdy1 = quantize64(dy, t, out, recipe, Role::gradient, 1.0f);

    const std::vector<float> y1 = h.forward(x);
    const Reference f1 =
        dequantized_reference(qx1.stored, qw1.stored, t, out, in, DType::bf16, device);
    testing::expect_within(y1, f1.value, f1.bound, "first forward at scale 1");
    const std::vector<float> dx1 = h.backward(dy);
    const Reference d1 =
        dequantized_reference(qdy1.stored, qw1.transposed, t, in, out, DType::bf16, device);
    testing::expect_within(dx1, d1.value, d1.bound, "first dgrad at scale 1");
    // Each quantization recorded its amax in its slot's current history entry.
    const std::vector<float> history = state.history_host();
    EXPECT_EQ(history[1 * len], amax_of(x));
    EXPECT_EQ(history[2 * len], amax_of(h.w));
    EXPECT_EQ(history[3 * len], amax_of(dy));

    h.layer.update_scaling();  // not the layer's state: nothing changes
    EXPECT_EQ(state.scales_host(), std::vector<float>(4, 1.0f));
    state.update();
    const std::vector<float> scales = state.scales_host();
    EXPECT_EQ(scales[1], scale_for(amax_of(x), fx));
    EXPECT_EQ(scales[2], scale_for(amax_of(h.w), fw));
    EXPECT_EQ(scales[3], scale_for(amax_of(dy), fg));

    // The same x again: quantized at fp8_max / amax(x); W keeps its scale-1 copy.
    const std::vector<float> y2 = h.forward(x);
    const auto qx2 = quantize64(x, t, in, recipe, Role::activation, scales[1]);
    const Reference f2 =
        dequantized_reference(qx2.stored, qw1.stored, t, out, in, DType::bf16, device);
    testing::expect_within(y2, f2.value, f2.bound, "second forward at 448 / amax(x)");
    EXPECT_GT(testing::worst_ratio(y2, f1.value, f1.bound).ratio, 1.0)
        << "the second forward is explained by scale 1 too: the check cannot tell";
  }
  {  // A state of the layer's own, updated by update_scaling().
    LinearHarness h(fp8_config(recipe, in, out, t, device), rng);
    h.forward(x);
    h.backward(dy);
    h.layer.update_scaling();
    h.layer.weights_changed();
    const std::vector<float> y = h.forward(x);
    const auto qx = quantize64(x, t, in, recipe, Role::activation, scale_for(amax_of(x), fx));
    const auto qw = quantize64(h.w, out, in, recipe, Role::weight, scale_for(amax_of(h.w), fw));
    const Reference f =
        dequantized_reference(qx.stored, qw.stored, t, out, in, DType::bf16, device);
    testing::expect_within(y, f.value, f.bound, "own state: forward after update_scaling()");
    const auto qx1 = quantize64(x, t, in, recipe, Role::activation, 1.0f);
    const Reference f1 =
        dequantized_reference(qx1.stored, qw.stored, t, out, in, DType::bf16, device);
    EXPECT_GT(testing::worst_ratio(y, f1.value, f1.bound).ratio, 1.0)
        << "own state: x was still quantized at scale 1";
  }
}

// Expected counts of a per-tensor quantization at `scale`, as the quantize kernel
// defines them: a finite value saturates when fl32(x * scale) lies beyond the format's
// rounding boundary (the non-saturating conversion gives Inf/NaN); a nonzero one is
// flushed when it encodes to ±0.
struct Counts {
  int64_t saturated = 0, flushed = 0;
};
Counts expected_counts(const std::vector<float>& x, float scale, DType format) {
  Counts c;
  for (float v : x) {
    const float scaled = v * scale;
    const uint8_t code = f32_to_fp8(scaled, format);
    c.saturated +=
        !std::isfinite(fp8_to_f32(f32_to_fp8(scaled, format, Overflow::nonfinite), format));
    c.flushed += v != 0.0f && (code & 0x7F) == 0;
  }
  return c;
}

TEST_P(LinearFp8OnDevice, StatsReportAmaxScalesAndCountsOfTheLastQuantizations) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t t = 32, in = 64, out = 48;
  const int64_t total = t * in + out * in + t * out;
  std::vector<float> x = testing::random_normal(t * in, 1.0, DType::bf16, rng);
  std::vector<float> dy = testing::random_normal(t * out, 1.0, DType::bf16, rng);
  // A few values far below the smallest subnormal after scaling, so that some flush.
  for (size_t i = 0; i < x.size(); i += 11) x[i] *= 0x1p-24f;
  for (size_t i = 0; i < dy.size(); i += 7) dy[i] *= 0x1p-34f;

  {  // Current scaling: nothing saturates; amax, scales and flushes as computed here.
    const fp8::Recipe recipe = make_recipe(ScalingMode::tensor_current);
    LinearHarness h(fp8_config(recipe, in, out, t, device), rng);
    EXPECT_EQ(h.layer.stats().layer.tensors(), 0) << "nothing was quantized yet";
    h.forward(x);
    h.backward(dy);
    const nn::Linear::Stats st = h.layer.stats();
    struct Quantized {
      const fp8::TensorStats& stats;
      const std::vector<float>& values;
      DType format;
    };
    const Quantized tensors[] = {
        {st.x, x, DType::e4m3}, {st.weight, h.w, DType::e4m3}, {st.grad_output, dy, DType::e5m2}};
    int64_t flushed = 0;
    for (const auto& [s, values, format] : tensors) {
      const float amax = amax_of(values), scale = scale_for(amax, format);
      const Counts want = expected_counts(values, scale, format);
      EXPECT_EQ(s.amax, amax);
      EXPECT_EQ(s.numel, static_cast<int64_t>(values.size()));
      // Statistics read scale_inv = fl(1 / scale) back and invert it once more.
      EXPECT_EQ(s.min_scale, 1.0f / (1.0f / scale));
      EXPECT_EQ(s.max_scale, 1.0f / (1.0f / scale));
      EXPECT_EQ(s.saturated, 0);
      EXPECT_EQ(s.flushed, want.flushed);
      flushed += want.flushed;
    }
    EXPECT_GT(st.x.flushed, 0);
    EXPECT_GT(st.grad_output.flushed, 0);
    EXPECT_EQ(st.layer.tensors(), 3);
    EXPECT_EQ(st.layer.amax(), std::max({amax_of(x), amax_of(h.w), amax_of(dy)}));
    EXPECT_EQ(st.layer.saturated_share(), 0.0);
    EXPECT_EQ(st.layer.flushed_share(), double(flushed) / double(total));
  }
  {  // Delayed scaling: an input 10x larger than the step that set the scale saturates.
    const fp8::Recipe recipe = make_recipe(ScalingMode::tensor_delayed);
    fp8::DelayedScalingState state(device, recipe.delayed);
    nn::LinearConfig config = fp8_config(recipe, in, out, t, device);
    config.scaling_state = &state;
    LinearHarness h(config, rng);
    state.allocate();
    h.forward(x);
    h.backward(dy);
    state.update();
    const float scale = state.scales_host()[0];
    std::vector<float> x10(x.size());
    for (size_t i = 0; i < x.size(); ++i) x10[i] = testing::round_to(DType::bf16, 10.0f * x[i]);
    h.forward(x10);
    const nn::Linear::Stats st = h.layer.stats();
    const Counts want = expected_counts(x10, scale, DType::e4m3);
    EXPECT_GT(want.saturated, 0);
    EXPECT_EQ(st.x.saturated, want.saturated);
    EXPECT_EQ(st.x.amax, amax_of(x10));
    EXPECT_EQ(st.x.min_scale, 1.0f / (1.0f / scale));
    // W and dY were last quantized in step 1, at scale 1, far inside their ranges.
    EXPECT_EQ(st.weight.saturated, 0);
    EXPECT_EQ(st.grad_output.saturated, 0);
    EXPECT_EQ(st.layer.saturated_share(), double(want.saturated) / double(total));
  }
}

// Recipe bf16=...: the GEMMs named run as the bf16 layer's do (bit for bit: the same bf16
// GEMM of the same operands), the others as the all-FP8 layer's, and every operand is still
// quantized (the health still reports x, W and dY).
TEST_P(LinearFp8OnDevice, GemmsNamedBf16RunAsTheBf16LayerAndTheOthersStayFp8) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t t = 48, in = 96, out = 80;
  const std::vector<float> x = testing::random_normal(t * in, 1.0, DType::bf16, rng);
  const std::vector<float> dy = testing::random_normal(t * out, 0x1p-12, DType::bf16, rng);
  struct Run {
    std::vector<float> y, dx, wg;
  };
  // `clobber`: overwrite the caller's x between forward and backward (under fp8 the
  // layer must not read it again, even for a bf16 wgrad).
  auto run = [&](const nn::LinearConfig& c, const std::vector<float>& w, bool clobber) {
    LinearHarness h(c, rng);
    h.set_weights(w);
    Run r;
    r.y = h.forward(x);
    if (clobber) h.x.fill(1e6f);
    r.dx = h.backward(dy);
    r.wg = h.weight_grad.read();
    if (c.precision == nn::Precision::fp8) {
      const nn::Linear::Stats st = h.layer.stats();
      EXPECT_EQ(st.x.numel, t * in);
      EXPECT_EQ(st.weight.numel, out * in);
      EXPECT_EQ(st.grad_output.numel, t * out);
    }
    return r;
  };
  const std::vector<float> w =
      testing::random_normal(out * in, 1.0 / std::sqrt(double(in)), DType::bf16, rng);
  nn::LinearConfig bf16_config = fp8_config({}, in, out, t, device);
  bf16_config.precision = nn::Precision::bf16;
  const Run bf16 = run(bf16_config, w, false);
  for (const fp8::ScalingModeInfo& info : fp8::scaling_modes()) {
    const fp8::Recipe plain = fp8::Recipe::defaults(info.mode);
    const Run fp8 = run(fp8_config(plain, in, out, t, device), w, false);
    // The comparison can tell the two apart: FP8 GEMMs differ from bf16 ones here.
    EXPECT_NE(fp8.y, bf16.y) << plain.str();
    EXPECT_NE(fp8.dx, bf16.dx) << plain.str();
    EXPECT_NE(fp8.wg, bf16.wg) << plain.str();
    for (const char* gemms : {"forward", "dgrad", "wgrad", "forward+dgrad+wgrad"}) {
      const fp8::Recipe recipe = fp8::Recipe::parse(plain.str() + ":bf16=" + gemms);
      SCOPED_TRACE(recipe.str());
      const Run r = run(fp8_config(recipe, in, out, t, device), w, true);
      EXPECT_EQ(r.y, recipe.in_bf16(fp8::Gemm::forward) ? bf16.y : fp8.y);
      EXPECT_EQ(r.dx, recipe.in_bf16(fp8::Gemm::dgrad) ? bf16.dx : fp8.dx);
      EXPECT_EQ(r.wg, recipe.in_bf16(fp8::Gemm::wgrad) ? bf16.wg : fp8.wg);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, LinearFp8OnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

// On the CPU under per-tensor scales the layer widens its transposed copies (dY's bf16 copy then
// takes 2 T out bytes of a shared fp8_scratch, 3 T out with its codes): a scratch of
// fp8_scratch_bytes(..., widened) serves it, bit for bit as a layer with storage of its own, and
// one byte less is refused. Row scaling keeps codes (2 T out).
TEST(LinearFp8Cpu, ASharedScratchOfTheStatedSizeServesTheLayerAndAShorterOneIsRefused) {
  const int64_t t = 48, in = 32, out = 64;
  const uint64_t seed = testing::fresh_seed();
  for (ScalingMode mode : {ScalingMode::tensor_current, ScalingMode::row}) {
    const fp8::Recipe recipe = make_recipe(mode);
    SCOPED_TRACE(recipe.str());
    const bool widened = fp8::QuantizedTensor::widens(Device::cpu(), recipe, Role::gradient);
    EXPECT_EQ(widened, mode == ScalingMode::tensor_current);
    const size_t bytes = nn::fp8_scratch_bytes(t, in, out, widened);
    EXPECT_EQ(bytes, static_cast<size_t>((widened ? 3 : 2) * t * out));
    Buffer scratch(Device::cpu(), bytes);
    nn::LinearConfig shared = fp8_config(recipe, in, out, t, Device::cpu());
    shared.fp8_scratch = scratch.view(DType::u8, {static_cast<int64_t>(bytes)});
    testing::Rng rng_a(seed), rng_b(seed);
    LinearHarness own(fp8_config(recipe, in, out, t, Device::cpu()), rng_a);
    LinearHarness with(shared, rng_b);
    testing::Rng data(seed + 1);
    const std::vector<float> x = testing::random_normal(t * in, 1.0, DType::bf16, data);
    const std::vector<float> dy = testing::random_normal(t * out, 1.0, DType::bf16, data);
    EXPECT_EQ(with.forward(x), own.forward(x));
    EXPECT_EQ(with.backward(dy), own.backward(dy));
    EXPECT_EQ(with.weight_grad.read(), own.weight_grad.read());

    nn::LinearConfig short_one = shared;
    short_one.fp8_scratch = scratch.view(DType::u8, {static_cast<int64_t>(bytes) - 1});
    try {
      nn::Linear layer(short_one);
      ADD_FAILURE() << "a scratch of " << bytes - 1 << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("fp8_scratch must be u8 with at least " +
                                           std::to_string(bytes) + " bytes"),
                std::string::npos)
          << e.what();
    }
  }
}

// A layer that quantizes x and dy in place (LinearConfig::fp8_x_in_place, fp8_dy_in_place) gives
// what one with copies of its own gives, bit for bit, over two steps of different inputs; its x
// then holds the values x was quantized to. Where it does not quantize in place (row scaling, a
// GEMM in bf16 that reads x and dy) x keeps its values.
TEST(LinearFp8Cpu, QuantizingInPlaceGivesTheSameBitsAsACopyOfItsOwn) {
  const int64_t t = 48, in = 32, out = 64;
  const uint64_t seed = testing::fresh_seed();
  for (const char* name :
       {"tensor-current", "tensor-delayed", "row", "tensor-current:bf16=wgrad"}) {
    const fp8::Recipe recipe = fp8::Recipe::parse(name);
    SCOPED_TRACE(recipe.str());
    const bool in_place = nn::Linear::quantizes_in_place(Device::cpu(), recipe, Role::activation);
    EXPECT_EQ(in_place, recipe.mode != ScalingMode::row && recipe.bf16_gemms == 0);
    EXPECT_EQ(nn::Linear::quantizes_in_place(Device::cpu(), recipe, Role::gradient), in_place);
    nn::LinearConfig config = fp8_config(recipe, in, out, t, Device::cpu());
    config.fp8_x_in_place = config.fp8_dy_in_place = true;
    testing::Rng rng_a(seed), rng_b(seed);
    LinearHarness own(fp8_config(recipe, in, out, t, Device::cpu()), rng_a);
    LinearHarness with(config, rng_b);
    testing::Rng data(seed + 1);
    for (int step = 0; step < 2; ++step) {
      const std::vector<float> x = testing::random_normal(t * in, 1.0 + step, DType::bf16, data);
      const std::vector<float> dy = testing::random_normal(t * out, 1.0, DType::bf16, data);
      EXPECT_EQ(with.forward(x), own.forward(x));
      const std::vector<float> x_after = with.x.read(t * in);
      if (in_place) {
        // The codes' values: each on the E4M3 grid and, under tensor-current (scale 448 /
        // amax, rounded to f32: 2^-24), within half an E4M3 step of x times the scale: 2^-4
        // relative for normals, 2^-10 absolute below 2^-6.
        double amax = 0.0;
        for (float v : x) amax = std::max(amax, std::fabs(double{v}));
        for (int64_t i = 0; i < t * in; ++i) {
          const float v = x_after[static_cast<size_t>(i)];
          ASSERT_EQ(e4m3_to_f32(f32_to_e4m3(v)), v) << "value " << i;
          if (recipe.mode != ScalingMode::tensor_current) continue;
          const double want = x[static_cast<size_t>(i)] * (448.0 / amax);
          ASSERT_NEAR(v, want, std::fabs(want) * (0x1p-4 + 0x1p-23) + 0x1p-10) << "value " << i;
        }
      } else {
        EXPECT_EQ(x_after, x);
      }
      EXPECT_EQ(with.backward(dy), own.backward(dy));
      EXPECT_EQ(with.weight_grad.read(), own.weight_grad.read());
    }
  }
}

// Given x's and dy's amaxes (as their producers take them: kernels/swiglu.h), a layer gives what
// it gives taking them itself, bit for bit, where it takes them (the CPU, per-tensor scales).
TEST(LinearFp8Cpu, GivenAmaxesGiveTheSameBitsAsTheLayersOwn) {
  const int64_t t = 48, in = 32, out = 64;
  const uint64_t seed = testing::fresh_seed();
  EXPECT_FALSE(nn::Linear::takes_amax(Device::cpu(), nn::Precision::bf16,
                                      fp8::Recipe::parse("tensor-current")));
  EXPECT_FALSE(nn::Linear::takes_amax(Device::cpu(), nn::Precision::fp8, fp8::Recipe::parse("mx")));
  EXPECT_FALSE(nn::Linear::takes_amax(Device::cuda(0), nn::Precision::fp8,
                                      fp8::Recipe::parse("tensor-current")));
  for (const char* name : {"tensor-current", "tensor-delayed"}) {
    const fp8::Recipe recipe = fp8::Recipe::parse(name);
    SCOPED_TRACE(recipe.str());
    EXPECT_TRUE(nn::Linear::takes_amax(Device::cpu(), nn::Precision::fp8, recipe));
    testing::Rng rng_a(seed), rng_b(seed);
    LinearHarness own(fp8_config(recipe, in, out, t, Device::cpu()), rng_a);
    LinearHarness with(fp8_config(recipe, in, out, t, Device::cpu()), rng_b);
    testing::Rng data(seed + 1);
    Buffer amax(Device::cpu(), 4);
    const Tensor amax_t = amax.view(DType::f32, {1});
    auto host_amax = [](const std::vector<float>& v) {
      float m = 0.0f;
      for (float x : v) m = std::max(m, std::fabs(x));
      return m;
    };
    for (int step = 0; step < 2; ++step) {
      const std::vector<float> x = testing::random_normal(t * in, 1.0 + step, DType::bf16, data);
      const std::vector<float> dy = testing::random_normal(t * out, 1.0, DType::bf16, data);
      const std::vector<float> y_own = own.forward(x);
      with.x.write(x);
      amax_t.as<float>()[0] = host_amax(x);
      with.layer.forward(with.x.rows(t), with.y.rows(t), amax_t);
      EXPECT_EQ(with.y.read(t * out), y_own);
      const std::vector<float> dx_own = own.backward(dy);
      with.dy.write(dy);
      amax_t.as<float>()[0] = host_amax(dy);
      with.layer.backward(with.dy.rows(t), with.dx.rows(t), amax_t);
      EXPECT_EQ(with.dx.read(t * in), dx_own);
      EXPECT_EQ(with.weight_grad.read(), own.weight_grad.read());
    }
  }
}

TEST(LinearStats, AreZeroUnderFp32AndBf16) {
  testing::Rng rng(testing::fresh_seed());
  for (nn::Precision p : {nn::Precision::fp32, nn::Precision::bf16}) {
    nn::LinearConfig c;
    c.in_features = 32;
    c.out_features = 16;
    c.max_tokens = 16;
    c.precision = p;
    LinearHarness h(c, rng);
    h.forward(testing::random_normal(16 * 32, 1.0, h.dtype, rng));
    h.backward(testing::random_normal(16 * 16, 1.0, h.dtype, rng));
    const nn::Linear::Stats st = h.layer.stats();
    EXPECT_EQ(st.layer.tensors(), 0);
    EXPECT_EQ(st.x.numel + st.weight.numel + st.grad_output.numel, 0);
    EXPECT_EQ(st.x.amax, 0.0f);
  }
}

}  // namespace
}  // namespace octet
