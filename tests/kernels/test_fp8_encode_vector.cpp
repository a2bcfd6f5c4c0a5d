// tests/kernels/test_fp8_encode_vector.cpp: the hand-written AVX-512 and AVX2 FP8 encoders
// (kernels/cpu/fp8_encode_avx512.h, fp8_encode_avx2.h) against the scalar
// f32_to_e4m3/f32_to_e5m2, bit for bit, with the saturated/flushed counts, directly and
// through quantize(), each where the CPU has its instructions. Inputs:
// all bf16 patterns times a few multipliers, every code's neighbourhood (ties,
// ±1 ulp), the overflow boundaries, f32 subnormals, ±0, ±Inf, NaNs, random bits.
// (All 2^32 f32 patterns were checked once outside CI: docs/perf/cpu-step.md.)

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/quantize.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/fp8_encode_avx2.h"
#include "kernels/cpu/fp8_encode_avx512.h"

namespace octet {
namespace {

using kernels::cpu::Isa;

uint8_t reference(float v, bool e4m3, bool saturate) {
  const Overflow o = saturate ? Overflow::saturate : Overflow::nonfinite;
  return e4m3 ? f32_to_e4m3(v, o) : f32_to_e5m2(v, o);
}

// The counts as quantize() defines them, from x and its scaled value.
void reference_counts(const std::vector<float>& x, const std::vector<float>& scale, bool e4m3,
                      bool saturate, uint64_t& saturated, uint64_t& flushed) {
  const uint32_t overflow_bits = e4m3 ? f32_bits(464.0f) + 1 : f32_bits(61440.0f);
  saturated = flushed = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t xm = f32_bits(x[i]) & 0x7FFFFFFFu;
    const float v = x[i] * scale[i];
    saturated += xm < 0x7F800000u && (f32_bits(v) & 0x7FFFFFFFu) >= overflow_bits;
    flushed += xm - 1u < 0x7F800000u - 1u && (reference(v, e4m3, saturate) & 0x7Fu) == 0;
  }
}

std::vector<float> inputs() {
  std::vector<float> x;
  // Every bf16 pattern, times multipliers that fill the f32 mantissa and move values
  // across the FP8 subnormal range and the overflow boundary.
  for (float m : {1.0f, 0.3f, 1.7f, 149.33333f, 0x1p-9f, 0x1.000002p0f}) {
    for (uint32_t b = 0; b < 65536; ++b) x.push_back(bf16_to_f32(static_cast<uint16_t>(b)) * m);
  }
  // Each code's value, its neighbours' midpoints (ties) and one f32 ulp either side.
  for (int code = 0; code < 256; ++code) {
    for (bool e4m3 : {true, false}) {
      const uint8_t c = static_cast<uint8_t>(code);
      const float d = e4m3 ? e4m3_to_f32(c) : e5m2_to_f32(c);
      const float next = e4m3 ? e4m3_to_f32(static_cast<uint8_t>(c + 1))
                              : e5m2_to_f32(static_cast<uint8_t>(c + 1));
      if (!std::isfinite(d)) continue;
      const float mids[] = {d, std::isfinite(next) ? (d + next) / 2 : d};
      for (float v : mids) {
        for (int k = -2; k <= 2; ++k) x.push_back(f32_from_bits(f32_bits(v) + k));
      }
    }
  }
  for (float v : {464.0f, 480.0f, 448.0f, 57344.0f, 61440.0f, 65536.0f, 0x1p-10f, 0x1p-17f, 0x1p-7f,
                  0x1p-15f, 3.4028235e38f}) {
    for (int k = -1; k <= 1; ++k) x.push_back(f32_from_bits(f32_bits(v) + k));
  }
  for (uint32_t bits : {0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00400000u, 0x00800000u,
                        0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7FA00000u}) {
    x.push_back(f32_from_bits(bits));
  }
  std::mt19937 rng(14);
  for (int i = 0; i < 65536; ++i) x.push_back(f32_from_bits(static_cast<uint32_t>(rng())));
  const size_t n = x.size();
  for (size_t i = 0; i < n; ++i) x.push_back(-x[i]);  // both signs of everything
  return x;
}

// The two encoders, each run where the CPU has its level.
class Fp8EncodeVector : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (kernels::cpu::hardware_isa() < GetParam())
      GTEST_SKIP() << "this CPU has no " << (GetParam() == Isa::avx512 ? "AVX-512" : "AVX2");
  }
};

// encode_run of the level under test.
template <class In, bool kE4M3, bool kCount, class Scale>
void encode_run(Isa isa, const In* x, uint8_t* out, int64_t n, Scale scale, bool saturate,
                uint32_t amax_bits, uint64_t& saturated, uint64_t& flushed) {
  if (isa == Isa::avx512) {
    kernels::cpu::avx512::encode_run<In, kE4M3, kCount>(x, out, n, scale, saturate, amax_bits,
                                                        saturated, flushed);
  } else {
    kernels::cpu::avx2::encode_run<In, kE4M3, kCount>(x, out, n, scale, saturate, amax_bits,
                                                      saturated, flushed);
  }
}

// nan_free: the inputs without their NaNs, with the bound of Inf's bits that leaves the
// encoder's NaN select out (±Inf stay in: the clamp must give their codes); else the bound
// "unknown", with every NaN.
template <bool kE4M3>
void check_direct(Isa isa, const std::vector<float>& all, bool saturate, bool nan_free) {
  SCOPED_TRACE(std::string(kE4M3 ? "e4m3" : "e5m2") + (saturate ? " saturate" : " nonfinite") +
               (nan_free ? " NaN-free bound" : " no bound"));
  std::vector<float> x;
  for (float v : all) {
    if (!nan_free || !std::isnan(v)) x.push_back(v);
  }
  const uint32_t amax_bits = nan_free ? 0x7F800000u : 0xFFFFFFFFu;
  const int64_t n = static_cast<int64_t>(x.size());
  // One multiplier per element, some of them not 1, so the vector product is tested too.
  std::vector<float> scale(x.size());
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? 0.5f : 3.0f;
  std::vector<uint8_t> out(x.size() + 1, 0xA5);
  uint64_t saturated = 0, flushed = 0;
  // n - 1 elements: a ragged tail; the byte past it must stay untouched.
  encode_run<float, kE4M3, true>(isa, x.data(), out.data(), n - 1,
                                 static_cast<const float*>(scale.data()), saturate, amax_bits,
                                 saturated, flushed);
  int64_t mismatches = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const uint8_t want = reference(x[i] * scale[i], kE4M3, saturate);
    if (out[i] != want && ++mismatches <= 5) {
      ADD_FAILURE() << "x bits " << std::hex << f32_bits(x[i]) << " * " << scale[i] << ": got "
                    << int{out[i]} << ", want " << int{want};
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(out[n - 1], 0xA5);
  EXPECT_EQ(out[n], 0xA5);
  std::vector<float> xs(x.begin(), x.end() - 1), ss(scale.begin(), scale.end() - 1);
  uint64_t want_saturated, want_flushed;
  reference_counts(xs, ss, kE4M3, saturate, want_saturated, want_flushed);
  EXPECT_EQ(saturated, want_saturated);
  EXPECT_EQ(flushed, want_flushed);
  EXPECT_GT(want_saturated, 0u);  // the inputs do reach both counts
  EXPECT_GT(want_flushed, 0u);
}

TEST_P(Fp8EncodeVector, MatchesTheScalarEncoderOnEveryInputClass) {
  const std::vector<float> x = inputs();
  for (bool saturate : {true, false}) {
    for (bool nan_free : {false, true}) {
      check_direct<true>(GetParam(), x, saturate, nan_free);
      check_direct<false>(GetParam(), x, saturate, nan_free);
    }
  }
}

// Short runs (every tail length) with one scalar multiplier and no counts, from f32 and bf16.
TEST_P(Fp8EncodeVector, EveryTailLength) {
  std::vector<float> x(40);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(i) * 13.25f - 200.0f;
    xb[i] = f32_to_bf16(x[i]);
  }
  for (int64_t n = 0; n <= 33; ++n) {
    std::vector<uint8_t> out(x.size(), 0xA5), out_b(x.size(), 0xA5);
    uint64_t unused = 0;
    encode_run<float, true, false>(GetParam(), x.data(), out.data(), n, 1.5f, true, 0xFFFFFFFFu,
                                   unused, unused);
    encode_run<uint16_t, true, false>(GetParam(), xb.data(), out_b.data(), n, 1.5f, true,
                                      0xFFFFFFFFu, unused, unused);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out_b[i], f32_to_e4m3(bf16_to_f32(xb[i]) * 1.5f)) << "bf16 " << n << " " << i;
    }
    for (size_t i = n; i < out_b.size(); ++i) ASSERT_EQ(out_b[i], 0xA5) << "bf16 " << n << " " << i;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], f32_to_e4m3(x[i] * 1.5f)) << n << " " << i;
    for (size_t i = n; i < out.size(); ++i) ASSERT_EQ(out[i], 0xA5) << n << " " << i;
  }
}

