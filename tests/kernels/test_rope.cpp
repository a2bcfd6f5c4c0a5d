// tests/kernels/test_rope.cpp: kernels::rope_forward/backward against a float64
// reference with derived bounds and finite differences, for MHA and GQA layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/rope.h"
#include "layer_testing.h"

namespace octet {
namespace {

using testing::Approx;
using testing::exact;

struct RopeCase {
  int64_t n_heads, n_kv_heads, head_dim, seq_len;
  float theta;
  int64_t width() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
  std::string name() const {
    return "Hq=" + std::to_string(n_heads) + " Hkv=" + std::to_string(n_kv_heads) +
           " hd=" + std::to_string(head_dim) + " S=" + std::to_string(seq_len);
  }
};
constexpr int64_t kRopeBatch = 2;
const RopeCase kRopeCases[] = {{4, 2, 8, 7, 10000.0f}, {4, 4, 16, 9, 500000.0f}};

// cos and sin of p * theta^(-2i/hd) with their bounds. The exact angle is taken in
// float64; the kernel's fp32 angle errs by (ln(theta) * 2i/hd + pow + 2) u relative, to
// first order: the exponent 2i/hd rounded (u, amplified by ln(theta) * 2i/hd in the
// power), powf (pow u), the reciprocal (u) and the product with p (u). Then cos/sin add
// their own error, and bf16 activations round them to bf16 as Hugging Face does.
// libm (the CPU kernel): powf, cosf and sinf within 1 ulp of the exact value (2u). CUDA's
// powf is within 4 ulp and its sinf/cosf/sincosf within 2 ulp of the correctly rounded
// result (CUDA C++ Programming Guide, "Mathematical Functions"): 4.5 and 2.5 ulp from the
// exact value, 9u and 5u relative.
struct Rotation {
  Approx c, s;
};
Rotation rotation(const RopeCase& rc, int64_t position, int64_t i, DType dtype, Device device) {
  const double pow_u = device.is_cuda() ? 9.0 : 2.0, trig_u = device.is_cuda() ? 5.0 : 2.0;
  const double exponent = 2.0 * static_cast<double>(i) / static_cast<double>(rc.head_dim);
  const double angle = static_cast<double>(position) * std::pow(double{rc.theta}, -exponent);
  const double rel = (std::log(double{rc.theta}) * exponent + pow_u + 2.0) * testing::kU;
  const Approx a{angle, rel * angle};
  // |cos'|, |sin'| <= 1: the angle's error passes through unamplified.
  const Approx c = testing::rounded(std::cos(angle), a.e, trig_u * testing::kU);
  const Approx s = testing::rounded(std::sin(angle), a.e, trig_u * testing::kU);
  return {testing::round_to(dtype, c), testing::round_to(dtype, s)};
}

// out = R(sign * angle) x on the q and k heads, v heads unchanged (exactly: bound 0), with
// the bounds of the kernel on `device`.
std::vector<Approx> reference(const RopeCase& rc, int64_t batch, const std::vector<double>& x,
                              DType dtype, double sign, Device device) {
  const int64_t tokens = batch * rc.seq_len, width = rc.width(), half = rc.head_dim / 2;
  std::vector<Approx> out;
  for (double v : x) out.push_back(exact(v));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      Rotation rot = rotation(rc, t % rc.seq_len, i, dtype, device);
      rot.s = sign < 0 ? -rot.s : rot.s;
      for (int64_t h = 0; h < rc.n_heads + rc.n_kv_heads; ++h) {
        const int64_t at = t * width + h * rc.head_dim + i;
        const Approx x1 = exact(x[at]), x2 = exact(x[at + half]);
        out[at] = testing::round_to(dtype, x1 * rot.c - x2 * rot.s);
        out[at + half] = testing::round_to(dtype, x2 * rot.c + x1 * rot.s);
      }
    }
  }
  return out;
}
std::vector<Approx> reference(const RopeCase& rc, const std::vector<double>& x, DType dtype,
                              double sign, Device device) {
  return reference(rc, kRopeBatch, x, dtype, sign, device);
}

class RopeOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(RopeOnDevice, ForwardAndBackwardMatchFloat64AndLeaveVUntouched) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const RopeCase& rc : kRopeCases) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const int64_t tokens = kRopeBatch * rc.seq_len;
      const std::string what = rc.name() + " " + dtype_name(dtype);
      std::vector<double> x = testing::uniform(tokens * rc.width(), -2, 2, rng);
      const auto xt = testing::upload(device, dtype, {kRopeBatch, rc.seq_len, rc.width()}, x);
      kernels::rope_forward(xt.tensor, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len,
                            rc.theta);
      // Tolerance: Approx's running bound of x1 c - x2 s (and x2 c + x1 s) with the
      // bounds of c and s above; 2^-8 relative for a bf16 result.
      testing::expect_within(testing::download(xt.tensor), reference(rc, x, dtype, 1.0, device),
                             what + " forward");
      const auto gt = testing::upload(device, dtype, {tokens, rc.width()}, x);
      kernels::rope_backward(gt.tensor, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len,
                             rc.theta);
      testing::expect_within(testing::download(gt.tensor), reference(rc, x, dtype, -1.0, device),
                             what + " backward");
    }
  }
}

TEST_P(RopeOnDevice, BackwardMatchesFiniteDifferencesOfForward) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const RopeCase& rc : kRopeCases) {
    const int64_t n = kRopeBatch * rc.seq_len * rc.width();
    std::vector<double> x = testing::uniform(n, -1, 1, rng), r = testing::uniform(n, -1, 1, rng);
    testing::round_in_place(DType::f32, x);
    const auto rt = testing::upload(device, DType::f32, {kRopeBatch * rc.seq_len, rc.width()}, r);
    kernels::rope_backward(rt.tensor, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len, rc.theta);
    auto forward = [&](const std::vector<double>& xs) {
      const auto t = testing::upload(device, DType::f32, {kRopeBatch * rc.seq_len, rc.width()}, xs);
      kernels::rope_forward(t.tensor, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len, rc.theta);
      return testing::download(t.tensor);
    };
    std::vector<double> out_bound, grad_bound;
    for (const Approx& a : reference(rc, x, DType::f32, 1.0, device)) out_bound.push_back(a.e);
    for (const Approx& a : reference(rc, r, DType::f32, -1.0, device)) grad_bound.push_back(a.e);
    // The rotation is linear in x: no truncation term, only rounding (see the helper).
    testing::expect_gradient_matches_finite_differences(x, forward, r, out_bound,
                                                        testing::download(rt.tensor), grad_bound,
                                                        0x1p-6, "rope " + rc.name());
  }
}

// LLaMA-sized heads (hd = 128: 64 pairs, 4 tokens a CUDA block, 10 rotated heads in
// batches of 4), pairs beyond one block's 256 threads (hd = 640), an odd number of pairs
// with heads that do not fill a batch (hd = 6), and long sequences (positions to 2047,
// where the fp32 angle's error dominates the bound).
const RopeCase kWideCases[] = {{8, 2, 128, 64, 500000.0f},
                               {3, 1, 640, 5, 10000.0f},
                               {5, 1, 6, 300, 10000.0f},
                               {2, 1, 64, 2048, 500000.0f}};

