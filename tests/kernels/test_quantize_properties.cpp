// tests/kernels/test_quantize_properties.cpp: what quantize's scales promise, on every device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/convert_reference.h"
#include "core/error.h"
#include "kernels/quantize.h"
#include "kernels/quantize_testing.h"
#include "testing.h"

namespace octet {
namespace {

using testing::Quantized;
using testing::QuantizeRun;

// Block amaxes of x under `grid` (no NaN in x), in double.
std::vector<double> block_amaxes(const std::vector<float>& x, int64_t rows, int64_t cols,
                                 kernels::ScaleGrid grid) {
  const int64_t br = grid.block_rows == 0 ? rows : grid.block_rows;
  const int64_t bc = grid.block_cols == 0 ? cols : grid.block_cols;
  const int64_t scale_cols = (cols + bc - 1) / bc;
  std::vector<double> amax(
      static_cast<size_t>(kernels::scale_grid_shape(rows, cols, grid).numel()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double& m = amax[r / br * scale_cols + c / bc];
      m = std::max(m, std::fabs(static_cast<double>(x[r * cols + c])));
    }
  }
  return amax;
}

bool is_power_of_two(float v) {
  int exponent;
  return v > 0.0f && std::frexp(v, &exponent) == 0.5f;
}

class QuantizeScales : public ::testing::TestWithParam<Device> {};

// The amax output is max |x|; each f32 scale maps its block's amax onto fp8_max
// within two f32 roundings (fp8_max / amax, then 1 / scale: 2^-24 relative each,
// bounded by 2^-22), so current scaling saturates nothing.
TEST_P(QuantizeScales, CurrentScalesMapEachBlockAmaxOntoTheFormatMax) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
    for (testing::Distribution d : testing::kDistributions) {
      SCOPED_TRACE(qc.name() + " " + testing::distribution_name(d));
      const int64_t rows = 217, cols = 256;
      const std::vector<float> x = testing::random_matrix(d, rows * cols, qc.in, rng);
      const Quantized q =
          testing::quantize_on(device, x, rows, cols, testing::make_run(qc.grid, qc.fp8, qc.in));
      const std::vector<double> amax = block_amaxes(x, rows, cols, qc.grid);
      EXPECT_EQ(q.amax, *std::max_element(amax.begin(), amax.end()));
      EXPECT_EQ(q.saturated, 0);
      if (qc.grid.e8m0) continue;  // MX scales: QuantizeScales.MxScales...
      const double max = testing::fp8_max(qc.fp8);
      for (size_t b = 0; b < amax.size(); ++b) {
        const double mapped = amax[b] / q.scale_inv[b];
        ASSERT_LE(std::fabs(mapped / max - 1.0), std::ldexp(1.0, -22))
            << "block " << b << ": amax " << amax[b] << " scale_inv " << q.scale_inv[b];
      }
    }
  }
}

// Rounded down to powers of two, scales stay <= the exact ones and > half of them:
// with s the f32 scale and p its power of two, 1/s <= 1/p <= 2/s, and the stored
// f32(1/s) keeps these order relations (rounding is monotone, 1/p is exact).
TEST_P(QuantizeScales, PowerOfTwoScalesArePowersOfTwoAtMostTheExactScale) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
    if (qc.grid.e8m0) continue;  // E8M0 scales are powers of two by construction
    SCOPED_TRACE(qc.name());
    const int64_t rows = 130, cols = 257;
    const std::vector<float> x =
        testing::random_matrix(testing::Distribution::heavy_tailed, rows * cols, qc.in, rng);
    QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in);
    const Quantized exact = testing::quantize_on(device, x, rows, cols, run);
    run.power_of_two_scales = true;
    const Quantized p2 = testing::quantize_on(device, x, rows, cols, run);
    for (size_t b = 0; b < p2.scale_inv.size(); ++b) {
      ASSERT_TRUE(is_power_of_two(p2.scale_inv[b])) << "block " << b << ": " << p2.scale_inv[b];
      ASSERT_GE(p2.scale_inv[b], exact.scale_inv[b]) << "block " << b;
      ASSERT_LE(p2.scale_inv[b], 2 * exact.scale_inv[b]) << "block " << b;
    }
    EXPECT_EQ(p2.saturated, 0);
    const Quantized want = testing::quantize_reference(x, rows, cols, run);
    EXPECT_EQ(p2.data, want.data);
  }
}

