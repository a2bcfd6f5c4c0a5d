// tests/core/test_convert.cpp: the scalar FP8 conversions of core/convert.h against
// the independent float64 model in convert_reference.h: every f16 and bf16 input,
// every code, the ties and boundaries of the OCP OFP8 spec, and random f32 values.
// Conversions are exact, so every comparison is bit for bit (no tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "convert_reference.h"
#include "core/convert.h"
#include "core/error.h"
#include "testing.h"

namespace octet {
namespace {

using testing::kRefBF16;
using testing::kRefE4M3;
using testing::kRefE5M2;
using testing::kRefF16;
using testing::RefFormat;

struct Fp8Case {
  const char* name;
  DType dtype;
  const RefFormat* ref;
};
const Fp8Case kFormats[] = {{"e4m3", DType::e4m3, &kRefE4M3}, {"e5m2", DType::e5m2, &kRefE5M2}};
const Overflow kModes[] = {Overflow::saturate, Overflow::nonfinite};

uint8_t encode(const Fp8Case& f, float x, Overflow mode) {
  return f.dtype == DType::e4m3 ? f32_to_e4m3(x, mode) : f32_to_e5m2(x, mode);
}
uint8_t expected(const Fp8Case& f, double x, Overflow mode) {
  return static_cast<uint8_t>(f.ref->encode(x, mode == Overflow::saturate));
}
const char* mode_name(Overflow mode) {
  return mode == Overflow::saturate ? "saturate" : "nonfinite";
}
// Checks one f32 input in both formats and both modes; returns false on the
// first mismatch so that loops over millions of inputs stop early.
bool encodes_like_reference(float x) {
  for (const Fp8Case& f : kFormats) {
    for (Overflow mode : kModes) {
      const uint8_t got = encode(f, x, mode), want = expected(f, x, mode);
      if (got != want) {
        ADD_FAILURE() << f.name << " " << mode_name(mode) << " of " << x << " (f32 bits 0x"
                      << std::hex << f32_bits(x) << "): got 0x" << int{got} << ", want 0x"
                      << int{want};
        return false;
      }
    }
  }
  return true;
}

// ---- whole input spaces -----------------------------------------------------

TEST(Fp8Encode, EveryF16InputRoundsLikeTheFloat64Model) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const double value = kRefF16.decode(h);
    const float x = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(x)) << std::hex << h;
      ASSERT_EQ(std::signbit(x), std::signbit(f32_from_bits(h << 16))) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(x), value) << "f16_to_f32 of 0x" << std::hex << h;
    }
    // Encode through the reference from the f16 value itself, so that the
    // check does not rest on f16_to_f32.
    for (const Fp8Case& f : kFormats) {
      for (Overflow mode : kModes) {
        const double in = std::isnan(value) ? std::copysign(NAN, (h & 0x8000) ? -1.0 : 1.0) : value;
        ASSERT_EQ(encode(f, x, mode), expected(f, in, mode))
            << f.name << " " << mode_name(mode) << " of f16 0x" << std::hex << h;
      }
    }
  }
}

TEST(Fp8Encode, EveryBF16InputRoundsLikeTheFloat64Model) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const double value = kRefBF16.decode(b);
    const float x = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(x)) << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(x), value) << "bf16_to_f32 of 0x" << std::hex << b;
    }
    for (const Fp8Case& f : kFormats) {
      for (Overflow mode : kModes) {
        const double in = std::isnan(value) ? std::copysign(NAN, (b & 0x8000) ? -1.0 : 1.0) : value;
        ASSERT_EQ(encode(f, x, mode), expected(f, in, mode))
            << f.name << " " << mode_name(mode) << " of bf16 0x" << std::hex << b;
      }
    }
  }
}

TEST(Fp8Decode, EveryCodeDecodesToItsFieldValue) {
  for (const Fp8Case& f : kFormats) {
    for (uint32_t v = 0; v < 256; ++v) {
      const auto code = static_cast<uint8_t>(v);
      const float got = fp8_to_f32(code, f.dtype);
      EXPECT_EQ(f32_bits(got),
                f32_bits(f.dtype == DType::e4m3 ? e4m3_to_f32(code) : e5m2_to_f32(code)));
      const double want = f.ref->decode(v);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " 0x" << std::hex << v;
        EXPECT_EQ(std::signbit(got), (v & 0x80) != 0) << f.name << " 0x" << std::hex << v;
      } else {
        // Compare bits so that -0 is told from +0.
        EXPECT_EQ(f32_bits(got), f32_bits(static_cast<float>(want)))
            << f.name << " 0x" << std::hex << v;
      }
    }
  }
}

TEST(Fp8Decode, EveryCodeRoundTripsThroughF32BF16AndF16) {
  // Every FP8 value is exact in bf16 and f16, so each path must give the code back.
  for (const Fp8Case& f : kFormats) {
    for (uint32_t v = 0; v < 256; ++v) {
      const auto code = static_cast<uint8_t>(v);
      if (f.ref->is_nan(v)) continue;
      const float x = fp8_to_f32(code, f.dtype);
      const float via_bf16 = bf16_to_f32(f32_to_bf16(x));
      const float via_f16 = f16_to_f32(f32_to_f16(x));
      EXPECT_EQ(f32_bits(via_bf16), f32_bits(x)) << f.name << " 0x" << std::hex << v;
      EXPECT_EQ(f32_bits(via_f16), f32_bits(x)) << f.name << " 0x" << std::hex << v;
      for (Overflow mode : kModes) {
        // An infinity saturates to ±max in saturating mode; everything else returns.
        const bool inf = std::isinf(x);
        const uint8_t want = inf && mode == Overflow::saturate
                                 ? static_cast<uint8_t>((v & 0x80) | f.ref->max_code())
                                 : code;
        for (float y : {x, via_bf16, via_f16}) {
          EXPECT_EQ(encode(f, y, mode), want)
              << f.name << " " << mode_name(mode) << " 0x" << std::hex << v;
        }
        EXPECT_EQ(f32_to_fp8(x, f.dtype, mode), want);
      }
    }
  }
}

// ---- ties, boundaries and special values -------------------------------------

// Between every two neighbouring finite codes k, k+1 (subnormal, normal and
// across the subnormal/normal boundary): the midpoint goes to the even code,
// one f32 ulp below it to k and one above to k+1; the same mirrored for negatives.
void check_every_midpoint(const Fp8Case& f) {
  const RefFormat& ref = *f.ref;
  for (uint32_t k = 0; k < ref.max_code(); ++k) {
    const auto mid = static_cast<float>((ref.decode(k) + ref.decode(k + 1)) / 2);
    ASSERT_EQ(static_cast<double>(mid), (ref.decode(k) + ref.decode(k + 1)) / 2);  // exact
    const uint32_t even = k % 2 == 0 ? k : k + 1;
    for (Overflow mode : kModes) {
      for (uint32_t sign : {0u, 0x80u}) {
        const float s = sign ? -1.0f : 1.0f;
        EXPECT_EQ(encode(f, s * mid, mode), sign | even)
            << f.name << " tie above 0x" << std::hex << k;
        EXPECT_EQ(encode(f, s * std::nextafter(mid, 0.0f), mode), sign | k)
            << f.name << " below the midpoint above 0x" << std::hex << k;
        EXPECT_EQ(encode(f, s * std::nextafter(mid, INFINITY), mode), sign | (k + 1))
            << f.name << " above the midpoint above 0x" << std::hex << k;
      }
    }
  }
}

TEST(Fp8Encode, E4M3RoundsTiesToEven) {
  check_every_midpoint(kFormats[0]);
}
TEST(Fp8Encode, E5M2RoundsTiesToEven) {
  check_every_midpoint(kFormats[1]);
}

TEST(Fp8Encode, E4M3TieAtMaxRoundsDownAndAboveItOverflows) {
  // Spec facts: max 448 = S.1111.110, the next step would be 480, the tie 464
  // goes to the even mantissa 110 (448); anything above 464 overflows.
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);
  for (Overflow mode : kModes) {
    EXPECT_EQ(f32_to_e4m3(464.0f, mode), 0x7E);
    EXPECT_EQ(f32_to_e4m3(-464.0f, mode), 0xFE);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(464.0f, 0.0f), mode), 0x7E);
  }
  const float above = std::nextafter(464.0f, INFINITY);
  EXPECT_EQ(f32_to_e4m3(above, Overflow::saturate), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-above, Overflow::saturate), 0xFE);
  EXPECT_EQ(f32_to_e4m3(above, Overflow::nonfinite), 0x7F);  // NaN: E4M3 has no Inf
  EXPECT_EQ(f32_to_e4m3(-above, Overflow::nonfinite), 0xFF);
  EXPECT_EQ(f32_to_e4m3(480.0f, Overflow::nonfinite), 0x7F);
  EXPECT_EQ(f32_to_e4m3(3.0e38f, Overflow::saturate), 0x7E);
}

TEST(Fp8Encode, E5M2TieAtMaxOverflowsAndBelowItRoundsToMax) {
  // Spec facts: max 57344 = S.11110.11 (odd mantissa), the next step would be
  // 65536 (even), so the tie 61440 overflows and anything below it rounds to max.
  EXPECT_EQ(f32_to_e5m2(57344.0f), 0x7B);
  const float below = std::nextafter(61440.0f, 0.0f);
  for (Overflow mode : kModes) {
    EXPECT_EQ(f32_to_e5m2(below, mode), 0x7B);
    EXPECT_EQ(f32_to_e5m2(-below, mode), 0xFB);
  }
  for (float x : {61440.0f, std::nextafter(61440.0f, INFINITY), 65536.0f, 3.0e38f}) {
    EXPECT_EQ(f32_to_e5m2(x, Overflow::saturate), 0x7B) << x;
    EXPECT_EQ(f32_to_e5m2(-x, Overflow::saturate), 0xFB) << x;
    EXPECT_EQ(f32_to_e5m2(x, Overflow::nonfinite), 0x7C) << x;  // +Inf
    EXPECT_EQ(f32_to_e5m2(-x, Overflow::nonfinite), 0xFC) << x;
  }
}

TEST(Fp8Encode, HalfTheSmallestSubnormalRoundsToZeroAndJustAboveRoundsUp) {
  for (const Fp8Case& f : kFormats) {
    const auto smallest = static_cast<float>(dtype_info(f.dtype).min_subnormal);
    ASSERT_EQ(static_cast<double>(smallest), f.ref->decode(1));
    for (Overflow mode : kModes) {
      EXPECT_EQ(encode(f, smallest, mode), 0x01) << f.name;
      EXPECT_EQ(encode(f, -smallest, mode), 0x81) << f.name;
      EXPECT_EQ(encode(f, smallest / 2, mode), 0x00) << f.name;  // tie to the even code 0
      EXPECT_EQ(encode(f, -smallest / 2, mode), 0x80) << f.name;
      EXPECT_EQ(encode(f, std::nextafter(smallest / 2, 1.0f), mode), 0x01) << f.name;
      EXPECT_EQ(encode(f, std::nextafter(smallest / 2, -1.0f), mode), 0x00) << f.name;
      EXPECT_EQ(encode(f, f32_from_bits(1), mode), 0x00) << f.name;  // f32 subnormals
      EXPECT_EQ(encode(f, -f32_from_bits(1), mode), 0x80) << f.name;
    }
  }
}

TEST(Fp8Encode, SubnormalNormalBoundaryIsExact) {
  for (const Fp8Case& f : kFormats) {
    const auto min_normal = static_cast<float>(dtype_info(f.dtype).min_normal);
    const uint32_t first_normal = 1u << dtype_info(f.dtype).mantissa_bits;
    ASSERT_EQ(static_cast<double>(min_normal), f.ref->decode(first_normal));
    for (Overflow mode : kModes) {
      EXPECT_EQ(encode(f, min_normal, mode), first_normal) << f.name;
      // One f32 ulp below the smallest normal is still nearest to it.
      EXPECT_EQ(encode(f, std::nextafter(min_normal, 0.0f), mode), first_normal) << f.name;
      const auto largest_subnormal = static_cast<float>(f.ref->decode(first_normal - 1));
      EXPECT_EQ(encode(f, largest_subnormal, mode), first_normal - 1) << f.name;
      EXPECT_EQ(encode(f, -std::nextafter(largest_subnormal, 1.0f), mode),
                0x80 | (first_normal - 1))
          << f.name;
    }
  }
}

TEST(Fp8Encode, ZerosInfinitiesAndNaNsFollowTheSpec) {
  for (const Fp8Case& f : kFormats) {
    const uint32_t max = f.ref->max_code(), nan = f.ref->nan_code();
    // E4M3 has no Inf: a non-saturated infinity is NaN; E5M2 keeps it.
    const uint32_t inf = f.dtype == DType::e4m3 ? nan : f.ref->inf_code();
    for (Overflow mode : kModes) {
      EXPECT_EQ(encode(f, 0.0f, mode), 0x00) << f.name;
      EXPECT_EQ(encode(f, -0.0f, mode), 0x80) << f.name;
      const uint32_t overflowed = mode == Overflow::saturate ? max : inf;
      EXPECT_EQ(encode(f, INFINITY, mode), overflowed) << f.name;
      EXPECT_EQ(encode(f, -INFINITY, mode), 0x80 | overflowed) << f.name;
      EXPECT_EQ(encode(f, std::numeric_limits<float>::max(), mode), overflowed) << f.name;
      // Quiet and signalling NaNs with assorted payloads keep their sign.
      for (uint32_t payload : {0x400000u, 0x000001u, 0x7FFFFFu, 0x200000u, 0x000100u, 0x3FFFFFu}) {
        EXPECT_EQ(encode(f, f32_from_bits(0x7F800000u | payload), mode), nan)
            << f.name << " payload 0x" << std::hex << payload;
        EXPECT_EQ(encode(f, f32_from_bits(0xFF800000u | payload), mode), 0x80 | nan)
            << f.name << " payload 0x" << std::hex << payload;
      }
    }
  }
  // The codes themselves (spec facts, ml_dtypes 0.6 NaN codes).
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-NAN), 0xFF);
  EXPECT_EQ(f32_to_e5m2(NAN), 0x7E);
  EXPECT_EQ(f32_to_e5m2(-NAN), 0xFE);
  EXPECT_EQ(f32_to_e5m2(INFINITY, Overflow::nonfinite), 0x7C);
}

TEST(Fp8Encode, RuntimeFormatChoiceRejectsNonFp8DTypes) {
  EXPECT_EQ(f32_to_fp8(1.5f, DType::e4m3), f32_to_e4m3(1.5f));
  EXPECT_EQ(f32_to_fp8(1.5f, DType::e5m2, Overflow::nonfinite), f32_to_e5m2(1.5f));
  for (DType bad : {DType::bf16, DType::f32, DType::e8m0, DType::u8}) {
    try {
      f32_to_fp8(1.0f, bad);
      ADD_FAILURE() << "f32_to_fp8 accepted " << dtype_name(bad);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[convert]"), std::string::npos) << e.what();
    }
    EXPECT_THROW(fp8_to_f32(0x38, bad), Error);
  }
}

// ---- random inputs ---------------------------------------------------------

TEST(Fp8Encode, RandomF32BitPatternsRoundLikeTheFloat64Model) {
  testing::Rng rng(testing::fresh_seed());
  for (int i = 0; i < 2'000'000; ++i) {
    if (!encodes_like_reference(f32_from_bits(static_cast<uint32_t>(rng())))) return;
  }
}

TEST(Fp8Encode, RandomF32ValuesOverTheFp8RangeRoundLikeTheFloat64Model) {
  // Log-uniform from below half the smallest E5M2 subnormal (2^-17) to beyond
  // the E5M2 overflow boundary (2^16): every binade of both formats and both ends.
  testing::Rng rng(testing::fresh_seed());
  for (int i = 0; i < 2'000'000; ++i) {
    if (!encodes_like_reference(testing::log_uniform_f32(rng, -19.0, 17.0))) return;
  }
}

}  // namespace
}  // namespace octet