TEST_P(RopeOnDevice, WideHeadsLongSequencesAndOddShapesMatchFloat64AndTheCpu) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t batch = 1;
  for (const RopeCase& rc : kWideCases) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (double sign : {1.0, -1.0}) {
        const int64_t tokens = batch * rc.seq_len;
        const std::string what =
            rc.name() + " " + dtype_name(dtype) + (sign > 0 ? " forward" : " backward");
        std::vector<double> x = testing::uniform(tokens * rc.width(), -2, 2, rng);
        auto apply = [&](Device on) {
          const auto t = testing::upload(on, dtype, {tokens, rc.width()}, x);
          if (sign > 0) {
            kernels::rope_forward(t.tensor, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len,
                                  rc.theta);
          } else {
            kernels::rope_backward(t.tensor, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len,
                                   rc.theta);
          }
          return testing::download(t.tensor);
        };
        testing::round_in_place(dtype, x);
        const std::vector<double> got = apply(device);
        // Tolerance: the running bounds of reference() for this device's powf/cosf/sinf.
        const std::vector<Approx> want = reference(rc, batch, x, dtype, sign, device);
        testing::expect_within(got, want, what);
        if (device.is_cpu()) continue;
        // Against the CPU kernel: within the sum of the CPU's and the device's bounds.
        const std::vector<Approx> want_cpu = reference(rc, batch, x, dtype, sign, Device::cpu());
        testing::expect_within(got, testing::centred_on(apply(Device::cpu()), want_cpu, want),
                               what + " vs cpu");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, RopeOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

// The CPU rotation reading rope_table's cos/sin gives the same bits as the one that
// computes them in the call (which the float64 tests above check), forward and backward,
// for every shape above, both dtypes and a batch of two sequences, at every instruction-set
// level the machine has (the table's rotation has AVX2 and AVX-512 variants; OCTET_CPU_ISA
// caps the level). Tolerance: none (memcmp).
TEST(RopeTable, TheTableGivesTheSameBitsAsComputingTheAngles) {
  const Device cpu = Device::cpu();
  testing::Rng rng(testing::fresh_seed());
  std::vector<RopeCase> cases(std::begin(kRopeCases), std::end(kRopeCases));
  cases.insert(cases.end(), std::begin(kWideCases), std::end(kWideCases));
  cases.push_back({3, 1, 40, 11, 10000.0f});  // 20 pairs: a group of 16 and a tail of 4
  testing::for_each_cpu_isa([&] {
    for (const RopeCase& rc : cases) {
      for (DType dtype : {DType::f32, DType::bf16}) {
        const auto table = testing::upload(cpu, dtype, {rc.seq_len, rc.head_dim},
                                           std::vector<double>(rc.seq_len * rc.head_dim, 7.0));
        kernels::rope_table(table.tensor, rc.head_dim, rc.seq_len, rc.theta);
        // The table row p = 0: cos 0 = 1 and sin 0 = 0 for every pair.
        const std::vector<double> row0 = testing::download(table.tensor);
        for (int64_t i = 0; i < rc.head_dim; ++i) {
          EXPECT_EQ(row0[i], i < rc.head_dim / 2 ? 1.0 : 0.0) << rc.name() << " pair " << i;
        }
        for (bool backward : {false, true}) {
          const std::string what =
              rc.name() + " " + dtype_name(dtype) + (backward ? " backward" : " forward");
          const int64_t tokens = 2 * rc.seq_len;
          std::vector<double> x = testing::uniform(tokens * rc.width(), -2, 2, rng);
          testing::round_in_place(dtype, x);
          // Zeros of both signs: the lanes' rotation must keep the scalar's signed zeros
          // (with sin 0 at position 0, x1 cos - x2 sin is -0 - +0 there for x1 = -0).
          for (size_t i = 0; i < x.size(); i += 7) x[i] = i % 2 == 0 ? 0.0 : -0.0;
          const auto plain = testing::upload(cpu, dtype, {tokens, rc.width()}, x);
          const auto tabled = testing::upload(cpu, dtype, {tokens, rc.width()}, x);
          auto apply = [&](const Tensor& qkv, const Tensor& with) {
            if (backward) {
              kernels::rope_backward(qkv, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len,
                                     rc.theta, with);
            } else {
              kernels::rope_forward(qkv, rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.seq_len,
                                    rc.theta, with);
            }
          };
          apply(plain.tensor, Tensor());
          apply(tabled.tensor, table.tensor);
          EXPECT_EQ(std::memcmp(plain.tensor.data, tabled.tensor.data, plain.tensor.nbytes()), 0)
              << what;
          // And the rotation did something (the same bits are not two no-ops).
          EXPECT_NE(testing::download(tabled.tensor), x) << what;
        }
      }
    }
  });
}

TEST(RopeTable, BadTablesAreRefused) {
  const Device cpu = Device::cpu();
  const auto qkv = testing::upload(cpu, DType::f32, {6, 64}, std::vector<double>(6 * 64));
  const auto f32_table = testing::upload(cpu, DType::f32, {3, 8}, std::vector<double>(3 * 8));
  const auto bf16_table = testing::upload(cpu, DType::bf16, {3, 8}, std::vector<double>(3 * 8));
  const auto short_table = testing::upload(cpu, DType::f32, {2, 8}, std::vector<double>(2 * 8));
  testing::expect_op_error(
      [&] { kernels::rope_forward(qkv.tensor, 4, 2, 8, 3, 1e4f, bf16_table.tensor); },
      "rope_forward", "the RoPE table must be f32 [3, 8] on the CPU");
  testing::expect_op_error(
      [&] { kernels::rope_backward(qkv.tensor, 4, 2, 8, 3, 1e4f, short_table.tensor); },
      "rope_backward", "the RoPE table must be f32 [3, 8] on the CPU");
  testing::expect_op_error([&] { kernels::rope_table(f32_table.tensor, 8, 4, 1e4f); }, "rope_table",
                           "the RoPE table must be f32 [4, 8]");
  testing::expect_op_error([&] { kernels::rope_table(f32_table.tensor, 7, 3, 1e4f); }, "rope_table",
                           "head_dim=7 must be positive and even");
  testing::expect_op_error([&] { kernels::rope_table(f32_table.tensor, 8, 3, -1.0f); },
                           "rope_table", "theta must be finite and > 0");
  Tensor on_cuda = qkv.tensor;
  on_cuda.device = testing::absent_cuda_device();
  testing::expect_op_error(
      [&] { kernels::rope_forward(on_cuda, 4, 2, 8, 3, 1e4f, f32_table.tensor); }, "rope_forward",
      "a RoPE table is for CPU tensors only");
}

TEST(RopeErrors, BadShapesAndAbsentDevicesAreRefused) {
  const Device cpu = Device::cpu();
  const auto qkv = testing::upload(cpu, DType::f32, {6, 64}, std::vector<double>(6 * 64));
  testing::expect_op_error([&] { kernels::rope_forward(qkv.tensor, 4, 2, 8, 4, 1e4f); },
                           "rope_forward", "are not whole sequences of seq_len=4");
  testing::expect_op_error([&] { kernels::rope_forward(qkv.tensor, 4, 3, 8, 3, 1e4f); },
                           "rope_forward", "qkv must be f32 or bf16 [6, 80]");
  testing::expect_op_error([&] { kernels::rope_backward(qkv.tensor, 2, 1, 15, 3, 1e4f); },
                           "rope_backward", "head_dim=15 must be positive and even");
  testing::expect_op_error([&] { kernels::rope_forward(qkv.tensor, 4, 2, 8, 3, 0.0f); },
                           "rope_forward", "theta must be finite and > 0");
  Tensor on_cuda = qkv.tensor;
  on_cuda.device = testing::absent_cuda_device();
  testing::expect_op_error([&] { kernels::rope_forward(on_cuda, 4, 2, 8, 3, 1e4f); },
                           "rope_forward", "CUDA device");
  testing::expect_op_error([&] { kernels::rope_backward(on_cuda, 4, 2, 8, 3, 1e4f); },
                           "rope_backward", "CUDA device");
}

}  // namespace
}  // namespace octet