// bf16 inputs without counts and NaN (AVX-512 encodes them 64 at a time from the bf16 bits:
// encode64_bf16): every non-NaN bf16 pattern times multipliers that fill the f32 mantissa,
// push values past the overflow boundary, into FP8's subnormals or to zero, and -1.5 (which
// take the 16-value way), in a ragged run (the 64-value steps, then the tail), both formats
// and overflow modes, against the scalar encoder.
TEST_P(Fp8EncodeVector, Bf16RunsWithoutCountsMatchTheScalarEncoder) {
  std::vector<uint16_t> xb;
  for (uint32_t b = 0; b < 65536; ++b) {
    if (!std::isnan(bf16_to_f32(static_cast<uint16_t>(b)))) xb.push_back(static_cast<uint16_t>(b));
  }
  const int64_t n = static_cast<int64_t>(xb.size()) - 5;  // not a multiple of 64
  ASSERT_NE(n % 64, 0);
  for (float m : {1.0f, 0.7f, 1.1f, 3.0f, 1000.0f, 1.0e-3f, 1.0e-30f, -1.5f}) {
    for (bool e4m3 : {true, false}) {
      for (bool saturate : {true, false}) {
        std::vector<uint8_t> out(xb.size(), 0xA5);
        uint64_t unused = 0;
        if (e4m3) {
          encode_run<uint16_t, true, false>(GetParam(), xb.data(), out.data(), n, m, saturate,
                                            0x7F800000u, unused, unused);
        } else {
          encode_run<uint16_t, false, false>(GetParam(), xb.data(), out.data(), n, m, saturate,
                                             0x7F800000u, unused, unused);
        }
        int64_t mismatches = 0;
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t want = reference(bf16_to_f32(xb[i]) * m, e4m3, saturate);
          if (out[i] != want && ++mismatches <= 5) {
            ADD_FAILURE() << "bf16 " << std::hex << xb[i] << " * " << m << ": got " << int{out[i]}
                          << ", want " << int{want} << (e4m3 ? " e4m3" : " e5m2")
                          << (saturate ? " saturate" : " nonfinite");
          }
        }
        EXPECT_EQ(mismatches, 0);
        for (size_t i = n; i < out.size(); ++i) ASSERT_EQ(out[i], 0xA5) << i;
      }
    }
  }
}

// The same inputs through AVX-512's encode_wide_run (per tensor's codes with their bf16 values,
// 64 at a time from bf16 where there are no counts and no NaN): the codes against the scalar
// encoder and the values against each code's, bit for bit, into a second buffer and in place
// (wide = x), with a run of 32 left after the 64-value steps.
TEST(Fp8EncodeVectorAvx512, Bf16WideRunsMatchTheScalarEncoderAndTheCodesValues) {
  if (kernels::cpu::hardware_isa() < Isa::avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  std::vector<uint16_t> xb;
  for (uint32_t b = 0; b < 65536; ++b) {
    if (!std::isnan(bf16_to_f32(static_cast<uint16_t>(b)))) xb.push_back(static_cast<uint16_t>(b));
  }
  const int64_t n = static_cast<int64_t>(xb.size()) / 64 * 64 - 32;  // ends with a run of 32
  for (float m : {1.0f, 0.7f, 3.0f, 1.0e-3f, 1.0e-30f, -1.5f}) {
    for (bool e4m3 : {true, false}) {
      for (bool saturate : {true, false}) {
        for (bool in_place : {false, true}) {
          std::vector<uint16_t> x(xb.begin(), xb.begin() + n), separate(n, 0xDEAD);
          uint16_t* wide = in_place ? x.data() : separate.data();
          std::vector<uint8_t> out(n, 0xA5);
          const uint16_t* table = kernels::cpu::fp8_bf16_table(e4m3 ? DType::e4m3 : DType::e5m2);
          uint64_t unused = 0;
          if (e4m3) {
            kernels::cpu::avx512::encode_wide_run<uint16_t, true, false>(
                x.data(), out.data(), wide, n, m, saturate, 0x7F800000u, table, unused, unused);
          } else {
            kernels::cpu::avx512::encode_wide_run<uint16_t, false, false>(
                x.data(), out.data(), wide, n, m, saturate, 0x7F800000u, table, unused, unused);
          }
          int64_t mismatches = 0;
          for (int64_t i = 0; i < n; ++i) {
            const uint8_t want = reference(bf16_to_f32(xb[i]) * m, e4m3, saturate);
            const float value = e4m3 ? e4m3_to_f32(want) : e5m2_to_f32(want);
            const bool nan = std::isnan(value);  // the nonfinite E4M3 overflow code
            const bool same_wide = nan ? std::isnan(bf16_to_f32(wide[i]))
                                       : f32_bits(bf16_to_f32(wide[i])) == f32_bits(value);
            if ((out[i] != want || !same_wide) && ++mismatches <= 5) {
              ADD_FAILURE() << "bf16 " << std::hex << xb[i] << " * " << m << ": code "
                            << int{out[i]} << " (want " << int{want} << "), wide " << wide[i]
                            << (e4m3 ? " e4m3" : " e5m2") << (saturate ? " saturate" : "")
                            << (in_place ? " in place" : "");
            }
          }
          EXPECT_EQ(mismatches, 0);
        }
      }
    }
  }
}

// Through quantize(), per tensor with a given scale, f32 and bf16 inputs: the level's variant's
// wiring (OCTET_CPU_ISA set to it), data and counts.
TEST_P(Fp8EncodeVector, QuantizeGivenScaleMatchesTheScalarEncoder) {
  const char* saved = std::getenv("OCTET_CPU_ISA");
  const std::string restore = saved ? saved : "";
  setenv("OCTET_CPU_ISA", GetParam() == Isa::avx512 ? "avx512" : "avx2", 1);
  const std::vector<float> xf = inputs();
  std::vector<uint16_t> xb(65536);
  for (uint32_t b = 0; b < 65536; ++b) xb[b] = static_cast<uint16_t>(b);
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    for (Overflow overflow : {Overflow::saturate, Overflow::nonfinite}) {
      for (bool bf16 : {false, true}) {
        for (float s : {1.0f, 0.7f}) {
          const bool e4m3 = fp8 == DType::e4m3, sat = overflow == Overflow::saturate;
          const int64_t n = bf16 ? 65536 : static_cast<int64_t>(xf.size());
          std::vector<float> x(n);
          for (int64_t i = 0; i < n; ++i) x[i] = bf16 ? bf16_to_f32(xb[i]) : xf[i];
          std::vector<uint8_t> data(n);
          float scale = s, scale_inv = 0;
          int32_t counts[2] = {0, 0};
          kernels::QuantizeOutputs out;
          out.data = Tensor(data.data(), fp8, {1, n});
          out.scale_inv = Tensor(&scale_inv, DType::f32, {1, 1});
          out.counts = Tensor(counts, DType::i32, {2});
          kernels::QuantizeOptions o;
          o.overflow = overflow;
          o.given_scale = Tensor(&scale, DType::f32, {1});
          const Tensor in =
              bf16 ? Tensor(xb.data(), DType::bf16, {1, n}) : Tensor(x.data(), DType::f32, {1, n});
          kernels::quantize(in, out, o);
          int64_t mismatches = 0;
          for (int64_t i = 0; i < n; ++i) mismatches += data[i] != reference(x[i] * s, e4m3, sat);
          EXPECT_EQ(mismatches, 0) << dtype_name(fp8) << " sat " << sat << " bf16 " << bf16;
          uint64_t want_saturated, want_flushed;
          reference_counts(x, std::vector<float>(n, s), e4m3, sat, want_saturated, want_flushed);
          EXPECT_EQ(counts[0], static_cast<int32_t>(want_saturated));
          EXPECT_EQ(counts[1], static_cast<int32_t>(want_flushed));
        }
      }
    }
  }
  if (saved) {
    setenv("OCTET_CPU_ISA", restore.c_str(), 1);
  } else {
    unsetenv("OCTET_CPU_ISA");
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, Fp8EncodeVector, ::testing::Values(Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(info.param == Isa::avx512 ? "avx512" : "avx2");
                         });

}  // namespace
}  // namespace octet
#endif
