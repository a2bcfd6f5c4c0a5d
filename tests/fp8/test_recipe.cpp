// tests/fp8/test_recipe.cpp: recipe names, formats, grids and the scale-from-amax formulas.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "kernels/quantize.h"
#include "testing.h"

namespace octet {
namespace {

using fp8::FormatPolicy;
using fp8::Recipe;
using fp8::Role;
using fp8::ScalingMode;
using kernels::ScaleGrid;

constexpr Role kRoles[] = {Role::activation, Role::weight, Role::gradient};
const char* role_name(Role r) {
  return r == Role::activation ? "activation" : r == Role::weight ? "weight" : "gradient";
}

using testing::error_of;

TEST(Recipe, EveryModeOfTheTableParsesToItselfWithDefaultKnobs) {
  ASSERT_EQ(fp8::scaling_modes().size(), 5u);
  for (const fp8::ScalingModeInfo& m : fp8::scaling_modes()) {
    SCOPED_TRACE(m.name);
    const Recipe r = Recipe::parse(m.name);
    EXPECT_EQ(r.mode, m.mode);
    EXPECT_EQ(r.formats, m.formats);
    EXPECT_EQ(Recipe::defaults(m.mode), r);
    EXPECT_FALSE(r.power_of_two_scales);
    EXPECT_EQ(r.delayed, fp8::DelayedScaling{});
    EXPECT_EQ(r.stateful(), m.mode == ScalingMode::tensor_delayed);
    EXPECT_EQ(std::string(fp8::scaling_mode_name(m.mode)), m.name);
    EXPECT_EQ(fp8::scaling_mode_from_name(m.name), m.mode);
    EXPECT_EQ(r.str(), m.name);  // defaults are left out
    // Both formats stay reachable from every mode; the one that is not the default is named.
    const Recipe hybrid = Recipe::parse(std::string(m.name) + ":hybrid");
    const Recipe e4m3 = Recipe::parse(std::string(m.name) + ":e4m3");
    EXPECT_EQ(hybrid.mode, m.mode);
    EXPECT_EQ(e4m3.mode, m.mode);
    EXPECT_EQ(hybrid.formats, FormatPolicy::hybrid);
    EXPECT_EQ(e4m3.formats, FormatPolicy::e4m3);
    EXPECT_EQ(hybrid.format(fp8::Role::gradient), DType::e5m2);
    EXPECT_EQ(e4m3.format(fp8::Role::gradient), DType::e4m3);
    const bool hybrid_default = m.formats == FormatPolicy::hybrid;
    EXPECT_EQ(hybrid.str(), hybrid_default ? std::string(m.name) : std::string(m.name) + ":hybrid");
    EXPECT_EQ(e4m3.str(), hybrid_default ? std::string(m.name) + ":e4m3" : std::string(m.name));
    EXPECT_NE(fp8::recipe_syntax("  ").find(m.name), std::string::npos);
  }
  EXPECT_EQ(fp8::scaling_mode_list("|"), "tensor-current|tensor-delayed|row|block|mx");
  EXPECT_EQ(Recipe::parse("block:pow2:hybrid").str(), "block:hybrid:pow2");
  EXPECT_EQ(Recipe::parse("tensor-current:pow2:e4m3").str(), "tensor-current:e4m3:pow2");
  // The per-mode formats of docs/numerics.md: E4M3 everywhere under the fine-grained scales.
  EXPECT_EQ(fp8::scaling_mode_info(ScalingMode::tensor_current).formats, FormatPolicy::hybrid);
  EXPECT_EQ(fp8::scaling_mode_info(ScalingMode::tensor_delayed).formats, FormatPolicy::hybrid);
  EXPECT_EQ(fp8::scaling_mode_info(ScalingMode::row).formats, FormatPolicy::e4m3);
  EXPECT_EQ(fp8::scaling_mode_info(ScalingMode::block).formats, FormatPolicy::e4m3);
  EXPECT_EQ(fp8::scaling_mode_info(ScalingMode::mx).formats, FormatPolicy::e4m3);
  EXPECT_NE(fp8::recipe_syntax("").find("e4m3 for row, block, mx"), std::string::npos);
  // Delayed scaling starts from Transformer Engine's defaults: 1024 steps, max, margin 0.
  const Recipe delayed = Recipe::parse("tensor-delayed");
  EXPECT_EQ(delayed.delayed.history_len, 1024);
  EXPECT_EQ(delayed.delayed.compute, fp8::AmaxCompute::max);
  EXPECT_EQ(delayed.delayed.margin, 0);
  const Recipe knobs = Recipe::parse("tensor-delayed:amax=most-recent:margin=2:history=16");
  EXPECT_EQ(knobs.delayed.history_len, 16);
  EXPECT_EQ(knobs.delayed.compute, fp8::AmaxCompute::most_recent);
  EXPECT_EQ(knobs.delayed.margin, 2);
  EXPECT_EQ(knobs.str(), "tensor-delayed:history=16:margin=2:amax=most-recent");
}

// Every mode under every combination of knobs it takes: parse(str(r)) == r.
TEST(Recipe, TextFormRoundTripsForEveryModeAndKnob) {
  int checked = 0;
  for (const fp8::ScalingModeInfo& m : fp8::scaling_modes()) {
    for (FormatPolicy formats : {FormatPolicy::hybrid, FormatPolicy::e4m3}) {
      for (bool pow2 : {false, true}) {
        for (int history : {1, 16, 1024}) {
          for (int margin : {0, 3}) {
            for (fp8::AmaxCompute compute :
                 {fp8::AmaxCompute::max, fp8::AmaxCompute::most_recent}) {
              Recipe r;
              r.mode = m.mode;
              r.formats = formats;
              r.power_of_two_scales = pow2;
              if (m.mode == ScalingMode::tensor_delayed) {
                r.delayed = {.history_len = history, .compute = compute, .margin = margin};
              }
              SCOPED_TRACE(r.str());
              EXPECT_EQ(Recipe::parse(r.str()), r);
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 2 * 2 * 3 * 2 * 2);
}

TEST(Recipe, BadNamesAreRefusedWithTheNamesThatExist) {
  for (const char* bad : {"", "tensor", "Row", "block-wise", "mxfp8", ":e4m3", " row", "row "}) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    const std::string msg = error_of([&] { Recipe::parse(bad); });
    EXPECT_EQ(msg.rfind("[recipe] unknown scaling mode", 0), 0u) << msg;
    EXPECT_NE(msg.find("expected tensor-current, tensor-delayed, row, block or mx"),
              std::string::npos)
        << msg;
  }
  for (const char* bad : {"row:", "row:e5m2", "mx:E4M3", "row:e4m3 ", "block:/hybrid",
                          "tensor-delayed:amax=min", "tensor-delayed:history"}) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    const std::string msg = error_of([&] { Recipe::parse(bad); });
    EXPECT_EQ(msg.rfind("[recipe] unknown option", 0), 0u) << msg;
    EXPECT_NE(msg.find(std::string("in '") + bad +
                       "'; expected hybrid, e4m3, pow2, history=N, margin=N, "
                       "amax=max|most-recent or bf16=G[+G...]"),
              std::string::npos)
        << msg;
  }
  const std::pair<const char*, const char*> refused[] = {
      {"block:hybrid:e4m3", "[recipe] 'e4m3' is given twice in 'block:hybrid:e4m3'"},
      {"row:pow2:pow2", "[recipe] 'pow2' is given twice"},
      {"row:history=16", "[recipe] 'history' in 'row:history=16' applies only to tensor-delayed"},
      {"mx:amax=max", "applies only to tensor-delayed scaling"},
      {"tensor-delayed:history=0",
       "[recipe] history=0 in 'tensor-delayed:history=0': expected "
       "an integer >= 1"},
      {"tensor-delayed:margin=-1",
       "margin=-1 in 'tensor-delayed:margin=-1': expected an "
       "integer >= 0"},
      {"tensor-delayed:history=8x", "history=8x"},
  };
  for (const auto& [bad, want] : refused) {
    const std::string msg = error_of([&] { Recipe::parse(bad); });
    EXPECT_NE(msg.find(want), std::string::npos) << bad << ": " << msg;
  }
}

// bf16=G[+G...] (attribution): the GEMMs named, printed in one order, each at most once.
TEST(Recipe, Bf16GemmsParseToTheirBitsAndPrintInOneOrder) {
  const Recipe r = Recipe::parse("tensor-current:bf16=wgrad+forward:e4m3");
  EXPECT_TRUE(r.in_bf16(fp8::Gemm::forward));
  EXPECT_FALSE(r.in_bf16(fp8::Gemm::dgrad));
  EXPECT_TRUE(r.in_bf16(fp8::Gemm::wgrad));
  EXPECT_EQ(r.formats, FormatPolicy::e4m3);
  EXPECT_EQ(r.str(), "tensor-current:e4m3:bf16=forward+wgrad");
  EXPECT_EQ(Recipe::parse("block").bf16_gemms, 0);
  for (unsigned char bits = 1; bits < 8; ++bits) {
    for (const fp8::ScalingModeInfo& m : fp8::scaling_modes()) {
      Recipe want = Recipe::defaults(m.mode);
      want.bf16_gemms = bits;
      SCOPED_TRACE(want.str());
      EXPECT_EQ(Recipe::parse(want.str()), want);
    }
  }
  for (const char* bad : {"row:bf16=", "row:bf16=fwd", "row:bf16=dgrad+", "row:bf16=dgrad+dgrad",
                          "row:bf16=+wgrad", "row:bf16=Dgrad"}) {
    const std::string msg = error_of([&] { Recipe::parse(bad); });
    EXPECT_NE(msg.find(std::string("[recipe] bf16=") + (std::strchr(bad, '=') + 1) + " in '" + bad +
                       "': expected forward, dgrad and wgrad joined by '+', each once"),
              std::string::npos)
        << bad << ": " << msg;
  }
  EXPECT_NE(
      error_of([] { Recipe::parse("mx:bf16=dgrad:bf16=wgrad"); }).find("'bf16' is given twice"),
      std::string::npos);
  EXPECT_NE(fp8::recipe_syntax("").find("bf16=G[+G...]"), std::string::npos);
}

TEST(Recipe, HybridQuantizesOnlyGradientsToE5M2) {
  for (const fp8::ScalingModeInfo& m : fp8::scaling_modes()) {
    const Recipe hybrid = Recipe::parse(std::string(m.name) + ":hybrid");
    const Recipe e4m3 = Recipe::parse(std::string(m.name) + ":e4m3");
    for (Role role : kRoles) {
      SCOPED_TRACE(std::string(m.name) + " " + role_name(role));
      EXPECT_EQ(hybrid.format(role), role == Role::gradient ? DType::e5m2 : DType::e4m3);
      EXPECT_EQ(e4m3.format(role), DType::e4m3);
    }
  }
}

TEST(Recipe, EachModeHasTheScaleGridOfItsDesign) {
  // DESIGN.md: per tensor; one scale per row; 1x128 tiles for activations and gradients and
  // 128x128 blocks for weights (DeepSeek-V3); 1x32 blocks with E8M0 scales (OCP MX).
  const struct {
    const char* name;
    ScaleGrid activation, weight, gradient;
  } expected[] = {
      {"tensor-current", {0, 0, false}, {0, 0, false}, {0, 0, false}},
      {"tensor-delayed", {0, 0, false}, {0, 0, false}, {0, 0, false}},
      {"row", {1, 0, false}, {1, 0, false}, {1, 0, false}},
      {"block", {1, 128, false}, {128, 128, false}, {1, 128, false}},
      {"mx", {1, 32, true}, {1, 32, true}, {1, 32, true}},
  };
  ASSERT_EQ(std::size(expected), fp8::scaling_modes().size()) << "a mode without its grid here";
  for (const auto& e : expected) {
    for (const char* suffix : {"", ":e4m3"}) {
      const Recipe r = fp8::Recipe::parse(std::string(e.name) + suffix);
      SCOPED_TRACE(r.str());
      EXPECT_EQ(r.grid(Role::activation), e.activation);
      EXPECT_EQ(r.grid(Role::weight), e.weight);
      EXPECT_EQ(r.grid(Role::gradient), e.gradient);
    }
  }
}

// ---- kernels::scale_from_amax ----

constexpr float kFp8Max[] = {448.0f, 57344.0f};  // E4M3, E5M2

TEST(ScaleFromAmax, ZeroAndNonFiniteAmaxGiveOne) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float max : kFp8Max) {
    for (float amax : {0.0f, -0.0f, std::nanf(""), inf, -inf, -3.0f}) {
      for (int margin : {0, 2}) {
        for (bool pow2 : {false, true}) {
          EXPECT_EQ(kernels::scale_from_amax(amax, max, margin, pow2), 1.0f)
              << "amax " << amax << " max " << max << " margin " << margin << " pow2 " << pow2;
        }
      }
    }
  }
}

TEST(ScaleFromAmax, ATinyAmaxGivesFltMaxNotInfinity) {
  // 448 / 2^-149 = 2^157.8 overflows float: the scale is clamped to FLT_MAX (2^127 as a power
  // of two), so amax * scale stays finite.
  for (float max : kFp8Max) {
    for (float amax : {0x1p-149f, 1e-40f, 0x1p-126f, 448.0f / FLT_MAX * 0.5f}) {
      for (int margin : {0, 1}) {
        SCOPED_TRACE("amax " + std::to_string(amax) + " margin " + std::to_string(margin));
        const double exact = double{max} / amax / std::ldexp(1.0, margin);
        if (exact <= FLT_MAX) continue;  // a borderline case that fits
        EXPECT_EQ(kernels::scale_from_amax(amax, max, margin, false), FLT_MAX);
        EXPECT_EQ(kernels::scale_from_amax(amax, max, margin, true), 0x1p127f);
      }
    }
  }
}

// Log-uniform amaxes over 2^-100..2^100 plus the boundaries fp8_max * 2^j and their float
// neighbours, where the power-of-two rounding changes its answer.
std::vector<float> amaxes(float fp8_max, testing::Rng& rng) {
  std::vector<float> v;
  std::uniform_real_distribution<double> log2(-100.0, 100.0);
  for (int i = 0; i < 2000; ++i) v.push_back(static_cast<float>(std::exp2(log2(rng))));
  for (int j = -90; j <= 90; j += 7) {
    const float edge = std::ldexp(fp8_max, j);
    v.push_back(edge);
    v.push_back(std::nextafter(edge, 0.0f));
    v.push_back(std::nextafter(edge, INFINITY));
    v.push_back(std::ldexp(1.0f, j));  // powers of two
    v.push_back(std::nextafter(std::ldexp(1.0f, j), INFINITY));
  }
  return v;
}

TEST(ScaleFromAmax, IsFp8MaxOverAmaxOverTwoToTheMarginRoundedOnce) {
  testing::Rng rng(testing::fresh_seed());
  for (float max : kFp8Max) {
    for (float amax : amaxes(max, rng)) {
      for (int margin : {0, 1, 3}) {
        const double exact = double{max} / amax / std::ldexp(1.0, margin);
        const float scale = kernels::scale_from_amax(amax, max, margin, false);
        // One rounding of the f32 division (the 2^-margin factor is exact for these normal
        // scales): |scale - exact| <= 2^-24 exact.
        ASSERT_LE(std::abs(scale - exact), 0x1p-24 * exact)
            << "amax " << amax << " max " << max << " margin " << margin;
      }
    }
  }
}

TEST(ScaleFromAmax, PowerOfTwoRoundsDownSoNothingSaturates) {
  testing::Rng rng(testing::fresh_seed());
  for (float max : kFp8Max) {
    for (float amax : amaxes(max, rng)) {
      for (int margin : {0, 1, 3}) {
        const double exact = double{max} / amax / std::ldexp(1.0, margin);
        const float scale = kernels::scale_from_amax(amax, max, margin, true);
        uint32_t bits;
        std::memcpy(&bits, &scale, 4);
        SCOPED_TRACE("amax " + std::to_string(amax) + " max " + std::to_string(max) + " margin " +
                     std::to_string(margin));
        ASSERT_EQ(bits & 0x807FFFFFu, 0u) << scale << " is not a positive power of two";
        // The largest power of two <= exact: amax * scale <= fp8_max / 2^margin.
        ASSERT_LE(scale, exact);
        ASSERT_GT(scale, exact / 2);
      }
    }
  }
}

// ---- kernels::e8m0_scale_inv_from_amax ----

// The smallest E8M0 code e (scale_inv 2^(e-127)) with amax / scale_inv <= fp8_max, by trying
// them all in float64 (dividing by a power of two is exact there).
int brute_force_e8m0(float amax, float fp8_max) {
  for (int e = 0; e <= 254; ++e) {
    if (double{amax} / std::ldexp(1.0, e - 127) <= fp8_max) return e;
  }
  return -1;  // unreachable: amax / 2^127 < 2
}

TEST(E8m0ScaleInvFromAmax, IsTheSmallestPowerOfTwoThatFitsAmaxIntoTheFormat) {
  testing::Rng rng(testing::fresh_seed());
  for (float max : kFp8Max) {
    std::vector<float> v = amaxes(max, rng);
    // The whole float range: subnormal amaxes, the ends of the E8M0 range and FLT_MAX.
    std::uniform_real_distribution<double> log2(-149.0, 128.0);
    for (int i = 0; i < 2000; ++i) v.push_back(static_cast<float>(std::exp2(log2(rng))));
    for (float x :
         {0x1p-149f, 0x1p-127f, 0x1p-126f, std::nextafter(0x1p-126f, 0.0f), 1.0f, max, FLT_MAX,
          std::ldexp(max, 119), std::nextafter(std::ldexp(max, 119), INFINITY)}) {
      v.push_back(x);
    }
    for (float amax : v) {
      if (!std::isfinite(amax) || amax == 0.0f) continue;  // over- or underflowed draws
      const int want = brute_force_e8m0(amax, max);
      const int got = kernels::e8m0_scale_inv_from_amax(amax, max);
      ASSERT_EQ(got, want) << "amax " << amax << " (" << std::hexfloat << amax << ") max "
                           << std::defaultfloat << max;
      // What it promises the quantizer: no block overflows.
      ASSERT_LE(double{amax} / e8m0_to_f32(static_cast<uint8_t>(got)), max);
    }
  }
}

TEST(E8m0ScaleInvFromAmax, ZeroAndNonFiniteAmaxGiveTwoToTheZero) {
  for (float max : kFp8Max) {
    for (float amax : {0.0f, -0.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
      EXPECT_EQ(kernels::e8m0_scale_inv_from_amax(amax, max), 127) << amax;
    }
  }
}

}  // namespace
}  // namespace octet
