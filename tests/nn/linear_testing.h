// tests/nn/linear_testing.h: what the Linear tests share: a layer with its parameters,
// inputs and outputs on a device (host values in, host values out), float64 GEMMs with
// the error bounds the tests derive, and the FP8 operands a layer's GEMMs read, rebuilt
// on the host.
// defines: round_to, random_normal, transposed, DeviceArray,
//          LinearHarness, Gemm64, gemm64, output_bound, Fp8Operand64, Quantized64,
//          quantize64, quantization_bound, worst_ratio, expect_within, expect_linear_error
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "fp8/quantized_tensor.h"
#include "fp8/scaling.h"
#include "nn/linear.h"
#include "testing.h"

namespace octet::testing {

// The unit roundoff of an FP8 GEMM's accumulation on `device`. CPU: fp32, 2^-24. CUDA:
// Hopper's FP8 tensor cores add products into an accumulator with 13 fraction bits that
// truncates, promoted into fp32 by cuBLASLt every 128 K at most (measured on an H100,
// 2026-11-24: 1 + 2^-13 kept and 1 + 2^-14 lost within 128 products, with and without fast
// accumulation; docs/numerics.md), so every step is bounded by 2^-13 (and an emulated GEMM,
// bf16/f32 on tensor cores, by 2^-23, well inside). tests/kernels/test_gemm.cpp's
// accumulation_unit says the same for the kernel tests.
inline double fp8_accumulation_unit(Device device) {
  return device.is_cpu() ? kU : 0x1p-13;
}

// x rounded to dtype (f32 or bf16) and back: the value such a tensor holds.
inline float round_to(DType dtype, float x) {
  return dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(x)) : x;
}

// n samples of N(0, sigma^2), rounded to dtype so that the host copy is exactly the tensor.
inline std::vector<float> random_normal(int64_t n, double sigma, DType dtype, Rng& rng) {
  std::normal_distribution<double> normal(0.0, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = round_to(dtype, static_cast<float>(normal(rng)));
  return v;
}

template <class T>
std::vector<T> transposed(const std::vector<T>& x, int64_t rows, int64_t cols) {
  std::vector<T> t(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  }
  return t;
}

// A dense f32/bf16 array on a device, written and read as host floats.
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Device device, DType dtype, Shape shape)
      : buffer_(Buffer::for_tensor(device, dtype, shape)), tensor_(buffer_.tensor(dtype, shape)) {}

  const Tensor& tensor() const { return tensor_; }
  // The first `rows` rows, as a [rows, cols] matrix.
  Tensor rows(int64_t rows) const {
    return Tensor(tensor_.data, tensor_.dtype, {rows, tensor_.cols()}, tensor_.device);
  }
  void write(const std::vector<float>& values) const {
    std::vector<uint8_t> bytes(values.size() * dtype_size(tensor_.dtype));
    for (size_t i = 0; i < values.size(); ++i) {
      if (tensor_.dtype == DType::f32) {
        std::memcpy(&bytes[4 * i], &values[i], 4);
      } else {
        const uint16_t b = f32_to_bf16(values[i]);
        std::memcpy(&bytes[2 * i], &b, 2);
      }
    }
    copy_bytes(tensor_.data, tensor_.device, bytes.data(), Device::cpu(), bytes.size());
  }
  void fill(float value) const { write(std::vector<float>(tensor_.numel(), value)); }
  // The first n values.
  std::vector<float> read(int64_t n = -1) const {
    if (n < 0) n = tensor_.numel();
    std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(tensor_.dtype));
    copy_bytes(bytes.data(), Device::cpu(), tensor_.data, tensor_.device, bytes.size());
    std::vector<float> values(static_cast<size_t>(n));
    for (size_t i = 0; i < values.size(); ++i) {
      if (tensor_.dtype == DType::f32) {
        std::memcpy(&values[i], &bytes[4 * i], 4);
      } else {
        uint16_t b;
        std::memcpy(&b, &bytes[2 * i], 2);
        values[i] = bf16_to_f32(b);
      }
    }
    return values;
  }

 private:
  Buffer buffer_;
  Tensor tensor_;
};

// A Linear bound to parameters on `config.device`, with input/output arrays for
// max_tokens rows that stay alive between forward and backward (fp32/bf16 keep x).
// Weights are N(0, 1/in), the bias N(0, 1); gradients start at zero.
struct LinearHarness {
  nn::LinearConfig config;
  DType dtype;
  std::vector<float> w, b;  // host copies of the parameters
  DeviceArray weight, bias, weight_grad, bias_grad, x, y, dy, dx;
  nn::Linear layer;

  LinearHarness(const nn::LinearConfig& c, Rng& rng)
      : config(c), dtype(nn::activation_dtype(c.precision)) {
    const int64_t in = c.in_features, out = c.out_features, t = c.max_tokens;
    const Device d = c.device;
    weight = DeviceArray(d, dtype, {out, in});
    weight_grad = DeviceArray(d, DType::f32, {out, in});
    w = random_normal(out * in, 1.0 / std::sqrt(double(in)), dtype, rng);
    weight.write(w);
    weight_grad.fill(0.0f);
    if (c.bias) {
      bias = DeviceArray(d, dtype, {out});
      bias_grad = DeviceArray(d, DType::f32, {out});
      b = random_normal(out, 1.0, dtype, rng);
      bias.write(b);
      bias_grad.fill(0.0f);
    }
    x = DeviceArray(d, dtype, {t, in});
    y = DeviceArray(d, dtype, {t, out});
    dy = DeviceArray(d, dtype, {t, out});
    dx = DeviceArray(d, dtype, {t, in});
    layer = nn::Linear(c);
    layer.bind(weight.tensor(), bias.tensor(), weight_grad.tensor(), bias_grad.tensor());
  }

  // y = layer(x) for the T = x.size() / in rows of x.
  std::vector<float> forward(const std::vector<float>& xv) {
    const int64_t t = static_cast<int64_t>(xv.size()) / config.in_features;
    x.write(xv);
    layer.forward(x.rows(t), y.rows(t));
    return y.read(t * config.out_features);
  }
  // dx for dy (the weight and bias gradients accumulate in their arrays).
  std::vector<float> backward(const std::vector<float>& dyv) {
    const int64_t t = static_cast<int64_t>(dyv.size()) / config.out_features;
    dy.write(dyv);
    layer.backward(dy.rows(t), dx.rows(t));
    return dx.read(t * config.in_features);
  }
  void set_weights(const std::vector<float>& values) {
    w = values;
    weight.write(w);
  }
  void zero_grads() {
    weight_grad.fill(0.0f);
    if (config.bias) bias_grad.fill(0.0f);
  }
};

// C [m, n] = A [m, k] · B [n, k]ᵀ in float64 (both K-major), with Σ_k |a||b| per element.
// The operands here are bf16/FP8/f32 values and their products are exact in float64; the
// float64 sums err by at most k 2^-53 Σ|a b|, 2^-29 of the fp32 bounds used with them,
// so they count as exact.
struct Gemm64 {
  std::vector<double> value, abs;
};
template <class A, class B>
Gemm64 gemm64(const std::vector<A>& a, const std::vector<B>& b, int64_t m, int64_t n, int64_t k) {
  Gemm64 c{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0, sum_abs = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = double(a[i * k + l]) * double(b[j * k + l]);
        sum += p;
        sum_abs += std::abs(p);
      }
      c.value[i * n + j] = sum;
      c.abs[i * n + j] = sum_abs;
    }
  }
  return c;
}

// The bound on a GEMM output against the exact float64 GEMM of the operands it read:
// fp32 accumulation of K products (exact: bf16 and FP8 products fit in fp32; f32 ones
// round once more, counted in K) in any order, plus the epilogue (scale_inv products,
// alpha, per-slice scaling, beta accumulation: at most 5 roundings) gives
// gamma_{K+5} Σ|a||b| (Higham 3.5; gamma_a + gamma_b + gamma_a gamma_b <= gamma_{a+b}).
// A bf16 output rounds once more, by at most 2^-8 of its magnitude. `u_acc`: the unit
// roundoff of the accumulation (fp8_accumulation_unit for an FP8 GEMM), every rounding
// counted at it.
inline std::vector<double> output_bound(const Gemm64& c, int64_t k, DType out_dtype,
                                        double u_acc = kU) {
  std::vector<double> bound(c.value.size());
  for (size_t i = 0; i < bound.size(); ++i) {
    bound[i] = gamma(k + 5, u_acc) * c.abs[i];
    if (out_dtype == DType::bf16) bound[i] += kUBf16 * (std::abs(c.value[i]) + bound[i]);
  }
  return bound;
}

// An FP8 operand as a GEMM reads it: each element's exact value (code * scale_inv of
// its block) and that scale_inv.
struct Fp8Operand64 {
  std::vector<double> value, scale_inv;
};
struct Quantized64 {
  DType format;
  Fp8Operand64 stored;      // [rows, cols]
  Fp8Operand64 transposed;  // [cols, rows], the copy dgrad/wgrad read
};

inline Fp8Operand64 expand(const Tensor& data, const Tensor& scale_inv, kernels::ScaleGrid grid) {
  const int64_t rows = data.rows(), cols = data.cols();
  const int64_t br = grid.block_rows == 0 ? rows : grid.block_rows;
  const int64_t bc = grid.block_cols == 0 ? cols : grid.block_cols;
  const int64_t nbc = scale_inv.cols();
  Fp8Operand64 op{std::vector<double>(rows * cols), std::vector<double>(rows * cols)};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t s = r / br * nbc + c / bc;
      const double si = grid.e8m0 ? double(e8m0_to_f32(scale_inv.as<uint8_t>()[s]))
                                  : double(scale_inv.as<float>()[s]);
      op.scale_inv[r * cols + c] = si;
      op.value[r * cols + c] =
          double(fp8_to_f32(data.as<uint8_t>()[r * cols + c], data.dtype)) * si;
    }
  }
  return op;
}

