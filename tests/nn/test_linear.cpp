// tests/nn/test_linear.cpp: nn::Linear under fp32 and bf16 against float64 and finite
// differences, its bias under every policy, and its argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "linear_testing.h"

namespace octet {
namespace {

using nn::Precision;
using testing::gamma;
using testing::gemm64;
using testing::kU;
using testing::LinearHarness;
using testing::transposed;

nn::LinearConfig make_config(Precision p, int64_t in, int64_t out, int64_t max_tokens,
                             Device device, bool bias = false) {
  nn::LinearConfig c;
  c.in_features = in;
  c.out_features = out;
  c.max_tokens = max_tokens;
  c.precision = p;
  c.bias = bias;
  c.device = device;
  return c;
}

class LinearOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(LinearOnDevice, Fp32AndBf16MatchFloat64WithinGammaK) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  struct Dims {
    int64_t t, in, out, max_tokens;
  };
  // T below max_tokens and not a multiple of anything; in/out not multiples of 128.
  for (const Dims s : {Dims{37, 96, 80, 64}, Dims{64, 160, 144, 64}}) {
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      LinearHarness h(make_config(p, s.in, s.out, s.max_tokens, device), rng);
      const std::vector<float> x = testing::random_normal(s.t * s.in, 1.0, h.dtype, rng);
      const std::vector<float> dy = testing::random_normal(s.t * s.out, 1.0, h.dtype, rng);
      const std::vector<float> y = h.forward(x);
      const std::vector<float> dx = h.backward(dy);
      const std::vector<float> wg = h.weight_grad.read();
      const std::string what = std::string(nn::precision_name(p)) + " T=" + std::to_string(s.t) +
                               " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out);

      // Each GEMM against the float64 GEMM of its operands: gamma_{K+5} Σ|a||b| for the
      // fp32 accumulation (f32 products round too: counted in gamma_K), plus half a bf16
      // ulp (2^-8 relative) where the output is bf16 (output_bound states it in full).
      const testing::Gemm64 fwd = gemm64(x, h.w, s.t, s.out, s.in);  // y = x Wᵀ
      testing::expect_within(y, fwd.value, testing::output_bound(fwd, s.in, h.dtype),
                             what + " forward");
      // dx = dy W: A = dy [T, out], B = Wᵀ [in, out] (K = out).
      const testing::Gemm64 dgrad = gemm64(dy, transposed(h.w, s.out, s.in), s.t, s.in, s.out);
      testing::expect_within(dx, dgrad.value, testing::output_bound(dgrad, s.out, h.dtype),
                             what + " dgrad");
      // dW = dyᵀ x, into f32 zeros: A = dyᵀ [out, T], B = xᵀ [in, T] (K = T).
      const testing::Gemm64 wgrad =
          gemm64(transposed(dy, s.t, s.out), transposed(x, s.t, s.in), s.out, s.in, s.t);
      testing::expect_within(wg, wgrad.value, testing::output_bound(wgrad, s.t, DType::f32),
                             what + " wgrad");
    }
  }
}

// L = Σ_tj r_tj y_tj is linear in x and in W, so central differences have no truncation
// error for any step h: with x± = fl32(x_tk ± h) the exact quotient (L(x+) - L(x-)) /
// (x+ - x-) is dL/dx_tk = Σ_j r_tj W_jk. Only rounding remains: each forward's f32 GEMM
// errs by |ỹ_tj - y_tj| <= gamma_in Σ_k |x_tk W_jk|, so the computed L errs by
//   E(x) <= Σ_tj |r_tj| (gamma_in + T out 2^-53 (1 + gamma_in)) Σ_k |x_tk W_jk|
// (the second term: the float64 sum of the T out exact products r ỹ, with |ỹ_tj| <=
// (1 + gamma_in) Σ_k |x_tk W_jk|), and
//   |fd - dL/dx_tk| <= (E(x+) + E(x-)) / (x+ - x-).
// A large step makes this small: h = 1/2 (E is ~ 1e-3 here, the gradients ~ 1). The
// layer's dx = r W is an f32 GEMM itself, within gamma_{out+5} Σ_j |r_tj W_jk| of the
// exact gradient; the same holds for W with the roles of x and W swapped and
// weight_grad within gamma_{T+5} Σ_t |r_tj x_tk|.
TEST_P(LinearOnDevice, Fp32GradientsMatchCentralDifferences) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t t = 16, in = 32, out = 24;
  const float h_step = 0.5f;
  LinearHarness h(make_config(Precision::fp32, in, out, t, device), rng);
  std::vector<float> x = testing::random_normal(t * in, 1.0, DType::f32, rng);
  const std::vector<float> r = testing::random_normal(t * out, 1.0, DType::f32, rng);

  const std::vector<float> w0 = h.w;
  h.forward(x);
  const std::vector<float> dx = h.backward(r);
  const std::vector<float> wg = h.weight_grad.read();

  auto loss = [&] {
    const std::vector<float> y = h.forward(x);
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i) l += double(r[i]) * y[i];
    return l;
  };
  auto rounding = [&] {  // E for the current x and W
    const testing::Gemm64 c = gemm64(x, h.w, t, out, in);
    const double per_unit = gamma(in) + double(t * out) * 0x1p-53 * (1.0 + gamma(in));
    double e = 0.0;
    for (size_t i = 0; i < c.abs.size(); ++i) e += std::abs(double(r[i])) * per_unit * c.abs[i];
    return e;
  };
  // Perturbs one value v (of x or W) both ways; returns {fd, its error bound}.
  auto central = [&](float& v, bool is_weight) {
    const float v0 = v, plus = v0 + h_step, minus = v0 - h_step;
    auto eval = [&](float value) {
      v = value;
      if (is_weight) h.weight.write(h.w);
      return std::pair{loss(), rounding()};
    };
    const auto [lp, ep] = eval(plus);
    const auto [lm, em] = eval(minus);
    v = v0;
    if (is_weight) h.weight.write(h.w);
    const double step = double(plus) - double(minus);
    return std::pair{(lp - lm) / step, (ep + em) / step};
  };

  std::vector<double> fd_x(t * in), bound_x(t * in);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t k = 0; k < in; ++k) {
      const auto [fd, fd_bound] = central(x[i * in + k], false);
      double abs = 0.0;
      for (int64_t j = 0; j < out; ++j) abs += std::abs(double(r[i * out + j]) * w0[j * in + k]);
      fd_x[i * in + k] = fd;
      bound_x[i * in + k] = fd_bound + gamma(out + 5) * abs;
    }
  }
  testing::expect_within(dx, fd_x, bound_x, "dx vs central differences");

  std::vector<double> fd_w(out * in), bound_w(out * in);
  for (int64_t j = 0; j < out; ++j) {
    for (int64_t k = 0; k < in; ++k) {
      const auto [fd, fd_bound] = central(h.w[j * in + k], true);
      double abs = 0.0;
      for (int64_t i = 0; i < t; ++i) abs += std::abs(double(r[i * out + j]) * x[i * in + k]);
      fd_w[j * in + k] = fd;
      bound_w[j * in + k] = fd_bound + gamma(t + 5) * abs;
    }
  }
  testing::expect_within(wg, fd_w, bound_w, "weight_grad vs central differences");
}

