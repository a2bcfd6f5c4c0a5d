// tests/kernels/test_fp8_scale.cpp: kernels::fp8_scales_from_amax against a float64
// reference of the scale formula (amax 0 and non-finite, overflow, powers of two) on every
// device, and its errors.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/fp8_scale.h"
#include "layer_testing.h"

namespace octet {
namespace {

class Fp8ScalesOnDevice : public ::testing::TestWithParam<Device> {};

// The formula in float64: fp8_max / amax (one fp32 division: the double quotient rounded to
// float is the correctly rounded one), 1 for amax 0 or non-finite, capped at FLT_MAX, then
// rounded down to a power of two when asked; scale_inv = 1 / scale rounded once.
float reference_scale(double amax, double fp8_max, bool power_of_two) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1.0f;
  double scale = static_cast<float>(fp8_max / amax);
  if (scale > FLT_MAX) scale = FLT_MAX;
  if (power_of_two) scale = std::exp2(std::floor(std::log2(scale)));
  return static_cast<float>(scale);
}

TEST_P(Fp8ScalesOnDevice, AreScaleFromAmaxWithoutAReadBack) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> amax = {0,     1,    3.5,   448,     57344, 1e-30, 1e30,
                                    1e-38, 3e38, 0.001, 0x1p-20, 7.25,  inf,   -inf};
  const int64_t n = static_cast<int64_t>(amax.size()) + 1;  // and a NaN
  for (float fp8_max : {448.0f, 57344.0f}) {
    for (bool pow2 : {false, true}) {
      const std::string what = "fp8_max " + std::to_string(fp8_max) + (pow2 ? " pow2" : "");
      std::vector<double> values = amax;
      values.push_back(std::nan(""));
      const auto a = testing::upload(device, DType::f32, {n}, values);
      const auto s = testing::upload(device, DType::f32, {n}, std::vector<double>(n, -1.0));
      const auto si = testing::upload(device, DType::f32, {n}, std::vector<double>(n, -1.0));
      kernels::fp8_scales_from_amax(a.tensor, s.tensor, si.tensor, fp8_max, pow2);
      const std::vector<double> scale = testing::download(s.tensor);
      const std::vector<double> scale_inv = testing::download(si.tensor);
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        const float want = reference_scale(values[k], fp8_max, pow2);
        EXPECT_EQ(scale[k], want) << what << ", amax " << values[k];
        EXPECT_EQ(scale_inv[k], static_cast<float>(1.0 / want)) << what << ", amax " << values[k];
        if (pow2) {
          EXPECT_EQ(scale[k] * scale_inv[k], 1.0) << what << ": exact inverse";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Fp8ScalesOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(Fp8ScalesErrors, SizesDtypesAndMaxAreChecked) {
  std::vector<float> a(3, 1.0f), s(3), si(2);
  const Tensor at(a.data(), DType::f32, {3}), st(s.data(), DType::f32, {3});
  EXPECT_THROW(kernels::fp8_scales_from_amax(at, st, Tensor(si.data(), DType::f32, {2}), 448, true),
               Error);
  EXPECT_THROW(kernels::fp8_scales_from_amax(at, st, Tensor(s.data(), DType::bf16, {3}), 448, true),
               Error);
  EXPECT_THROW(kernels::fp8_scales_from_amax(at, st, st, 0.0f, true), Error);
}

}  // namespace
}  // namespace octet
