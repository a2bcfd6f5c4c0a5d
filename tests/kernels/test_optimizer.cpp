// tests/kernels/test_optimizer.cpp: AdamW against float64 with its error bound, the
// clipping that AdamW reads on the device, the sum of squares and the loss sum, on
// every device (and the CUDA AdamW bit for bit against the CPU's).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/convert.h"
#include "kernels/optimizer.h"
#include "layer_testing.h"
#include "quantize_testing.h"

namespace octet {
namespace {

class OptimizerOnDevice : public ::testing::TestWithParam<Device> {};

struct AdamWInputs {
  std::vector<double> p, g, m, v;
};

AdamWInputs random_state(int64_t n, testing::Rng& rng) {
  AdamWInputs in{testing::uniform(n, -1, 1, rng), testing::uniform(n, -0.1, 0.1, rng),
                 testing::uniform(n, -0.01, 0.01, rng), testing::uniform(n, 0, 1e-4, rng)};
  for (auto* values : {&in.p, &in.g, &in.m, &in.v}) testing::round_in_place(DType::f32, *values);
  return in;
}

// Runs adamw_step on `device` and returns p, m, v.
std::vector<std::vector<double>> run_adamw(Device device, const AdamWInputs& in,
                                           const kernels::AdamWStep& s, double sum_sq = 0.0) {
  const auto n = static_cast<int64_t>(in.p.size());
  auto p = testing::upload(device, DType::f32, {n}, in.p);
  auto g = testing::upload(device, DType::f32, {n}, in.g);
  auto m = testing::upload(device, DType::f32, {n}, in.m);
  auto v = testing::upload(device, DType::f32, {n}, in.v);
  auto ss = testing::upload(device, DType::f32, {1}, std::vector<double>{sum_sq});
  kernels::adamw_step(p.tensor, g.tensor, m.tensor, v.tensor, s, ss.tensor);
  return {testing::download(p.tensor), testing::download(m.tensor), testing::download(v.tensor)};
}

TEST_P(OptimizerOnDevice, AdamWMatchesFloat64WithinItsRoundingBound) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t n = (1 << 17) + 77;  // many CUDA blocks and a ragged tail
  const AdamWInputs in = random_state(n, rng);
  kernels::AdamWStep s;
  s.lr = 3e-4f;
  s.weight_decay = 0.1f;
  s.step = 7;
  s.grad_scale = 0.5f;
  const auto got = run_adamw(device, in, s);
  // The kernel's formula, each operation an fp32 rounding (Approx bounds each one, u =
  // 2^-24); the bias corrections and the decay factor are computed on the host the
  // same way on both devices and enter as the f32 values they are.
  const double bias1 = static_cast<float>(1.0f - static_cast<float>(std::pow(double{0.9f}, 7.0)));
  const double bias2 = static_cast<float>(1.0f - static_cast<float>(std::pow(double{0.95f}, 7.0)));
  const double decay = static_cast<float>(1.0f - s.lr * s.weight_decay);
  using testing::Approx;
  using testing::exact;
  std::vector<Approx> want_p, want_m, want_v;
  for (int64_t i = 0; i < n; ++i) {
    const Approx gi = exact(in.g[i]) * exact(s.grad_scale);
    const Approx mi = exact(0.9f) * exact(in.m[i]) + exact(1.0f - 0.9f) * gi;
    const Approx vi = exact(0.95f) * exact(in.v[i]) + exact(1.0f - 0.95f) * gi * gi;
    const Approx upd =
        exact(s.lr) * (mi / exact(bias1)) / (testing::sqrt(vi / exact(bias2)) + exact(s.eps));
    want_p.push_back(exact(in.p[i]) * exact(decay) - upd);
    want_m.push_back(mi);
    want_v.push_back(vi);
  }
  testing::expect_within(got[0], want_p, "param");
  testing::expect_within(got[1], want_m, "m");
  testing::expect_within(got[2], want_v, "v");
  if (device.is_cuda()) {
    // Same operations in the same order, each rounded on its own: the same bits.
    const auto cpu = run_adamw(Device::cpu(), in, s);
    EXPECT_EQ(got, cpu) << "CUDA AdamW differs from the CPU's";
  }
}

TEST_P(OptimizerOnDevice, ClippingReadsTheSumOfSquaresOnTheDevice) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const AdamWInputs in = random_state(1000, rng);
  kernels::AdamWStep clipped;
  clipped.max_grad_norm = 1.0f;
  clipped.grad_scale = 0.5f;
  // A norm of 4 (sum of squares 16) above max 1: the gradients are scaled by exactly
  // 1/4 (a power of two, so the product with grad_scale is exact): the same bits as
  // grad_scale 0.125 without clipping.
  kernels::AdamWStep scaled;
  scaled.grad_scale = 0.125f;
  EXPECT_EQ(run_adamw(device, in, clipped, 16.0), run_adamw(device, in, scaled));
  // A norm of 0.5, below the maximum: no clipping.
  kernels::AdamWStep plain;
  plain.grad_scale = 0.5f;
  EXPECT_EQ(run_adamw(device, in, clipped, 0.25), run_adamw(device, in, plain));
  // Clipping without the sum of squares is refused, naming what is missing.
  auto p = testing::upload(device, DType::f32, {4}, std::vector<double>(4));
  testing::expect_op_error(
      [&] { kernels::adamw_step(p.tensor, p.tensor, p.tensor, p.tensor, clipped); }, "adamw",
      "sum of squares");
}

// AdamW writing the bf16 working copy in its pass gives the same bits (param, m, v and the
// copy) as AdamW and then kernels::convert (the two passes the trainer made before), over
// a decayed and an undecayed part with clipping on. Tolerance: none (memcmp).
TEST_P(OptimizerOnDevice, AdamWWritingTheBf16CopyMatchesAdamWThenConvertBitForBit) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t n = (1 << 17) + 77, first = 1000, decayed = 90000;  // threads and a tail
  const AdamWInputs in = random_state(n, rng);
  kernels::AdamWStep s;
  s.lr = 3e-3f;
  s.weight_decay = 0.1f;
  s.step = 3;
  s.max_grad_norm = 1.0f;
  struct State {
    testing::DeviceTensor p, g, m, v, ss, w;
  };
  auto state = [&] {
    return State{testing::upload(device, DType::f32, {n}, in.p),
                 testing::upload(device, DType::f32, {n}, in.g),
                 testing::upload(device, DType::f32, {n}, in.m),
                 testing::upload(device, DType::f32, {n}, in.v),
                 testing::upload(device, DType::f32, {1}, std::vector<double>{4.0}),
                 testing::upload(device, DType::bf16, {n}, std::vector<double>(n, 3.0))};
  };
  State two = state(), one = state();
  kernels::adamw_step_decayed_first(two.p.tensor, two.g.tensor, two.m.tensor, two.v.tensor, first,
                                    decayed, s, two.ss.tensor);
  kernels::convert(two.p.tensor, two.w.tensor);
  kernels::adamw_step_decayed_first(one.p.tensor, one.g.tensor, one.m.tensor, one.v.tensor, first,
                                    decayed, s, one.ss.tensor, one.w.tensor);
  auto bytes = [](const Tensor& t) {
    std::vector<uint8_t> out(t.nbytes());
    copy_bytes(out.data(), Device::cpu(), t.data, t.device, out.size());
    return out;
  };
  EXPECT_EQ(bytes(one.p.tensor), bytes(two.p.tensor)) << "param";
  EXPECT_EQ(bytes(one.m.tensor), bytes(two.m.tensor)) << "m";
  EXPECT_EQ(bytes(one.v.tensor), bytes(two.v.tensor)) << "v";
  EXPECT_EQ(bytes(one.w.tensor), bytes(two.w.tensor)) << "bf16 working copy";
  EXPECT_NE(testing::download(one.w.tensor), std::vector<double>(n, 3.0)) << "nothing written";
  // A working copy of the wrong dtype or size is refused.
  auto f32 = testing::upload(device, DType::f32, {n}, std::vector<double>(n));
  testing::expect_op_error(
      [&] {
        kernels::adamw_step(one.p.tensor, one.g.tensor, one.m.tensor, one.v.tensor, s,
                            one.ss.tensor, f32.tensor);
      },
      "adamw", "the working copy must be bf16");
}

// The CPU AdamW exists once per instruction-set level (picked from the CPU, capped by
// OCTET_CPU_ISA): each level this machine has gives the baseline's bits for param, m, v and the
// bf16 copy (tolerance: none, memcmp), over threads, a ragged tail and values that take every
// branch of the rounding: NaN and Inf gradients, zero and subnormal moments, parameters that
// round to bf16 ties and overflow it.
TEST(OptimizerCpu, AdamWGivesTheSameBitsOnEveryInstructionSetLevel) {
  testing::Rng rng(testing::fresh_seed());
  const int64_t n = (1 << 17) + 77;
  AdamWInputs in = random_state(n, rng);
  for (int64_t i = 0; i < n; i += 997) {
    switch (i / 997 % 6) {
      case 0:
        in.g[i] = NAN;
        break;
      case 1:
        in.g[i] = i % 2 == 0 ? INFINITY : -INFINITY;
        break;
      case 2:
        in.m[i] = 0.0, in.v[i] = 0.0, in.g[i] = 0.0;
        break;
      case 3:
        in.v[i] = 0x1p-140, in.m[i] = -0x1p-145;
        break;
      case 4:
        in.p[i] = 1.0 + 0x1p-8;
        break;  // halfway between two bf16 values
      default:
        in.p[i] = 3.4e38;
        break;  // rounds past bf16's largest finite
    }
  }
  kernels::AdamWStep s;
  s.lr = 3e-3f;
  s.weight_decay = 0.1f;
  s.step = 5;
  s.max_grad_norm = 1.0f;
  auto run = [&](const char* isa, bool copy) {
    testing::ScopedEnv env("OCTET_CPU_ISA", isa);
    auto p = testing::upload(Device::cpu(), DType::f32, {n}, in.p);
    auto g = testing::upload(Device::cpu(), DType::f32, {n}, in.g);
    auto m = testing::upload(Device::cpu(), DType::f32, {n}, in.m);
    auto v = testing::upload(Device::cpu(), DType::f32, {n}, in.v);
    auto ss = testing::upload(Device::cpu(), DType::f32, {1}, std::vector<double>{4.0});
    auto w = testing::upload(Device::cpu(), DType::bf16, {n}, std::vector<double>(n, 3.0));
    kernels::adamw_step(p.tensor, g.tensor, m.tensor, v.tensor, s, ss.tensor,
                        copy ? w.tensor : Tensor());
    std::vector<uint8_t> out;
    for (const Tensor* t : {&p.tensor, &m.tensor, &v.tensor, &w.tensor}) {
      const auto* b = static_cast<const uint8_t*>(t->data);
      out.insert(out.end(), b, b + t->nbytes());
    }
    return out;
  };
  for (const bool copy : {false, true}) {
    const std::vector<uint8_t> want = run("baseline", copy);
    for (const char* isa : {"avx2", "avx512"}) {
      EXPECT_EQ(run(isa, copy), want) << "OCTET_CPU_ISA=" << isa << (copy ? ", bf16 copy" : "");
    }
  }
}

