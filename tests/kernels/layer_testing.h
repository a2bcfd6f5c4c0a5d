// tests/kernels/layer_testing.h: what the LLaMA layer kernel tests share: float64
// references that carry an error bound for the fp32 evaluation of the same formula
// (Approx), host <-> device tensors, the bound check, a finite-difference gradient
// check and the expectation of an op's error.
// defines: Approx, exact, rounded, sum, round_to, exp, expf_on, log, sqrt, cos,
//          sin, DeviceTensor, round_in_place, upload, upload_ids, upload_misaligned, upload_at,
//          absent_cuda_device, download, uniform, centred_on, expect_within,
//          expect_gradient_matches_finite_differences, expect_op_error
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "testing.h"

namespace octet::testing {

// A float64 value `v` of a formula and a bound `e` on how far an fp32 evaluation of
// the same formula can be from it: running error analysis. Every arithmetic result is
// rounded once (relative error u); libm's expf/logf/cosf/sinf/powf are within 1 ulp
// (2u). Sums are bounded for any summation order, so the kernel may sum in lanes.
// Second-order terms are kept (a.e * b.e), so the bounds hold, not just to first order.
struct Approx {
  double v = 0.0, e = 0.0;
};
inline Approx exact(double v) {
  return {v, 0.0};
}
// v, with the error e0 its operands bring, rounded once more (relative u).
inline Approx rounded(double v, double e0, double u = kU) {
  return {v, e0 + u * (std::abs(v) + e0)};
}
inline Approx operator+(Approx a, Approx b) {
  return rounded(a.v + b.v, a.e + b.e);
}
inline Approx operator-(Approx a, Approx b) {
  return rounded(a.v - b.v, a.e + b.e);
}
inline Approx operator-(Approx a) {
  return {-a.v, a.e};
}
inline Approx operator*(Approx a, Approx b) {
  return rounded(a.v * b.v, std::abs(a.v) * b.e + std::abs(b.v) * a.e + a.e * b.e);
}
inline Approx operator/(Approx a, Approx b) {
  const double v = a.v / b.v;
  // |a~/b~ - a/b| <= (a.e + |v| b.e) / (|b| - b.e) when |b| > b.e.
  const double denom = std::abs(b.v) - b.e;
  return rounded(v, denom > 0 ? (a.e + std::abs(v) * b.e) / denom : INFINITY);
}
inline Approx exp(Approx a) {
  const double v = std::exp(a.v);
  return rounded(v, v * std::expm1(a.e), 2 * kU);
}
// exp as a device's expf evaluates it: glibc's expf within 1 ulp (2u relative), CUDA's
// within 2 ulp (4u; CUDA C++ Programming Guide, "Mathematical Functions", without fast math).
inline Approx expf_on(Device device, Approx a) {
  const double v = std::exp(a.v);
  return rounded(v, v * std::expm1(a.e), device.is_cuda() ? 4 * kU : 2 * kU);
}
inline Approx log(Approx a) {
  const double v = std::log(a.v);
  return rounded(v, a.e < a.v ? -std::log1p(-a.e / a.v) : INFINITY, 2 * kU);
}
inline Approx sqrt(Approx a) {
  const double v = std::sqrt(a.v);
  return rounded(v, v - std::sqrt(std::max(a.v - a.e, 0.0)));
}
// |cos' | <= 1 and |sin'| <= 1: the argument's error passes through unamplified.
inline Approx cos(Approx a) {
  return rounded(std::cos(a.v), a.e, 2 * kU);
}
inline Approx sin(Approx a) {
  return rounded(std::sin(a.v), a.e, 2 * kU);
}
// sum_i x_i in fp32 in any order: sum e_i + gamma_{n-1} sum (|v_i| + e_i).
inline Approx sum(const std::vector<Approx>& xs) {
  double v = 0.0, e = 0.0, mag = 0.0;
  for (const Approx& x : xs) v += x.v, e += x.e, mag += std::abs(x.v) + x.e;
  const int64_t n = static_cast<int64_t>(xs.size());
  return {v, e + (n > 1 ? gamma(n - 1) * mag : 0.0)};
}
// The rounding of an fp32 result to `dtype` (f32: already done).
inline Approx round_to(DType dtype, Approx a) {
  return dtype == DType::bf16 ? rounded(a.v, a.e, kUBf16) : a;
}

// ---- tensors -------------------------------------------------------------------

struct DeviceTensor {
  Buffer buffer;
  Tensor tensor;
};

// Rounds values to what dtype (f32, bf16) stores.
inline void round_in_place(DType dtype, std::vector<double>& values) {
  for (double& v : values) {
    v = dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(static_cast<float>(v)))
                             : static_cast<float>(v);
  }
}

// Encodes `values` as dtype (f32, bf16 or i32) on `device`; rounds `values` in place
// to what was stored, so that the references see the exact inputs.
inline DeviceTensor upload(Device device, DType dtype, Shape shape, std::vector<double>& values) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), shape.numel());
  std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
  if (dtype != DType::i32) round_in_place(dtype, values);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(&bytes[i * 4], &f, 4);
    } else if (dtype == DType::bf16) {
      const uint16_t h = f32_to_bf16(static_cast<float>(values[i]));
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      const auto v = static_cast<int32_t>(values[i]);
      std::memcpy(&bytes[i * 4], &v, 4);
    }
  }
  DeviceTensor t{Buffer(device, std::max<size_t>(bytes.size(), 1)), {}};
  copy_bytes(t.buffer.data(), device, bytes.data(), Device::cpu(), bytes.size());
  t.tensor = t.buffer.view(dtype, shape);
  return t;
}
inline DeviceTensor upload(Device device, DType dtype, Shape shape,
                           const std::vector<double>& values) {
  std::vector<double> copy = values;
  return upload(device, dtype, shape, copy);
}
inline DeviceTensor upload_ids(Device device, const std::vector<int32_t>& ids) {
  return upload(device, DType::i32, {static_cast<int64_t>(ids.size())},
                std::vector<double>(ids.begin(), ids.end()));
}

inline std::vector<double> download(const Tensor& t) {
  std::vector<uint8_t> bytes(t.nbytes());
  copy_bytes(bytes.data(), Device::cpu(), t.data, t.device, bytes.size());
  std::vector<double> values(t.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    if (t.dtype == DType::bf16) {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      values[i] = bf16_to_f32(h);
    } else if (t.dtype == DType::i32) {
      int32_t v;
      std::memcpy(&v, &bytes[i * 4], 4);
      values[i] = v;
    } else {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      values[i] = f;
    }
  }
  return values;
}

inline std::vector<double> uniform(size_t n, double lo, double hi, Rng& rng) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// `values` as dtype on `device`, starting one element past an aligned address: the kernels'
// paths for data that allows no 16-byte vector access. Rounds `values` as upload does.
inline DeviceTensor upload_misaligned(Device device, DType dtype, Shape shape,
                                      std::vector<double>& values) {
  std::vector<double> padded(values.size() + 1, 0.0);
  std::copy(values.begin(), values.end(), padded.begin() + 1);
  DeviceTensor t = upload(device, dtype, {static_cast<int64_t>(padded.size())}, padded);
  t.tensor = t.buffer.view(dtype, shape, dtype_size(dtype));
  std::copy(padded.begin() + 1, padded.end(), values.begin());
  return t;
}

// `values` as dtype [rows, cols] starting `offset` elements into a fresh buffer (offset 1:
// rows off the 16-byte boundaries of the CUDA kernels' packs). Rounds `values` as upload does.
inline DeviceTensor upload_at(Device device, DType dtype, int64_t rows, int64_t cols,
                              std::vector<double>& values, int64_t offset) {
  std::vector<double> padded(static_cast<size_t>(offset), 0.0);
  padded.insert(padded.end(), values.begin(), values.end());
  DeviceTensor t = upload(device, dtype, {rows * cols + offset}, padded);
  t.tensor = t.buffer.view(dtype, {rows, cols}, offset * dtype_size(dtype));
  std::copy(padded.begin() + offset, padded.end(), values.begin());
  return t;
}

// A CUDA device this machine lacks (cuda:0 where there is no GPU or no CUDA in the build):
// a dispatcher must refuse it before it touches memory, so host memory may pose as it.
inline Device absent_cuda_device() {
  return Device::cuda(cuda_device_count());
}

// ---- checks --------------------------------------------------------------------

// The bound for a device result against the CPU kernel's result `cpu` on the same inputs:
// each is within its own bound (`a`, `b`: the float64 references for the two devices) of
// the exact value, so they are within a.e + b.e of each other.
inline std::vector<Approx> centred_on(const std::vector<double>& cpu, const std::vector<Approx>& a,
                                      const std::vector<Approx>& b) {
  std::vector<Approx> out(cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) out[i] = {cpu[i], a.at(i).e + b.at(i).e};
  return out;
}

// Asserts |got[i] - want[i].v| <= want[i].e everywhere; reports the worst element.
// OCTET_TEST_VERBOSE=1 prints how much of its bound each check used.
inline void expect_within(const std::vector<double>& got, const std::vector<Approx>& want,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i].v);
    const double ratio = std::isnan(err) ? INFINITY : err / std::max(want[i].e, 1e-300);
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (std::getenv("OCTET_TEST_VERBOSE"))
    std::printf("  %s: worst error / bound = %.3g\n", what.c_str(), worst_ratio);
  EXPECT_LE(worst_ratio, 1.0) << what << ": element " << worst << " is " << got[worst] << ", exact "
                              << want[worst].v << ", bound " << want[worst].e;
}

// Checks the gradient `grad` of L(x) = sum_i r_i f_i(x) against central differences of
// the kernel's own forward pass f (f32 inputs and outputs; L formed in float64).
//   D(h) = (L(x + h e_k) - L(x - h e_k)) / (x_k+ - x_k-), with x_k+- rounded to f32 and
//   the actual f32 difference as the denominator.
// Rounding: f_i carries an error of at most out_bound[i] (the forward test's bound), so
// the numerator errs by at most N = sum_i |r_i| 2 out_bound[i] over the outputs that
// the perturbation changed (the kernels are deterministic: an output that does not
// depend on x_k is recomputed bit for bit and cancels exactly), giving N / (2h) in D.
// Truncation: D(h) = g + c h^2 + O(h^4) + noise; with D(2h) = g + 4 c h^2 + ... the
// step pair bounds |c h^2| <= (|D(2h) - D(h)| + N_h + N_2h) / 3, doubled to cover the
// h^4 term and the variation of the third derivative over the step.
//   |grad_k - D(h)| <= 2 (|D(2h) - D(h)| + N_h + N_2h) / 3 + N_h + grad_bound[k]
// The check also asserts that this bound is below `max_relative` of the gradient's
// scale, so that it can catch a wrong gradient. `indices`: the inputs to check (when
// empty: all of them, or ~384 spread over them for larger inputs).
inline void expect_gradient_matches_finite_differences(
    const std::vector<double>& x,
    const std::function<std::vector<double>(const std::vector<double>&)>& f,
    const std::vector<double>& r, const std::vector<double>& out_bound,
    const std::vector<double>& grad, const std::vector<double>& grad_bound, double h,
    const std::string& what, double max_relative = 0.02, std::vector<size_t> indices = {}) {
  ASSERT_EQ(grad.size(), x.size()) << what;
  ASSERT_EQ(grad_bound.size(), x.size()) << what;
  if (indices.empty()) {
    // At most ~kMaxChecked inputs, spread evenly, each at a different offset in its stride.
    constexpr size_t kMaxChecked = 384;
    const size_t stride = (x.size() + kMaxChecked - 1) / kMaxChecked;
    for (size_t j = 0; j * stride < x.size(); ++j) {
      indices.push_back(std::min(x.size() - 1, j * stride + j % stride));
    }
  }
  double grad_scale = 0.0, max_bound = 0.0, worst_ratio = -1.0;
  size_t worst = 0;
  double worst_fd = 0.0, worst_bound = 0.0;
  std::vector<double> xp = x;
  for (size_t k : indices) {
    auto difference = [&](double step, double& noise) {
      const float lo = static_cast<float>(x[k] - step), hi = static_cast<float>(x[k] + step);
      xp[k] = hi;
      const std::vector<double> fp = f(xp);
      xp[k] = lo;
      const std::vector<double> fm = f(xp);
      xp[k] = x[k];
      double num = 0.0, n = 0.0;
      for (size_t i = 0; i < fp.size(); ++i) {
        if (fp[i] == fm[i]) continue;
        num += r[i] * (fp[i] - fm[i]);
        n += std::abs(r[i]) * 2.0 * out_bound[i];
      }
      const double denom = static_cast<double>(hi) - static_cast<double>(lo);
      noise = n / denom;
      return num / denom;
    };
    double n1 = 0.0, n2 = 0.0;
    const double d1 = difference(h, n1), d2 = difference(2 * h, n2);
    const double bound = 2.0 * (std::abs(d2 - d1) + n1 + n2) / 3.0 + n1 + grad_bound[k];
    const double ratio = std::abs(grad[k] - d1) / std::max(bound, 1e-300);
    grad_scale = std::max(grad_scale, std::abs(grad[k]));
    max_bound = std::max(max_bound, bound);
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = k, worst_fd = d1, worst_bound = bound;
  }
  if (std::getenv("OCTET_TEST_VERBOSE"))
    std::printf("  %s: worst error / bound = %.3g, max bound / gradient scale = %.3g\n",
                what.c_str(), worst_ratio, max_bound / grad_scale);
  EXPECT_LE(worst_ratio, 1.0) << what << ": gradient element " << worst << " is " << grad[worst]
                              << ", finite differences give " << worst_fd << " +- " << worst_bound;
  EXPECT_LE(max_bound, max_relative * grad_scale)
      << what << ": the finite-difference bound " << max_bound
      << " is too loose to check a gradient of scale " << grad_scale;
}

// Runs fn, expecting an octet::Error whose message starts with "[op] " and contains `needle`.
template <typename Fn>
void expect_op_error(Fn fn, const std::string& op, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected [" << op << "] ... " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.starts_with("[" + op + "] ")) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
  }
}

}  // namespace octet::testing