// MX: each E8M0 scale_inv is the smallest power of two with amax / scale_inv <=
// fp8_max (so nothing saturates): halving it would overflow, unless it is the
// smallest E8M0 value 2^-127. Zero blocks get 2^0. Includes blocks of f32
// subnormals, of values near FLT_MAX and of zeros.
TEST_P(QuantizeScales, MxScalesAreTheSmallestPowersOfTwoThatAvoidSaturation) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
    if (!qc.grid.e8m0) continue;
    for (testing::Distribution d : testing::kDistributions) {
      SCOPED_TRACE(qc.name() + " " + testing::distribution_name(d));
      const int64_t rows = 130, cols = 257;
      std::vector<float> x = testing::random_matrix(d, rows * cols, qc.in, rng);
      const float extremes[] = {0.0f, 0x1p-140f, 3.0e38f, 0x1p-126f};  // per row, cols 32..63
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 32; c < 64; ++c) {
          const float e = extremes[r % 4] * (c % 2 ? -1.0f : 1.0f) * (c == 40 ? 1.0f : 0.5f);
          x[r * cols + c] = qc.in == DType::bf16 ? bf16_to_f32(f32_to_bf16(e)) : e;
        }
      }
      const QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, false);
      const Quantized q = testing::quantize_on(device, x, rows, cols, run);
      EXPECT_EQ(q.saturated, 0);
      EXPECT_EQ(q.data, testing::quantize_reference(x, rows, cols, run).data);
      const std::vector<double> amax = block_amaxes(x, rows, cols, qc.grid);
      const double max = testing::fp8_max(qc.fp8);
      for (size_t b = 0; b < amax.size(); ++b) {
        const uint8_t code = q.scale_inv_raw[b];
        const double scale_inv = std::ldexp(1.0, code - 127);
        ASSERT_NE(code, 0xFF) << "block " << b;
        if (amax[b] == 0.0) {
          ASSERT_EQ(code, 127) << "block " << b;
          continue;
        }
        ASSERT_LE(amax[b] / scale_inv, max) << "block " << b << " amax " << amax[b];
        if (code != 0) {
          ASSERT_GT(amax[b] / (scale_inv / 2), max) << "block " << b;
        }
      }
    }
  }
}

// Why row, tile and MX scales exist: with 0.1% of the values 1000x larger, one
// tensor scale pushes the bulk of an E4M3 tensor into subnormals and zero (the
// format spans 2^17.8), while small blocks keep it in the normal range. The
// measure is the RMS over elements of |y - x| / |x| (x != 0), which weighs every
// value alike; an error norm relative to ||x|| would be ruled by the outliers,
// quantized alike by every grid. Not asserted for 128x128 blocks (16384 values
// hold ~16 outliers, so their scales are the tensor's) nor for E5M2 (2^32 range:
// a 1000x outlier costs it nothing).
TEST_P(QuantizeScales, RowTileAndMxScalesBeatTensorScalingOnHeavyTails) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (DType in : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(in));
    const int64_t rows = 256, cols = 384;
    const std::vector<float> x =
        testing::random_matrix(testing::Distribution::heavy_tailed, rows * cols, in, rng);
    const auto relative_rms = [&](kernels::ScaleGrid grid) {
      const Quantized q = testing::quantize_on(device, x, rows, cols,
                                               testing::make_run(grid, DType::e4m3, in, false));
      const std::vector<float> y = testing::dequantize_on(device, q.data, q.scale_inv_raw, rows,
                                                          cols, grid, DType::e4m3, DType::f32);
      double sum = 0.0;
      int64_t n = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] == 0.0f) continue;
        const double e = (static_cast<double>(y[i]) - x[i]) / x[i];
        sum += e * e;
        ++n;
      }
      return std::sqrt(sum / static_cast<double>(n));
    };
    const double tensor = relative_rms(testing::kTensorGrid);
    const double block = relative_rms(testing::kBlockGrid);
    std::printf("[ rel rms  ] %s tensor %.4f row %.4f 1x128 %.4f 128x128 %.4f mx %.4f\n",
                dtype_name(in), tensor, relative_rms(testing::kRowGrid),
                relative_rms(testing::kTileGrid), block, relative_rms(testing::kMxGrid));
    EXPECT_LT(relative_rms(testing::kRowGrid), tensor);
    EXPECT_LT(relative_rms(testing::kTileGrid), tensor);
    EXPECT_LT(relative_rms(testing::kMxGrid), tensor);
  }
}

// Delayed scaling with a given scale 2^k: counts[0] is the number of values with
// |x * scale| past the rounding boundary of ±max (E4M3: > 464, the tie at 464 rounds
// down to 448; E5M2: >= 61440, the tie rounds up to Inf), which become ±max (or
// NaN/Inf without saturation); counts[1] the nonzero values with |x * scale| <= half
// the smallest subnormal (the tie rounds to even: 0). Inputs span 2^-30..2^20 and
// include the exact ties.
TEST_P(QuantizeScales, DelayedScalingCountsSaturatedAndFlushedValues) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    for (DType in : {DType::f32, DType::bf16}) {
      for (Overflow overflow : {Overflow::saturate, Overflow::nonfinite}) {
        SCOPED_TRACE(std::string(dtype_name(in)) + "->" + dtype_name(fp8) +
                     (overflow == Overflow::saturate ? " saturate" : " nonfinite"));
        const int64_t rows = 130, cols = 257;
        const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 7) - 3);
        const double max = testing::fp8_max(fp8);
        const double boundary = fp8 == DType::e4m3 ? 464.0 : 61440.0;
        std::vector<float> x(rows * cols);
        for (float& v : x) {
          v = testing::log_uniform_f32(rng, -30.0, 20.0);
          if (rng() % 50 == 0) v = static_cast<float>((rng() % 2 ? boundary : max) / scale);
          if (rng() % 50 == 0) v = static_cast<float>(dtype_info(fp8).min_subnormal / 2 / scale);
          if (in == DType::bf16) v = bf16_to_f32(f32_to_bf16(v));
        }
        QuantizeRun run = testing::make_run(testing::kTensorGrid, fp8, in);
        run.overflow = overflow;
        run.given_scale = scale;
        const Quantized q = testing::quantize_on(device, x, rows, cols, run);
        int32_t saturated = 0, flushed = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const double v = std::fabs(static_cast<double>(x[i]) * scale);
          const double got = fp8_to_f32(q.data[i], fp8);
          if (fp8 == DType::e4m3 ? v > boundary : v >= boundary) {
            ++saturated;
            if (overflow == Overflow::saturate) {
              ASSERT_EQ(got, std::copysign(max, x[i])) << "x = " << x[i];
            } else {
              ASSERT_TRUE(fp8 == DType::e4m3 ? std::isnan(got) : std::isinf(got)) << x[i];
            }
          }
          if (x[i] != 0.0f && v <= dtype_info(fp8).min_subnormal / 2) ++flushed;
        }
        ASSERT_GT(saturated, 0);
        ASSERT_GT(flushed, 0);
        EXPECT_EQ(q.saturated, saturated);
        EXPECT_EQ(q.flushed, flushed);
        EXPECT_EQ(q.scale_inv[0], 1.0f / scale);
        EXPECT_EQ(q.data, testing::quantize_reference(x, rows, cols, run).data);
        EXPECT_EQ(
            q.data_t,
            testing::quantize_reference(testing::transposed(x, rows, cols), cols, rows, run).data);
      }
    }
  }
}

// A NaN anywhere makes the amax NaN, an infinity (without NaN) makes it Inf: the
// caller sees them. The block holding one gets scale 1, and every value is what
// the conversion makes of it.
TEST_P(QuantizeScales, NonFiniteInputsAreReportedInTheAmax) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
    for (const char* what : {"nan", "inf", "nan+inf"}) {
      SCOPED_TRACE(qc.name() + " " + what);
      const int64_t rows = 130, cols = 257;
      std::vector<float> x =
          testing::random_matrix(testing::Distribution::normal, rows * cols, qc.in, rng);
      const std::string w = what;
      const auto at = static_cast<size_t>(rng() % x.size());
      if (w != "nan") x[at] = rng() % 2 ? HUGE_VALF : -HUGE_VALF;
      if (w != "inf") x[(at + 1 + rng() % (x.size() - 1)) % x.size()] = std::nanf("");
      const QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, true);
      const Quantized q = testing::quantize_on(device, x, rows, cols, run);
      if (w == "inf") {
        EXPECT_EQ(q.amax, HUGE_VALF);
      } else {
        EXPECT_TRUE(std::isnan(q.amax)) << q.amax;
      }
      const int64_t br = qc.grid.block_rows == 0 ? rows : qc.grid.block_rows;
      const int64_t bc = qc.grid.block_cols == 0 ? cols : qc.grid.block_cols;
      const int64_t r = static_cast<int64_t>(at) / cols, c = static_cast<int64_t>(at) % cols;
      if (w != "nan") {
        EXPECT_EQ(q.scale_inv[r / br * ((cols + bc - 1) / bc) + c / bc], 1.0f);
      }
      const Quantized want = testing::quantize_reference(x, rows, cols, run);
      EXPECT_EQ(q.data, want.data);
      EXPECT_EQ(q.scale_inv_raw, want.scale_inv_raw);
      EXPECT_EQ(q.saturated, want.saturated);
      EXPECT_EQ(
          q.data_t,
          testing::quantize_reference(testing::transposed(x, rows, cols), cols, rows, run).data);
    }
  }
}

// Inputs at every decision of the encoders: the values of FP8 neighbours' midpoints
// (the ties) and their two f32 neighbours, past ±max (464 and 61440 are the rounding
// boundaries), FLT_MAX, infinities; and all 65536 bf16 bit patterns (NaNs of both
// signs, subnormals). Scaled by 1 and by an inexact scale (the f32 product rounds
// first), both overflow modes, both formats, with and without the transposed copy (the
// per-tensor cast and tile kernels on a GPU), under both GPU encoders: the codes and
// counts are the reference's, bit for bit.
TEST_P(QuantizeScales, EveryBf16ValueAndEveryRoundingBoundaryEncodeLikeTheReference) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  constexpr int64_t cols = 256;
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    std::vector<float> ties;
    const float max = static_cast<float>(testing::fp8_max(fp8));
    for (int code = 0; code < 0x7F; ++code) {
      const float a = fp8_to_f32(static_cast<uint8_t>(code), fp8);
      const float b = fp8_to_f32(static_cast<uint8_t>(code + 1), fp8);
      if (!(b <= max)) break;
      const float mid = (a + b) / 2;  // exact: FP8 values have at most 4 significant bits
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, HUGE_VALF)}) {
        ties.push_back(v);
        ties.push_back(-v);
      }
    }
    const float boundary = fp8 == DType::e4m3 ? 464.0f : 61440.0f;
    for (float v : {boundary, std::nextafter(boundary, 0.0f), std::nextafter(boundary, HUGE_VALF),
                    max, 3.4028235e38f, HUGE_VALF}) {
      ties.push_back(v);
      ties.push_back(-v);
    }
    ties.resize((ties.size() + cols - 1) / cols * cols, 0.0f);
    std::vector<float> patterns(65536);
    for (size_t i = 0; i < patterns.size(); ++i)
      patterns[i] = bf16_to_f32(static_cast<uint16_t>(i));
    const std::pair<const std::vector<float>*, DType> inputs[] = {
        {&ties, DType::f32}, {&patterns, DType::f32}, {&patterns, DType::bf16}};
    for (const auto& [x, in] : inputs) {
      const int64_t rows = static_cast<int64_t>(x->size()) / cols;
      for (float scale : {1.0f, 1.37f}) {
        for (Overflow overflow : {Overflow::saturate, Overflow::nonfinite}) {
          for (bool with_transposed : {false, true}) {
            for (const char* cvt : testing::fp8_cvt_modes(device)) {
              const testing::ScopedEnv env("OCTET_CUDA_FP8_CVT", cvt);
              SCOPED_TRACE(std::string(dtype_name(in)) + "->" + dtype_name(fp8) +
                           (x == &ties ? " ties" : " all bf16") + " scale " +
                           std::to_string(scale) +
                           (overflow == Overflow::saturate ? " saturate" : " nonfinite") +
                           (with_transposed ? " transposed " : " ") + cvt);
              QuantizeRun run = testing::make_run(testing::kTensorGrid, fp8, in, with_transposed);
              run.overflow = overflow;
              run.given_scale = scale;
              const Quantized q = testing::quantize_on(device, *x, rows, cols, run);
              const Quantized want = testing::quantize_reference(*x, rows, cols, run);
              for (size_t i = 0; i < x->size(); ++i) {
                ASSERT_EQ(q.data[i], want.data[i])
                    << "x = " << (*x)[i] << " (bits 0x" << std::hex << f32_bits((*x)[i]) << ")";
              }
              EXPECT_EQ(q.saturated, want.saturated);
              EXPECT_EQ(q.flushed, want.flushed);
              EXPECT_TRUE(std::isnan(q.amax) == std::isnan(want.amax) &&
                          (std::isnan(q.amax) || q.amax == want.amax))
                  << q.amax << ", want " << want.amax;
              if (with_transposed) {
                ASSERT_EQ(q.data_t, testing::quantize_reference(testing::transposed(*x, rows, cols),
                                                                cols, rows, run)
                                        .data);
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(QuantizeScales, ZeroInputGivesUnitScalesAndZeroData) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
    SCOPED_TRACE(qc.name());
    const int64_t rows = 130, cols = 257;
    const Quantized q = testing::quantize_on(device, std::vector<float>(rows * cols, 0.0f), rows,
                                             cols, testing::make_run(qc.grid, qc.fp8, qc.in, true));
    EXPECT_EQ(q.amax, 0.0f);
    EXPECT_EQ(q.saturated, 0);
    EXPECT_EQ(q.flushed, 0);
    EXPECT_EQ(q.data, std::vector<uint8_t>(q.data.size(), 0));
    EXPECT_EQ(q.data_t, std::vector<uint8_t>(q.data.size(), 0));
    EXPECT_EQ(q.scale_inv, std::vector<float>(q.scale_inv.size(), 1.0f));
    EXPECT_EQ(q.scale_inv_t, std::vector<float>(q.scale_inv_t.size(), 1.0f));
  }
}

TEST_P(QuantizeScales, BadArgumentsAreErrorsNamingTheOperation) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  const Buffer a(device, 4096), b(device, 4096), s(device, 256), g(device, 64);
  const Tensor x = a.view(DType::f32, {8, 64});
  const auto outputs = [&](DType data_dtype, DType scale_dtype, Shape scale_shape) {
    kernels::QuantizeOutputs out;
    out.data = b.view(data_dtype, {8, 64});
    out.scale_inv = s.view(scale_dtype, scale_shape);
    return out;
  };
  const auto options = [](kernels::ScaleGrid grid) {
    kernels::QuantizeOptions o;
    o.grid = grid;
    return o;
  };
  const auto expect_error = [](const char* what, const char* op, auto&& call) {
    try {
      call();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << what << ": " << e.what();
    }
  };
  const kernels::QuantizeOptions rows = options(testing::kRowGrid);
  expect_error("scale_inv shape", "[quantize]",
               [&] { kernels::quantize(x, outputs(DType::e4m3, DType::f32, {4}), rows); });
  expect_error("scale_inv dtype", "[quantize]",
               [&] { kernels::quantize(x, outputs(DType::e4m3, DType::e8m0, {8}), rows); });
  expect_error("int input", "[quantize]", [&] {
    kernels::quantize(a.view(DType::i32, {8, 64}), outputs(DType::e4m3, DType::f32, {8}), rows);
  });
  expect_error("bf16 data", "[quantize]",
               [&] { kernels::quantize(x, outputs(DType::bf16, DType::f32, {8}), rows); });
  expect_error("e8m0 2-D blocks", "[quantize]", [&] {
    kernels::quantize(x, outputs(DType::e4m3, DType::e8m0, {1, 1}), options({32, 32, true}));
  });
  kernels::QuantizeOptions given = options(testing::kRowGrid);
  given.given_scale = g.view(DType::f32, {1});
  expect_error("given scale per row", "[quantize]",
               [&] { kernels::quantize(x, outputs(DType::e4m3, DType::f32, {8}), given); });
  expect_error("dequantize y shape", "[dequantize]", [&] {
    kernels::dequantize(b.view(DType::e4m3, {8, 64}), s.view(DType::f32, {8}), testing::kRowGrid,
                        a.view(DType::f32, {64, 8}));
  });
}

INSTANTIATE_TEST_SUITE_P(Devices, QuantizeScales, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet
