// tests/core/test_convert_wide.cpp: the scalar f32 <-> bf16, f32 <-> f16 and E8M0
// conversions of core/convert.h against float64 models (convert_reference.h,
// std::frexp) and, for f16, the F16C instructions where the CPU has them.
// Conversions are exact, so every comparison is bit for bit (no tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "convert_reference.h"
#include "core/convert.h"
#include "testing.h"

namespace octet {
namespace {

using testing::kRefBF16;
using testing::kRefF16;

// NaN results are checked for being NaN with the input's sign (the spec keeps
// the sign; payloads are the implementation's); everything else bit for bit.
::testing::AssertionResult same_16bit_result(float x, uint16_t got, uint16_t want,
                                             const testing::RefFormat& ref) {
  const bool nan_in = std::isnan(x);
  if (nan_in ? (ref.is_nan(got) && (got & 0x8000) == (want & 0x8000)) : got == want) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "input " << x << " (f32 bits 0x" << std::hex
                                       << f32_bits(x) << "): got 0x" << got << ", want 0x" << want;
}

// Inputs that put f32 values on, just below and just above every rounding
// boundary of a 16-bit format whose values are the f32 values with the low 16
// bits clear (bf16): all upper halves x a few lower halves.
std::vector<uint32_t> bf16_neighbourhood_bits() {
  std::vector<uint32_t> bits;
  for (uint32_t hi = 0; hi <= 0xFFFF; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      bits.push_back(hi << 16 | lo);
    }
  }
  return bits;
}

// Midpoints between all neighbouring finite values of `ref` (and the boundary
// past max), with one f32 ulp either side of each, both signs.
std::vector<float> midpoints_and_neighbours(const testing::RefFormat& ref) {
  std::vector<float> out;
  for (uint32_t k = 0; k <= ref.max_code(); ++k) {
    const double next = k == ref.max_code() ? ref.next_after_max() : ref.decode(k + 1);
    const auto mid = static_cast<float>((ref.decode(k) + next) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  return out;
}

// ---- bf16 ------------------------------------------------------------------

TEST(BF16, F32ToBF16RoundsToNearestEvenAroundEveryBoundary) {
  for (uint32_t u : bf16_neighbourhood_bits()) {
    const float x = f32_from_bits(u);
    const auto want = static_cast<uint16_t>(kRefBF16.encode(x, false));
    ASSERT_TRUE(same_16bit_result(x, f32_to_bf16(x), want, kRefBF16));
  }
}

TEST(BF16, NaNStaysQuietNaNWithItsSign) {
  for (uint32_t payload : {0x400000u, 0x000001u, 0x7FFFFFu, 0x00FFFFu, 0x010000u}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint16_t b = f32_to_bf16(f32_from_bits(sign | 0x7F800000u | payload));
      EXPECT_TRUE(kRefBF16.is_nan(b)) << std::hex << payload;
      EXPECT_EQ(b & 0x8000u, sign >> 16);
      EXPECT_NE(b & 0x0040u, 0u) << "quiet bit";
    }
  }
}

TEST(BF16, RandomF32RoundsLikeTheFloat64Model) {
  testing::Rng rng(testing::fresh_seed());
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = f32_from_bits(static_cast<uint32_t>(rng()));
    const auto want = static_cast<uint16_t>(kRefBF16.encode(x, false));
    ASSERT_TRUE(same_16bit_result(x, f32_to_bf16(x), want, kRefBF16));
  }
}

TEST(BF16, EveryBF16DecodesToItsFieldValue) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float x = bf16_to_f32(static_cast<uint16_t>(b));
    const double want = kRefBF16.decode(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(x));
      ASSERT_EQ(f32_to_bf16(x), b | 0x40u) << "a NaN comes back quieted, payload and sign kept";
    } else {
      ASSERT_EQ(static_cast<double>(x), want) << std::hex << b;
      ASSERT_EQ(f32_to_bf16(x), b) << std::hex << b;
    }
  }
}

// ---- f16 -------------------------------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) uint16_t f16c_from_f32(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_to_f32(uint16_t h) {
  return _cvtsh_ss(h);
}
bool have_f16c() {
  return __builtin_cpu_supports("f16c");
}
#else
uint16_t f16c_from_f32(float) {
  return 0;
}
float f16c_to_f32(uint16_t) {
  return 0.0f;
}
bool have_f16c() {
  return false;
}
#endif

// Checks f32_to_f16 on `inputs` against the float64 model and, where the CPU
// has it, the F16C instruction.
void check_f32_to_f16(const std::vector<float>& inputs) {
  const bool f16c = have_f16c();
  for (float x : inputs) {
    const uint16_t got = f32_to_f16(x);
    const auto want = static_cast<uint16_t>(kRefF16.encode(x, false));
    ASSERT_TRUE(same_16bit_result(x, got, want, kRefF16)) << "vs the float64 model";
    if (f16c) {
      ASSERT_TRUE(same_16bit_result(x, got, f16c_from_f32(x), kRefF16)) << "vs F16C";
    }
  }
}

TEST(F16, F32ToF16RoundsEveryBF16ValueLikeTheModelAndF16C) {
  std::vector<float> inputs;
  for (uint32_t b = 0; b <= 0xFFFF; ++b) inputs.push_back(bf16_to_f32(static_cast<uint16_t>(b)));
  check_f32_to_f16(inputs);
}

TEST(F16, F32ToF16RoundsTiesToEvenAtEveryMidpoint) {
  // Includes 65520, the tie between max (65504, odd) and 65536: it becomes Inf.
  check_f32_to_f16(midpoints_and_neighbours(kRefF16));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
}

TEST(F16, RandomF32RoundsLikeTheModelAndF16C) {
  testing::Rng rng(testing::fresh_seed());
  std::vector<float> inputs;
  for (int i = 0; i < 1'000'000; ++i) inputs.push_back(f32_from_bits(static_cast<uint32_t>(rng())));
  // Log-uniform over the f16 range: from below half its smallest subnormal to past max.
  for (int i = 0; i < 1'000'000; ++i) inputs.push_back(testing::log_uniform_f32(rng, -26, 17));
  check_f32_to_f16(inputs);
}

TEST(F16, EveryF16DecodesToItsFieldValueAndRoundTrips) {
  const bool f16c = have_f16c();
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float x = f16_to_f32(static_cast<uint16_t>(h));
    const double want = kRefF16.decode(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(x)) << std::hex << h;
      ASSERT_EQ(std::signbit(x), (h & 0x8000) != 0) << std::hex << h;
      continue;
    }
    ASSERT_EQ(f32_bits(x), f32_bits(static_cast<float>(want))) << std::hex << h;
    if (f16c) {
      ASSERT_EQ(f32_bits(x), f32_bits(f16c_to_f32(static_cast<uint16_t>(h)))) << "vs F16C";
    }
    ASSERT_EQ(f32_to_f16(x), h) << std::hex << h;
  }
}

// ---- E8M0 ------------------------------------------------------------------

// floor(log2(x)) from frexp (x = m * 2^e, m in [0.5, 1)); up adds one unless x is
// a power of two; the result is clamped to the E8M0 range 2^-127 .. 2^127.
uint8_t e8m0_reference(float x, ScaleRounding rounding) {
  if (!(x > 0.0f) || std::isinf(x)) return 0xFF;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);
  int log2 = e - 1;
  if (rounding == ScaleRounding::up && m != 0.5) ++log2;
  return static_cast<uint8_t>(std::clamp(log2 + 127, 0, 254));
}

void check_e8m0(float x) {
  for (ScaleRounding r : {ScaleRounding::down, ScaleRounding::up}) {
    ASSERT_EQ(f32_to_e8m0(x, r), e8m0_reference(x, r))
        << (r == ScaleRounding::up ? "up" : "down") << " of " << x << " (f32 bits 0x" << std::hex
        << f32_bits(x) << ")";
  }
}

TEST(E8M0, EncodeRoundsUpOrDownToAPowerOfTwo) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) check_e8m0(bf16_to_f32(static_cast<uint16_t>(b)));
  // f32 subnormals (below the E8M0 range), the ends of the range and their neighbours.
  for (uint32_t u : {0x1u, 0x3u, 0x200000u, 0x3FFFFFu, 0x400000u, 0x400001u, 0x7FFFFFu, 0x800000u,
                     0x7F000000u, 0x7F000001u, 0x7F7FFFFFu, 0x3F800001u}) {
    check_e8m0(f32_from_bits(u));
  }
  testing::Rng rng(testing::fresh_seed());
  for (int i = 0; i < 1'000'000; ++i) check_e8m0(f32_from_bits(static_cast<uint32_t>(rng())));
  // Spec facts: 1 = 2^0 is code 127; 3 is between 2^1 and 2^2.
  EXPECT_EQ(f32_to_e8m0(1.0f, ScaleRounding::down), 127);
  EXPECT_EQ(f32_to_e8m0(3.0f, ScaleRounding::down), 128);
  EXPECT_EQ(f32_to_e8m0(3.0f, ScaleRounding::up), 129);
  EXPECT_EQ(f32_to_e8m0(0.0f, ScaleRounding::up), 0xFF);
  EXPECT_EQ(f32_to_e8m0(-2.0f, ScaleRounding::up), 0xFF);
  EXPECT_EQ(f32_to_e8m0(NAN, ScaleRounding::down), 0xFF);
}

TEST(E8M0, EveryCodeDecodesToAPowerOfTwoAndFFIsNaN) {
  for (int e = 0; e < 255; ++e) {
    const float x = e8m0_to_f32(static_cast<uint8_t>(e));
    EXPECT_EQ(static_cast<double>(x), std::ldexp(1.0, e - 127)) << e;
    // Decoding then encoding either way gives the code back.
    EXPECT_EQ(f32_to_e8m0(x, ScaleRounding::down), e);
    EXPECT_EQ(f32_to_e8m0(x, ScaleRounding::up), e);
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

}  // namespace
}  // namespace octet