TEST_P(LinearOnDevice, BiasIsAddedAndItsGradientAccumulates) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t t = 32, in = 48, out = 32;
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp8}) {
    const std::string what = nn::precision_name(p);
    LinearHarness h(make_config(p, in, out, t, device, /*bias=*/true), rng);
    const std::vector<float> x = testing::random_normal(t * in, 1.0, h.dtype, rng);
    const std::vector<float> dy = testing::random_normal(t * out, 1.0, h.dtype, rng);

    // With a zero bias y0 is the GEMM's output itself (adding 0 and rounding a value
    // already in the working dtype changes nothing). add_bias forms y + b in fp32 and
    // rounds once to the working dtype, so with the bias the output is exactly that.
    h.bias.fill(0.0f);
    const std::vector<float> y0 = h.forward(x);
    h.bias.write(h.b);
    const std::vector<float> y1 = h.forward(x);
    int mismatches = 0;
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < out; ++j) {
        const float want = testing::round_to(h.dtype, y0[i * out + j] + h.b[j]);
        mismatches += y1[i * out + j] != want;
      }
    }
    EXPECT_EQ(mismatches, 0) << what << ": y != round(y_without_bias + b)";

    // bias_grad: an fp32 column sum of T values added into 0: gamma_T Σ_t |dy_tj|.
    // A second backward adds a second such sum and rounds once more:
    //   |g2 - 2 S| <= |g1 - S| + |s2 - S| + u |g2| <= 2 gamma_T Σ|dy| + 2u |2S|.
    // weight_grad: the GEMM bound B = gamma_{T+5} Σ|a||b| (at the device's FP8 accumulation
    // unit under fp8) once, 2B + 2u|2S| after two
    // (the operands are dy and x, or their FP8 transposed copies under fp8).
    std::vector<double> col(out), col_abs(out);
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < out; ++j) {
        col[j] += dy[i * out + j];
        col_abs[j] += std::abs(double(dy[i * out + j]));
      }
    }
    testing::Gemm64 wgrad;
    if (p == Precision::fp8) {
      const fp8::Recipe& rc = h.config.recipe;
      const auto qdy = testing::quantize64(dy, t, out, rc, fp8::Role::gradient);
      const auto qx = testing::quantize64(x, t, in, rc, fp8::Role::activation);
      wgrad = gemm64(qdy.transposed.value, qx.transposed.value, out, in, t);
    } else {
      wgrad = gemm64(transposed(dy, t, out), transposed(x, t, in), out, in, t);
    }
    const std::vector<double> wg_bound = testing::output_bound(
        wgrad, t, DType::f32, p == Precision::fp8 ? testing::fp8_accumulation_unit(device) : kU);

    for (int call = 1; call <= 2; ++call) {
      h.backward(dy);
      const std::vector<float> bg = h.bias_grad.read(), wg = h.weight_grad.read();
      std::vector<double> want_b(out), bound_b(out), want_w(wgrad.value.size()),
          bound_w(wgrad.value.size());
      for (int64_t j = 0; j < out; ++j) {
        want_b[j] = call * col[j];
        bound_b[j] = call * gamma(t) * col_abs[j] + (call - 1) * 2 * kU * std::abs(want_b[j]);
      }
      for (size_t i = 0; i < want_w.size(); ++i) {
        want_w[i] = call * wgrad.value[i];
        bound_w[i] = call * wg_bound[i] + (call - 1) * 2 * kU * std::abs(want_w[i]);
      }
      const std::string after = what + " after " + std::to_string(call) + " backward call(s)";
      testing::expect_within(bg, want_b, bound_b, after + ": bias_grad");
      testing::expect_within(wg, want_w, bound_w, after + ": weight_grad");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, LinearOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

// ---- argument errors (on the CPU: validation runs before any kernel) ----

TEST(LinearErrors, BadConfigurationsAreRefusedWithWhatWasExpected) {
  const Device cpu = Device::cpu();
  using testing::expect_linear_error;
  expect_linear_error([&] { nn::Linear(make_config(Precision::bf16, 0, 16, 16, cpu)); },
                      "in_features and out_features must be positive");
  expect_linear_error([&] { nn::Linear(make_config(Precision::bf16, 16, 16, 0, cpu)); },
                      "max_tokens must be positive");
  expect_linear_error([&] { nn::Linear(make_config(Precision::fp8, 100, 16, 16, cpu)); },
                      "in_features=100 must be a multiple of 16 for FP8 GEMMs");
  expect_linear_error([&] { nn::Linear(make_config(Precision::fp8, 16, 40, 16, cpu)); },
                      "out_features=40 must be a multiple of 16 for FP8 GEMMs");
  expect_linear_error([&] { nn::Linear(make_config(Precision::fp8, 16, 16, 8, cpu)); },
                      "max_tokens=8 must be at least 16 under fp8");
  // Under bf16 sizes need no padding.
  EXPECT_NO_THROW(nn::Linear(make_config(Precision::bf16, 100, 40, 8, cpu)));

  nn::LinearConfig delayed = make_config(Precision::fp8, 16, 16, 16, cpu);
  delayed.recipe.mode = fp8::ScalingMode::tensor_delayed;
  // A shared state takes slots only until it is allocated.
  fp8::DelayedScalingState state(cpu, delayed.recipe.delayed, {DType::e4m3});
  delayed.scaling_state = &state;
  try {
    nn::Linear layer(delayed);
    ADD_FAILURE() << "a layer took slots in an allocated state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[delayed scaling] add_slot after allocate()"),
              std::string::npos)
        << e.what();
  }
  fp8::DelayedScalingState open_state(cpu, delayed.recipe.delayed);
  delayed.scaling_state = &open_state;
  EXPECT_NO_THROW(nn::Linear{delayed});
  EXPECT_EQ(open_state.size(), 3);
}

TEST(LinearErrors, BadBindingsAndInputsAreRefusedWithWhatWasExpected) {
  using testing::DeviceArray;
  using testing::expect_linear_error;
  testing::Rng rng(testing::fresh_seed());
  const Device cpu = Device::cpu();
  const int64_t in = 32, out = 16;
  const nn::LinearConfig config = make_config(Precision::bf16, in, out, 32, cpu, true);
  DeviceArray w(cpu, DType::bf16, {out, in}), b(cpu, DType::bf16, {out}),
      wg(cpu, DType::f32, {out, in}), bg(cpu, DType::f32, {out}), w_f32(cpu, DType::f32, {out, in}),
      w_t(cpu, DType::bf16, {in, out});
  DeviceArray x(cpu, DType::bf16, {48, in}), y(cpu, DType::bf16, {48, out}),
      x_f32(cpu, DType::f32, {32, in}), x_wide(cpu, DType::bf16, {32, in + 16});
  x.write(testing::random_normal(48 * in, 1.0, DType::bf16, rng));
  w.write(testing::random_normal(out * in, 1.0, DType::bf16, rng));
  b.fill(0.0f);
  wg.fill(0.0f);
  bg.fill(0.0f);

  nn::Linear layer(config);
  expect_linear_error([&] { layer.forward(x.rows(32), y.rows(32)); }, "forward before bind()");
  expect_linear_error([&] { layer.bind(w_f32.tensor(), b.tensor(), wg.tensor(), bg.tensor()); },
                      "weight must be bf16[16, 32] on cpu");
  expect_linear_error([&] { layer.bind(w_t.tensor(), b.tensor(), wg.tensor(), bg.tensor()); },
                      "weight must be bf16[16, 32] on cpu");
  expect_linear_error([&] { layer.bind(w.tensor(), b.tensor(), w.tensor(), bg.tensor()); },
                      "weight_grad must be f32[16, 32]");
  expect_linear_error([&] { layer.bind(w.tensor(), Tensor(), wg.tensor(), bg.tensor()); },
                      "bias must be bf16[16]");
  layer.bind(w.tensor(), b.tensor(), wg.tensor(), bg.tensor());

  expect_linear_error([&] { layer.backward(y.rows(32), x.rows(32)); }, "backward before forward");
  expect_linear_error([&] { layer.forward(x_f32.rows(32), y.rows(32)); },
                      "forward: x must be bf16[T, 32] on cpu, got f32[32, 32]@cpu");
  expect_linear_error([&] { layer.forward(x_wide.rows(32), y.rows(32)); },
                      "forward: x must be bf16[T, 32]");
  expect_linear_error([&] { layer.forward(x.rows(48), y.rows(48)); },
                      "T=48 rows; expected 1 <= T <= max_tokens=32");
  const Tensor x_on_gpu(x.tensor().data, DType::bf16, {32, in}, Device::cuda(0));
  expect_linear_error([&] { layer.forward(x_on_gpu, y.rows(32)); },
                      "on cpu, got bf16[32, 32]@cuda");
  expect_linear_error([&] { layer.forward(x.rows(32), y.rows(31)); },
                      "forward: y must be bf16[32, 16] on cpu (T rows like x)");
  expect_linear_error([&] { layer.forward(x.rows(32), x.rows(32)); },
                      "forward: y must be bf16[32, 16]");

  layer.forward(x.rows(32), y.rows(32));
  expect_linear_error([&] { layer.backward(y.rows(16), x.rows(16)); },
                      "dy has T=16 rows but the last forward had 32");
  expect_linear_error([&] { layer.backward(x.rows(32), x.rows(32)); },
                      "backward: dy must be bf16[T, 16]");
  expect_linear_error([&] { layer.backward(y.rows(32), y.rows(32)); },
                      "backward: dx must be empty or bf16[32, 32]");
  EXPECT_NO_THROW(layer.backward(y.rows(32), Tensor()));  // no dx wanted (the first layer)

  // Under fp8, T must be a multiple of 16.
  nn::Linear fp8_layer(make_config(Precision::fp8, in, out, 32, cpu));
  fp8_layer.bind(w.tensor(), Tensor(), wg.tensor(), Tensor());
  expect_linear_error([&] { fp8_layer.forward(x.rows(24), y.rows(24)); },
                      "T=24 rows; under fp8 T must be a multiple of 16");
  expect_linear_error([&] { fp8_layer.bind(w.tensor(), b.tensor(), wg.tensor(), bg.tensor()); },
                      "configured without a bias");
}

}  // namespace
}  // namespace octet