// What a layer's quantization of x [rows, cols] (bf16 values) as `role` holds, made
// again on the CPU with the same recipe; under tensor-delayed scaling with the given
// scale (the state's scale for that tensor at the time of the layer's quantization).
// Quantization is deterministic and the CUDA kernels match the CPU's bit for bit.
inline Quantized64 quantize64(const std::vector<float>& x, int64_t rows, int64_t cols,
                              const fp8::Recipe& recipe, fp8::Role role,
                              std::optional<float> delayed_scale = std::nullopt) {
  DeviceArray in(Device::cpu(), DType::bf16, {rows, cols});
  in.write(x);
  fp8::QuantizedTensor q(Device::cpu(), rows, cols, recipe, role, true);
  std::optional<fp8::DelayedScalingState> state;
  if (recipe.mode == fp8::ScalingMode::tensor_delayed) {
    state.emplace(Device::cpu(), recipe.delayed, std::vector<DType>{recipe.format(role)});
    state->restore({delayed_scale.value_or(1.0f)},
                   std::vector<float>(recipe.delayed.history_len, 0.0f));
  }
  fp8::quantize(in.tensor(), q, recipe, state ? &*state : nullptr, 0);
  return {q.format(), expand(q.data, q.scale_inv, q.grid()),
          expand(q.data_t, q.scale_inv_t, q.grid())};
}

// The bound on |Σ_k â b̂ - Σ_k a b| for FP8 operands â, b̂ quantized from a, b [m|n, k]
// (K-major). Quantization multiplies by the scale in fp32 (relative error <= u), rounds
// to the format (<= 2^-(m+1) relative for normal results, m = 3 for E4M3 and 2 for E5M2;
// <= half the subnormal quantum q absolutely for subnormal ones) and the value read back
// is code * scale_inv with scale_inv = fl(1/scale) (<= u relative). So
//   â = a (1 + θ) + η,  |θ| <= ε = 2^-(m+1) + 3u,  |η| <= δ = (q/2) scale_inv
// (MX scales are powers of two and exact: the u terms are then slack), barring
// saturation, which current scaling cannot cause and the delayed tests avoid. Then
//   |â b̂ - a b| <= (ε_a + ε_b + ε_a ε_b)|a||b| + δ_a |b| (1 + ε_b) + δ_b |a| (1 + ε_a) + δ_a δ_b
// summed over k.
inline std::vector<double> quantization_bound(const std::vector<float>& a, const Fp8Operand64& qa,
                                              DType fa, const std::vector<float>& b,
                                              const Fp8Operand64& qb, DType fb, int64_t m,
                                              int64_t n, int64_t k) {
  auto eps = [](DType f) { return std::ldexp(1.0, -(dtype_info(f).mantissa_bits + 1)) + 3 * kU; };
  const double ea = eps(fa), eb = eps(fb);
  const double half_qa = dtype_info(fa).min_subnormal / 2;
  const double half_qb = dtype_info(fb).min_subnormal / 2;
  // Per k the term is |b| (e |a| + (1 + ε_b) δ_a) + δ_b ((1 + ε_a) |a| + δ_a), e = ε_a + ε_b +
  // ε_a ε_b: two products per k once p and q below are made.
  std::vector<double> p(m * k), q(m * k), babs(n * k), db(n * k);
  for (int64_t i = 0; i < m * k; ++i) {
    const double av = std::abs(double(a[i])), da = half_qa * qa.scale_inv[i];
    p[i] = (ea + eb + ea * eb) * av + (1 + eb) * da;
    q[i] = (1 + ea) * av + da;
  }
  for (int64_t i = 0; i < n * k; ++i) {
    babs[i] = std::abs(double(b[i]));
    db[i] = half_qb * qb.scale_inv[i];
  }
  std::vector<double> bound(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t l = 0; l < k; ++l)
        sum += p[i * k + l] * babs[j * k + l] + q[i * k + l] * db[j * k + l];
      bound[i * n + j] = sum;
    }
  }
  return bound;
}

// max_i |got_i - want_i| / bound_i (NaN counts as infinitely far), and where.
struct Worst {
  double ratio = 0.0;
  size_t index = 0;
};
template <class G>
Worst worst_ratio(const std::vector<G>& got, const std::vector<double>& want,
                  const std::vector<double>& bound) {
  Worst w{-1.0, 0};
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / std::max(bound[i], 1e-300);
    if (ratio > w.ratio) w = {ratio, i};
  }
  return w;
}

// Asserts |got - want| <= bound everywhere, reporting the worst element.
template <class G>
void expect_within(const std::vector<G>& got, const std::vector<double>& want,
                   const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Worst w = worst_ratio(got, want, bound);
  EXPECT_LE(w.ratio, 1.0) << what << ": element " << w.index << " is " << got[w.index]
                          << ", expected " << want[w.index] << " within " << bound[w.index];
}

// Runs fn, expecting an octet::Error whose message starts with "[linear] " and contains `needle`.
template <class Fn>
void expect_linear_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.starts_with("[linear] ")) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
  }
}

}  // namespace octet::testing