// The CPU sums keep each chunk's partial sums in fixed lanes, so every instruction-set level
// gives the baseline's bits (tolerance: none), for f32 and bf16, tails of every length mod 32
// and more chunks than one thread takes.
TEST(OptimizerCpu, SumsGiveTheSameBitsOnEveryInstructionSetLevel) {
  testing::Rng rng(testing::fresh_seed());
  for (const int64_t n : {int64_t{1}, int64_t{31}, int64_t{1000}, int64_t{(1 << 20) + 19}}) {
    // Values of about 1, with 2^60 and -2^60 side by side at every 1024th place: the partial
    // sums they fall into (0 and 1 of 32) absorb the small values that follow them there and
    // cancel when the partials are added in order; another grouping or order of the partials
    // absorbs other values, and gives a sum far apart in f32.
    std::vector<double> x = testing::uniform(n, -3, 3, rng);
    for (int64_t i = 0; i + 1 < n; i += 1024) x[i] = 0x1p60, x[i + 1] = -0x1p60;
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const auto xt = testing::upload(Device::cpu(), dtype, {n}, x);
      auto sums = [&](const char* isa) {
        testing::ScopedEnv env("OCTET_CPU_ISA", isa);
        auto out = testing::upload(Device::cpu(), DType::f32, {1}, std::vector<double>{0.0});
        kernels::sum_of_squares(xt.tensor, out.tensor);
        std::vector<double> got{testing::download(out.tensor)[0]};
        if (dtype == DType::f32) {
          auto acc = testing::upload(Device::cpu(), DType::f32, {1}, std::vector<double>{0.25});
          kernels::add_scaled_sum(xt.tensor, acc.tensor, 1.0 / 3.0);
          got.push_back(testing::download(acc.tensor)[0]);
        }
        return got;
      };
      const std::vector<double> want = sums("baseline");
      for (const char* isa : {"avx2", "avx512"}) {
        EXPECT_EQ(sums(isa), want)
            << "OCTET_CPU_ISA=" << isa << " n " << n << " " << dtype_name(dtype);
      }
    }
  }
}

TEST(ClipFactor, IsMaxNormOverNormAboveTheMaximumAndOneOtherwise) {
  EXPECT_EQ(kernels::clip_factor(16.0f, 1.0f), 0.25f);
  EXPECT_EQ(kernels::clip_factor(0.25f, 1.0f), 1.0f);
  EXPECT_EQ(kernels::clip_factor(1.0f, 1.0f), 1.0f);   // equal: not above
  EXPECT_EQ(kernels::clip_factor(16.0f, 0.0f), 1.0f);  // clipping off
  EXPECT_EQ(kernels::clip_factor(INFINITY, 1.0f), 0.0f);
  EXPECT_EQ(kernels::clip_factor(NAN, 1.0f), 1.0f);  // NaN stays visible
  // 2 / sqrt(5), computed in fp64 and rounded once.
  EXPECT_EQ(kernels::clip_factor(5.0f, 2.0f), static_cast<float>(2.0 / std::sqrt(5.0)));
}

TEST_P(OptimizerOnDevice, SumsAreFloat64SumsRoundedOnce) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      std::vector<double> x = testing::uniform(n, -2, 2, rng);
      const auto xt = testing::upload(device, dtype, {n}, x);  // rounds x to dtype
      double squares = 0.0, sum = 0.0;
      for (double v : x) squares += v * v, sum += v;
      auto out = testing::upload(device, DType::f32, {1}, std::vector<double>{0.0});
      kernels::sum_of_squares(xt.tensor, out.tensor);
      // Summed in fp64 (error ~n 2^-53 relative, far below) and rounded to f32 once:
      // within 2^-24 relative, with a little room for the fp64 sum's own error.
      const std::string what = std::to_string(n) + " " + dtype_name(dtype);
      EXPECT_NEAR(testing::download(out.tensor)[0], squares, 1.01 * 0x1p-24 * squares) << what;
      if (dtype != DType::f32) continue;
      // add_scaled_sum adds onto what is there: out = f32(1.5 + f32(scale * sum)),
      // two f32 roundings of values no larger than |1.5| + |scale sum|.
      auto acc = testing::upload(device, DType::f32, {1}, std::vector<double>{1.5});
      const double scale = 1.0 / 3.0;
      kernels::add_scaled_sum(xt.tensor, acc.tensor, scale);
      const double want = 1.5 + scale * sum;
      EXPECT_NEAR(testing::download(acc.tensor)[0], want,
                  2.01 * 0x1p-24 * (1.5 + std::abs(scale * sum)))
          << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, OptimizerOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet
