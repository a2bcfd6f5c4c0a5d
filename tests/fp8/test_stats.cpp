// tests/fp8/test_stats.cpp: Fp8Stats accumulation and JSON, and read_stats of quantized tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "fp8/quantized_tensor.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "fp8/stats.h"
#include "io/json.h"
#include "kernels/quantize.h"
#include "testing.h"

namespace octet {
namespace {

using fp8::Fp8Stats;
using fp8::TensorStats;

using testing::kInf;
using testing::kNaN;

TensorStats stats(float amax, float min_scale, float max_scale, int64_t numel, int64_t saturated,
                  int64_t flushed) {
  return {amax, min_scale, max_scale, numel, saturated, flushed};
}

// The keys json() documents, in its order.
const char* const kJsonKeys[] = {"amax",      "min_scale", "max_scale",
                                 "saturated", "flushed",   "nonfinite_amax"};

// json() written as text (what the metrics file holds) and parsed back.
Json parsed(const Fp8Stats& s) {
  const std::string text = json_dump(s.json());
  const Json j = parse_json(text, "Fp8Stats::json");
  EXPECT_TRUE(j.is_object());
  if (!j.is_object()) return j;
  EXPECT_EQ(j.size(), std::size(kJsonKeys)) << text;
  size_t i = 0;
  for (const auto& [key, value] : j.items()) {
    if (i < std::size(kJsonKeys)) {
      EXPECT_EQ(key, kJsonKeys[i]) << text;
    }
    ++i;
  }
  return j;
}

// The numbers are written in shortest round-trip form: they read back exactly.
void expect_json_number(const Json& j, const char* key, double want) {
  ASSERT_TRUE(j.contains(key)) << key;
  ASSERT_TRUE(j.at(key).is_number()) << key;
  EXPECT_EQ(j.at(key).get<double>(), want) << key;
}

TEST(Fp8Stats, EmptyHasZeroSharesAndValidJson) {
  const Fp8Stats s;
  EXPECT_EQ(s.tensors(), 0);
  EXPECT_EQ(s.saturated_share(), 0.0);
  EXPECT_EQ(s.flushed_share(), 0.0);
  const Json j = parsed(s);
  expect_json_number(j, "amax", 0.0);
  EXPECT_EQ(j.at("nonfinite_amax").get<int64_t>(), 0);
}

TEST(Fp8Stats, AccumulatesMaxAmaxScaleRangeAndSharesOverElements) {
  testing::Rng rng(testing::fresh_seed());
  std::uniform_real_distribution<float> amax(0.0f, 1000.0f), scale(1e-3f, 1e3f);
  std::uniform_int_distribution<int64_t> numel(1, 100000);
  Fp8Stats s;
  float want_amax = 0, want_min = 0, want_max = 0;
  int64_t total = 0, sat = 0, flushed = 0;
  const int n = 7;
  for (int i = 0; i < n; ++i) {
    float lo = scale(rng), hi = scale(rng);
    if (lo > hi) std::swap(lo, hi);
    TensorStats u = stats(amax(rng), lo, hi, numel(rng), 0, 0);
    u.saturated = std::uniform_int_distribution<int64_t>(0, u.numel / 10)(rng);
    u.flushed = std::uniform_int_distribution<int64_t>(0, u.numel / 3)(rng);
    s.add(u);
    want_amax = i == 0 ? u.amax : std::max(want_amax, u.amax);
    want_min = i == 0 ? lo : std::min(want_min, lo);
    want_max = i == 0 ? hi : std::max(want_max, hi);
    total += u.numel;
    sat += u.saturated;
    flushed += u.flushed;
  }
  EXPECT_EQ(s.tensors(), n);
  EXPECT_EQ(s.amax(), want_amax);
  EXPECT_EQ(s.min_scale(), want_min);
  EXPECT_EQ(s.max_scale(), want_max);
  EXPECT_EQ(s.nonfinite_amax(), 0);
  // Shares of all elements added (not means of per-tensor shares): one division in double.
  EXPECT_EQ(s.saturated_share(), double(sat) / double(total));
  EXPECT_EQ(s.flushed_share(), double(flushed) / double(total));
  const Json j = parsed(s);
  expect_json_number(j, "amax", want_amax);
  expect_json_number(j, "min_scale", want_min);
  expect_json_number(j, "max_scale", want_max);
  expect_json_number(j, "saturated", s.saturated_share());
  expect_json_number(j, "flushed", s.flushed_share());
  EXPECT_EQ(j.at("nonfinite_amax").get<int64_t>(), 0);
}

TEST(Fp8Stats, ANaNAmaxWinsInEveryOrderAndIsWrittenAsNull) {
  // Sequences of amaxes and what they accumulate to: NaN beats everything (also Inf), in any
  // position; Inf beats finite values; each non-finite amax is counted.
  const struct {
    std::vector<float> amaxes;
    float amax;
    int nonfinite;
  } cases[] = {
      {{kNaN, 3.0f}, kNaN, 1},       {{3.0f, kNaN}, kNaN, 1},       {{3.0f, kNaN, 5.0f}, kNaN, 1},
      {{kInf, 3.0f}, kInf, 1},       {{3.0f, kInf}, kInf, 1},       {{kInf, kNaN}, kNaN, 2},
      {{kNaN, kInf, 1.0f}, kNaN, 2}, {{2.0f, 9.0f, 4.0f}, 9.0f, 0},
  };
  for (const auto& c : cases) {
    Fp8Stats s;
    for (float a : c.amaxes) s.add(stats(a, 1.0f, 2.0f, 10, 0, 0));
    const bool nan = std::isnan(c.amax);
    EXPECT_TRUE(nan ? std::isnan(s.amax()) : s.amax() == c.amax)
        << "got " << s.amax() << ", expected " << c.amax << " (case of " << c.amaxes.size() << ")";
    EXPECT_EQ(s.nonfinite_amax(), c.nonfinite);
    // JSON has neither NaN nor Inf: the amax is null and the count says why.
    const Json j = parsed(s);
    if (std::isfinite(c.amax)) {
      expect_json_number(j, "amax", c.amax);
    } else {
      EXPECT_TRUE(j.at("amax").is_null()) << j.dump();
    }
    EXPECT_EQ(j.at("nonfinite_amax").get<int64_t>(), c.nonfinite);
  }
}

// ---- read_stats on quantized tensors ----

class ReadStatsOnDevice : public ::testing::TestWithParam<Device> {};

Tensor upload(Device device, Buffer& buf, const std::vector<float>& x, int64_t rows, int64_t cols) {
  buf = Buffer(device, x.size() * 4);
  copy_bytes(buf.data(), device, x.data(), Device::cpu(), x.size() * 4);
  return buf.view(DType::f32, {rows, cols});
}

TEST_P(ReadStatsOnDevice, RowScalingReportsAmaxScaleRangeAndFlushedValues) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  // Three rows with amax 1, 2 and 1792: scales 448, 224 and 0.25. Rows 0 and 2 hold one tiny
  // value each that E4M3 cannot keep under their row's scale: 1e-6 * 448 and 1e-3 * 0.25 are
  // below 2^-10, half the smallest subnormal, so they round to zero (flushed).
  const int64_t rows = 3, cols = 64;
  const float row_amax[3] = {1.0f, 2.0f, 1792.0f};
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    // Random magnitudes within [amax/8, amax): none rounds to zero under the row's scale.
    std::uniform_real_distribution<float> mag(row_amax[r] / 8, row_amax[r]);
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = (rng() & 1 ? 1.0f : -1.0f) * mag(rng);
    x[r * cols + 7] = -row_amax[r];
  }
  x[0 * cols + 5] = 1e-6f;
  x[2 * cols + 3] = -1e-3f;
  const fp8::Recipe recipe = fp8::Recipe::parse("row");
  Buffer x_buf;
  const Tensor tx = upload(device, x_buf, x, rows, cols);
  fp8::QuantizedTensor q(device, rows, cols, recipe, fp8::Role::activation, false);
  fp8::quantize(tx, q, recipe);
  const TensorStats t = fp8::read_stats(q);
  EXPECT_EQ(t.amax, 1792.0f);
  EXPECT_EQ(t.numel, rows * cols);
  EXPECT_EQ(t.saturated, 0);
  EXPECT_EQ(t.flushed, 2);
  // scale = 448 / amax rounds once, scale_inv = 1 / scale once more and read_stats' 1 /
  // scale_inv a third time: within (1 + 2^-24)^3 - 1 < 2^-22 (relative) of 448 / amax.
  EXPECT_LE(std::abs(t.min_scale - 0.25), 0x1p-22 * 0.25);
  EXPECT_LE(std::abs(t.max_scale - 448.0), 0x1p-22 * 448.0);

  Fp8Stats s;
  s.add(t);
  s.add(t);
  EXPECT_EQ(s.flushed_share(), 2.0 / (rows * cols));
  EXPECT_EQ(s.tensors(), 2);
}

TEST_P(ReadStatsOnDevice, MxScalesArePowersOfTwoFromEachBlocksAmax) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  // One row of four 32-wide MX blocks with amax 1, 448, 0.001 and 3000. The scale_inv of a
  // block is the smallest 2^k with amax / 2^k <= 448, by hand:
  //   1:     2^-8  (1 / 2^-8 = 256 <= 448; 1 / 2^-9 = 512 > 448)    scale 2^8
  //   448:   2^0                                                      scale 1
  //   0.001: 2^-18 (0.001 * 2^18 = 262.1; * 2^19 = 524.3 > 448)      scale 2^18 = 262144
  //   3000:  2^3   (3000 / 8 = 375; 3000 / 4 = 750 > 448)             scale 2^-3 = 0.125
  const float block_amax[4] = {1.0f, 448.0f, 0.001f, 3000.0f};
  std::vector<float> x(128);
  for (int b = 0; b < 4; ++b) {
    std::uniform_real_distribution<float> mag(block_amax[b] / 4, block_amax[b]);
    for (int i = 0; i < 32; ++i) x[b * 32 + i] = (rng() & 1 ? 1.0f : -1.0f) * mag(rng);
    x[b * 32 + 31] = block_amax[b];
  }
  const fp8::Recipe recipe = fp8::Recipe::parse("mx");
  Buffer x_buf;
  const Tensor tx = upload(device, x_buf, x, 1, 128);
  fp8::QuantizedTensor q(device, 1, 128, recipe, fp8::Role::weight, false);
  fp8::quantize(tx, q, recipe);
  const TensorStats t = fp8::read_stats(q);
  EXPECT_EQ(t.amax, 3000.0f);
  EXPECT_EQ(t.min_scale, 0.125f);
  EXPECT_EQ(t.max_scale, 262144.0f);
  EXPECT_EQ(t.saturated, 0);  // rounded-up scales: no block overflows
  EXPECT_EQ(t.flushed, 0);    // every value is >= amax / 4 of its block
  EXPECT_EQ(t.numel, 128);
}

TEST_P(ReadStatsOnDevice, AStaleDelayedScaleShowsUpAsSaturation) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  // A fresh delayed-scaling state quantizes with scale 1: the three values of 1000 (and
  // -600) go past 448 and saturate, and the amax recorded is 1000.
  fp8::DelayedScalingState state(device, {16, fp8::AmaxCompute::max, 0}, {DType::e4m3});
  const fp8::Recipe recipe = fp8::Recipe::parse("tensor-delayed");
  std::vector<float> x(4 * 32);
  std::uniform_real_distribution<float> uniform(-400.0f, 400.0f);
  for (float& v : x) v = uniform(rng);
  x[3] = x[40] = x[77] = 1000.0f;
  x[90] = -600.0f;
  Buffer x_buf;
  const Tensor tx = upload(device, x_buf, x, 4, 32);
  fp8::QuantizedTensor q(device, 4, 32, recipe, fp8::Role::activation, false);
  fp8::quantize(tx, q, recipe, &state, 0);
  TensorStats t = fp8::read_stats(q);
  EXPECT_EQ(t.amax, 1000.0f);
  EXPECT_EQ(t.saturated, 4);
  EXPECT_EQ(t.min_scale, 1.0f);
  EXPECT_EQ(t.max_scale, 1.0f);
  // After the update the scale is 448 / 1000 and the same tensor no longer saturates.
  state.update();
  fp8::quantize(tx, q, recipe, &state, 0);
  t = fp8::read_stats(q);
  EXPECT_EQ(t.saturated, 0);
  // scale 448/1000 rounded once, then 1 / (1 / scale) twice more: within 2^-22 relative.
  EXPECT_LE(std::abs(t.min_scale - 0.448), 0x1p-22 * 0.448);
}

INSTANTIATE_TEST_SUITE_P(Devices, ReadStatsOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet
