// tests/kernels/test_quantize.cpp: quantize/dequantize bit for bit against a plain reference.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "kernels/quantize.h"
#include "kernels/quantize_testing.h"
#include "testing.h"

namespace octet {
namespace {

using testing::Quantized;
using testing::QuantizeRun;

// Equal bytes; reports the first difference as (row, col) of a [rows, cols] matrix of
// `size`-byte elements.
void expect_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       int64_t cols, size_t size, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (std::memcmp(got.data(), want.data(), got.size()) == 0) return;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      const auto e = static_cast<int64_t>(i / size);
      ADD_FAILURE() << what << " differs at [" << e / cols << ", " << e % cols << "]: got byte 0x"
                    << std::hex << int{got[i]} << ", want 0x" << int{want[i]};
      return;
    }
  }
}

std::vector<uint8_t> transposed_bytes(const std::vector<uint8_t>& m, int64_t rows, int64_t cols,
                                      size_t size) {
  std::vector<uint8_t> t(m.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(&t[(c * rows + r) * size], &m[(r * cols + c) * size], size);
    }
  }
  return t;
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

// For every case x shape: fn(case, rows, cols, x) on one of the distributions, in
// turn, so that each case meets each distribution on two shapes (all three on
// every shape would triple the time for little more coverage).
template <class Fn>
void for_each_input(testing::Rng& rng, Fn fn) {
  size_t case_index = 0;
  for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
    size_t turn = case_index++;
    for (const auto& shape : testing::kQuantizeShapes) {
      const testing::Distribution d = testing::kDistributions[turn++ % 3];
      const int64_t rows = shape[0], cols = shape[1];
      SCOPED_TRACE(qc.name() + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "] " +
                   testing::distribution_name(d));
      fn(qc, rows, cols, testing::random_matrix(d, rows * cols, qc.in, rng));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// data, scale_inv, amax and counts of `got` are those of the reference.
void expect_matches_reference(const Quantized& got, const std::vector<float>& x, int64_t rows,
                              int64_t cols, const QuantizeRun& run) {
  const Quantized want = testing::quantize_reference(x, rows, cols, run);
  const int64_t scale_cols = kernels::scale_grid_shape(rows, cols, run.grid)[1];
  expect_same_bytes(got.data, want.data, cols, 1, "data");
  expect_same_bytes(got.scale_inv_raw, want.scale_inv_raw, scale_cols, run.grid.e8m0 ? 1 : 4,
                    "scale_inv");
  if (run.amax) {
    EXPECT_TRUE(same_float(got.amax, want.amax)) << "amax " << got.amax << ", want " << want.amax;
  }
  if (run.counts) {
    EXPECT_EQ(got.saturated, want.saturated);
    EXPECT_EQ(got.flushed, want.flushed);
  }
}

// The transposed copy and its scales of `got` are the reference run on xᵀ.
void expect_transposed_matches_reference(const Quantized& got, const std::vector<float>& x,
                                         int64_t rows, int64_t cols, const QuantizeRun& run) {
  const Quantized want_t =
      testing::quantize_reference(testing::transposed(x, rows, cols), cols, rows, run);
  expect_same_bytes(got.data_t, want_t.data, rows, 1, "data_t");
  expect_same_bytes(got.scale_inv_t_raw, want_t.scale_inv_raw,
                    kernels::scale_grid_shape(cols, rows, run.grid)[1], run.grid.e8m0 ? 1 : 4,
                    "scale_inv_t");
}

// Every output of `got` is that of `want`, bit for bit.
void expect_same_outputs(const Quantized& got, const Quantized& want, int64_t rows, int64_t cols,
                         const QuantizeRun& run) {
  const size_t scale_size = run.grid.e8m0 ? 1 : 4;
  expect_same_bytes(got.data, want.data, cols, 1, "data");
  expect_same_bytes(got.scale_inv_raw, want.scale_inv_raw,
                    kernels::scale_grid_shape(rows, cols, run.grid)[1], scale_size, "scale_inv");
  if (run.with_transposed) {
    expect_same_bytes(got.data_t, want.data_t, rows, 1, "data_t");
    expect_same_bytes(got.scale_inv_t_raw, want.scale_inv_t_raw,
                      kernels::scale_grid_shape(cols, rows, run.grid)[1], scale_size,
                      "scale_inv_t");
  }
  if (run.amax) {
    EXPECT_TRUE(same_float(got.amax, want.amax)) << "amax " << got.amax << ", want " << want.amax;
  }
  if (run.counts) {
    EXPECT_EQ(got.saturated, want.saturated);
    EXPECT_EQ(got.flushed, want.flushed);
  }
}

class QuantizeKernel : public ::testing::TestWithParam<Device> {};

TEST_P(QuantizeKernel, DataScalesAmaxAndCountsMatchTheReferenceBitForBit) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for_each_input(rng, [&](const testing::QuantizeCase& qc, int64_t rows, int64_t cols,
                          const std::vector<float>& x) {
    const QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, false);
    expect_matches_reference(testing::quantize_on(device, x, rows, cols, run), x, rows, cols, run);
  });
}

// The transposed copy is xᵀ quantized with the grid applied to xᵀ: exactly the
// reference run on an explicitly transposed x. Per tensor and for NxN blocks the
// blocks of xᵀ are those of x, so it is also the transpose of data and scale_inv.
TEST_P(QuantizeKernel, TransposedCopyIsTheQuantizedTranspose) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for_each_input(rng, [&](const testing::QuantizeCase& qc, int64_t rows, int64_t cols,
                          const std::vector<float>& x) {
    const QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, true);
    const Quantized got = testing::quantize_on(device, x, rows, cols, run);
    const Quantized want_t =
        testing::quantize_reference(testing::transposed(x, rows, cols), cols, rows, run);
    const Shape scale_t = kernels::scale_grid_shape(cols, rows, run.grid);
    const size_t scale_size = run.grid.e8m0 ? 1 : 4;
    expect_same_bytes(got.data_t, want_t.data, rows, 1, "data_t");
    expect_same_bytes(got.scale_inv_t_raw, want_t.scale_inv_raw, scale_t[1], scale_size,
                      "scale_inv_t");
    if (run.grid == testing::kTensorGrid || run.grid == testing::kBlockGrid) {
      expect_same_bytes(got.data_t, transposed_bytes(got.data, rows, cols, 1), rows, 1,
                        "data_t vs transpose(data)");
      expect_same_bytes(got.scale_inv_t_raw,
                        transposed_bytes(got.scale_inv_raw, scale_t[1], scale_t[0], scale_size),
                        scale_t[1], scale_size, "scale_inv_t vs transpose(scale_inv)");
    }
    // Asking for the transposed copy changes nothing else.
    expect_matches_reference(got, x, rows, cols, run);
  });
}

// The column copy (QuantizeOutputs::data_t_in_x_layout, the CPU's K-first operands) is the
// transposed copy's codes in x's layout and its scales, bit for bit, with data, amax and counts
// unchanged: every 1xN recipe grid (row, 1x128, MX), both formats and inputs, on every
// instruction-set level and on 1 and 2 threads (one band split into slabs that share its column
// maxima); shapes past a column chunk (512) and past the 4096 columns one pass of maxima holds, NaN
// and Inf in some columns.
TEST(QuantizeColumnCopy, IsTheTransposedCopyInXsLayoutOnEveryLevelAndThreadCount) {
  testing::Rng rng(testing::fresh_seed());
  const int64_t shapes[][2] = {{1, 1},     {300, 1},   {3, 200},   {130, 257},
                               {217, 256}, {520, 700}, {33, 4100}, {4100, 24}};
  const int saved_threads = omp_get_max_threads();
  int turn = 0;
  for (const char* isa : {"avx512", "avx2", "baseline"}) {
    const testing::ScopedEnv level("OCTET_CPU_ISA", isa);
    for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
      if (qc.grid.block_rows != 1) continue;  // per tensor and NxN: OtherGridsAreRefused
      for (const auto& shape : shapes) {
        const int64_t rows = shape[0], cols = shape[1];
        const testing::Distribution d = testing::kDistributions[turn % 3];
        std::vector<float> x = testing::random_matrix(d, rows * cols, qc.in, rng);
        if (turn++ % 4 == 0 && rows * cols > 4) {  // a NaN in one column, an Inf in another
          x[(rows / 2) * cols + cols / 3] = NAN;
          x[(rows - 1) * cols] = -INFINITY;
        }
        const int threads = 1 + turn % 2;
        SCOPED_TRACE(std::string(isa) + " " + qc.name() + " [" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "] " + testing::distribution_name(d) + " " +
                     std::to_string(threads) + " threads");
        QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, true);
        omp_set_num_threads(threads);
        const Quantized kmajor = testing::quantize_on(Device::cpu(), x, rows, cols, run);
        run.data_t_in_x_layout = true;
        const Quantized got = testing::quantize_on(Device::cpu(), x, rows, cols, run);
        omp_set_num_threads(saved_threads);
        const Shape scale_t = kernels::scale_grid_shape(cols, rows, run.grid);
        expect_same_bytes(got.data_t, transposed_bytes(kmajor.data_t, cols, rows, 1), cols, 1,
                          "data_t in x's layout vs the K-major copy transposed");
        expect_same_bytes(got.scale_inv_t_raw, kmajor.scale_inv_t_raw, scale_t[1],
                          run.grid.e8m0 ? 1 : 4, "scale_inv_t");
        expect_same_bytes(got.data, kmajor.data, cols, 1, "data");
        expect_same_bytes(got.scale_inv_raw, kmajor.scale_inv_raw,
                          kernels::scale_grid_shape(rows, cols, run.grid)[1], run.grid.e8m0 ? 1 : 4,
                          "scale_inv");
        EXPECT_TRUE(same_float(got.amax, kmajor.amax));
        EXPECT_EQ(got.saturated, kmajor.saturated);
        EXPECT_EQ(got.flushed, kmajor.flushed);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Grids other than 1xN (per tensor, NxN, others) have no column copy; the refusal says which
// grids do.
TEST(QuantizeColumnCopy, OtherGridsAreRefused) {
  const std::vector<float> x(6 * 9, 1.0f);
  for (const kernels::ScaleGrid grid :
       {testing::kTensorGrid, testing::kBlockGrid, kernels::ScaleGrid{2, 3, false}}) {
    QuantizeRun run = testing::make_run(grid, DType::e4m3, DType::f32);
    run.data_t_in_x_layout = true;
    try {
      testing::quantize_on(Device::cpu(), x, 6, 9, run);
      ADD_FAILURE() << "a " << grid.block_rows << "x" << grid.block_cols
                    << " grid with data_t in x's layout was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("1xN (row, 1x128, MX)"), std::string::npos) << e.what();
    }
  }
}

// Grids no recipe uses today (non-square blocks, whole-dimension blocks one way,
// blocks wider than a tile, odd MX block sizes) follow the same definition.
TEST_P(QuantizeKernel, UnusualGridsMatchTheReferenceBitForBit) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const kernels::ScaleGrid grids[] = {{2, 3, false},   {0, 128, false}, {128, 0, false},
                                      {96, 64, false}, {64, 96, false}, {1, 300, false},
                                      {1, 7, true},    {1, 64, true}};
  const int64_t shapes[][2] = {{130, 257}, {300, 1}, {3, 200}};
  int variant = 0;
  for (const kernels::ScaleGrid& grid : grids) {
    for (const auto& shape : shapes) {
      const int64_t rows = shape[0], cols = shape[1];
      const DType fp8 = variant % 2 ? DType::e5m2 : DType::e4m3;
      const DType in = variant++ / 2 % 2 ? DType::bf16 : DType::f32;
      SCOPED_TRACE("grid {" + std::to_string(grid.block_rows) + ", " +
                   std::to_string(grid.block_cols) + (grid.e8m0 ? ", e8m0} " : "} ") +
                   dtype_name(in) + "->" + dtype_name(fp8) + " [" + std::to_string(rows) + ", " +
                   std::to_string(cols) + "]");
      const std::vector<float> x =
          testing::random_matrix(testing::Distribution::heavy_tailed, rows * cols, in, rng);
      const QuantizeRun run = testing::make_run(grid, fp8, in, true);
      const Quantized got = testing::quantize_on(device, x, rows, cols, run);
      expect_matches_reference(got, x, rows, cols, run);
      const Quantized want_t =
          testing::quantize_reference(testing::transposed(x, rows, cols), cols, rows, run);
      expect_same_bytes(got.data_t, want_t.data, rows, 1, "data_t");
      expect_same_bytes(got.scale_inv_t_raw, want_t.scale_inv_raw,
                        kernels::scale_grid_shape(cols, rows, grid)[1], grid.e8m0 ? 1 : 4,
                        "scale_inv_t");
    }
  }
}

TEST_P(QuantizeKernel, DequantizeMatchesTheReferenceBitForBit) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for_each_input(rng, [&](const testing::QuantizeCase& qc, int64_t rows, int64_t cols,
                          const std::vector<float>& x) {
    const QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, false);
    const Quantized q = testing::quantize_reference(x, rows, cols, run);
    for (DType y : {DType::f32, DType::bf16}) {
      const std::vector<float> got =
          testing::dequantize_on(device, q.data, q.scale_inv_raw, rows, cols, qc.grid, qc.fp8, y);
      const std::vector<float> want =
          testing::dequantize_reference(q, rows, cols, qc.grid, qc.fp8, y);
      for (size_t i = 0; i < got.size(); ++i) {
        if (!same_float(got[i], want[i])) {
          FAIL() << "y " << dtype_name(y) << " element " << i << ": " << got[i] << ", want "
                 << want[i];
        }
      }
    }
  });
}

// The spacing of FP8 values around |v|: 2^(floor(log2|v|) - mantissa bits) in the
// normal range, the subnormal quantum 2^(1 - bias - mantissa bits) below it.
double fp8_ulp(double v, DType fp8) {
  const DTypeInfo& f = dtype_info(fp8);
  const int min_exponent = 1 - f.exponent_bias;
  const int exponent = v < f.min_normal ? min_exponent : std::ilogb(v);
  return std::ldexp(1.0, std::max(exponent, min_exponent) - f.mantissa_bits);
}

// Rounding to nearest costs at most half an FP8 ulp of the scaled value:
//   |dequantize(quantize(x)) - x| * scale <= ulp(|x * scale|) / 2 + 2^-21 |x * scale|,
// computed in double with scale = 1 / scale_inv. The second term covers the f32
// roundings around the FP8 one (x * scale, 1 / scale, code * scale_inv: 2^-24
// relative each, with room to spare). Current scaling saturates nothing, so the
// bound holds for every element.
TEST_P(QuantizeKernel, RoundTripErrorIsWithinHalfAnUlpOfTheFormat) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for_each_input(rng, [&](const testing::QuantizeCase& qc, int64_t rows, int64_t cols,
                          const std::vector<float>& x) {
    const QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, false);
    const Quantized q = testing::quantize_on(device, x, rows, cols, run);
    ASSERT_EQ(q.saturated, 0);
    const std::vector<float> y = testing::dequantize_on(device, q.data, q.scale_inv_raw, rows, cols,
                                                        qc.grid, qc.fp8, DType::f32);
    const int64_t br = qc.grid.block_rows == 0 ? rows : qc.grid.block_rows;
    const int64_t bc = qc.grid.block_cols == 0 ? cols : qc.grid.block_cols;
    const int64_t scale_cols = (cols + bc - 1) / bc;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double scale = 1.0 / q.scale_inv[r / br * scale_cols + c / bc];
        const double xv = x[r * cols + c], v = std::fabs(xv * scale);
        const double error = std::fabs(y[r * cols + c] - xv) * scale;
        const double bound = fp8_ulp(v, qc.fp8) / 2 + std::ldexp(v, -21);
        if (!(error <= bound)) {
          FAIL() << "[" << r << ", " << c << "] x = " << xv << " scaled " << v << ": error "
                 << error << " > " << bound;
        }
      }
    }
  });
}

// The paths of the CUDA kernels in full: many 128x128 tiles with ragged edges, rows
// that are not whole 16-byte vectors, misaligned tensors (element loads and stores),
// with and without the transposed copy, the amax and the counts, current and given
// (delayed) per-tensor scales, every grid, both input dtypes; on a GPU under both FP8
// encoders (OCTET_CUDA_FP8_CVT). The GPU must reproduce the CPU kernel bit for bit
// (the CPU tests hold that one to the reference); the CPU instance checks the reference.
TEST_P(QuantizeKernel, MultiTileOddShapesMatchTheCpuKernelBitForBit) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  std::vector<QuantizeRun> runs;
  for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
    runs.push_back(testing::make_run(qc.grid, qc.fp8, qc.in));
  }
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    for (DType in : {DType::f32, DType::bf16}) {
      QuantizeRun run = testing::make_run(testing::kTensorGrid, fp8, in);
      run.given_scale = 1.0f;  // chosen per input below
      runs.push_back(run);
    }
  }
  int turn = 0;
  for (const char* cvt : testing::fp8_cvt_modes(device)) {
    const testing::ScopedEnv env("OCTET_CUDA_FP8_CVT", cvt);
    for (QuantizeRun run : runs) {
      for (const auto& shape : testing::kMultiTileShapes) {
        const int t = turn++;
        const int64_t rows = shape[0], cols = shape[1];
        run.with_transposed = t % 2 == 0;
        run.counts = t / 2 % 2 == 0;
        run.amax = t / 4 % 3 != 2;
        run.misaligned = t % 5 == 4;
        const testing::Distribution d = testing::kDistributions[t % 3];
        const std::vector<float> x = testing::random_matrix(d, rows * cols, run.in, rng);
        if (run.given_scale) {
          // The power of two that maps amax to (max, 4 max]: the largest values saturate.
          double amax = 0.0;
          for (float v : x) amax = std::max(amax, std::fabs(static_cast<double>(v)));
          const double max = testing::fp8_max(run.fp8);
          run.given_scale = amax > 0.0 ? std::ldexp(1.0f, std::ilogb(max / amax) + 1) : 1.0f;
        }
        SCOPED_TRACE(std::string("OCTET_CUDA_FP8_CVT=") + cvt + " grid {" +
                     std::to_string(run.grid.block_rows) + ", " +
                     std::to_string(run.grid.block_cols) + (run.grid.e8m0 ? ", e8m0} " : "} ") +
                     dtype_name(run.in) + "->" + dtype_name(run.fp8) + " [" + std::to_string(rows) +
                     ", " + std::to_string(cols) + "] " + testing::distribution_name(d) +
                     (run.given_scale ? " given scale" : "") +
                     (run.with_transposed ? " transposed" : "") + (run.counts ? " counts" : "") +
                     (run.amax ? " amax" : "") + (run.misaligned ? " misaligned" : ""));
        const Quantized got = testing::quantize_on(device, x, rows, cols, run);
        if (device.is_cpu()) {
          expect_matches_reference(got, x, rows, cols, run);
          if (run.with_transposed) expect_transposed_matches_reference(got, x, rows, cols, run);
        } else {
          const Quantized want = testing::quantize_on(Device::cpu(), x, rows, cols, run);
          expect_same_outputs(got, want, rows, cols, run);
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Per-row scales on rows longer than a warp covers (32 threads x 4 vectors of 16 bytes: 512
// f32 or 1024 bf16 columns) take the per-row kernel's block-wide branch: the block's warps
// combine their amax through shared memory, the row stays in registers up to 256 x 4 vectors
// (4096 f32, 8192 bf16 columns) and is read a second time past that. The widths are odd and
// sit just past each bound for one input type or the other; aligned and misaligned (element
// loads), with and without counts, under both FP8 encoders on a GPU; bit for bit against the
// CPU kernel (the CPU instance: against the reference).
TEST_P(QuantizeKernel, LongRowsWithPerRowScalesMatchTheCpuKernelBitForBit) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t shapes[][2] = {{3, 513}, {5, 1031}, {2, 4099}, {3, 8201}};
  int turn = 0;
  for (const char* cvt : testing::fp8_cvt_modes(device)) {
    const testing::ScopedEnv env("OCTET_CUDA_FP8_CVT", cvt);
    for (DType in : {DType::f32, DType::bf16}) {
      for (DType fp8 : {DType::e4m3, DType::e5m2}) {
        for (const auto& shape : shapes) {
          const int t = turn++;
          const int64_t rows = shape[0], cols = shape[1];
          QuantizeRun run = testing::make_run(testing::kRowGrid, fp8, in, false);
          run.counts = t % 2 == 0;
          run.misaligned = t % 3 == 2;
          const testing::Distribution d = testing::kDistributions[t % 3];
          const std::vector<float> x = testing::random_matrix(d, rows * cols, in, rng);
          SCOPED_TRACE(std::string("OCTET_CUDA_FP8_CVT=") + cvt + " " + dtype_name(in) + "->" +
                       dtype_name(fp8) + " [" + std::to_string(rows) + ", " + std::to_string(cols) +
                       "] " + testing::distribution_name(d) + (run.counts ? " counts" : "") +
                       (run.misaligned ? " misaligned" : ""));
          const Quantized got = testing::quantize_on(device, x, rows, cols, run);
          if (device.is_cpu()) {
            expect_matches_reference(got, x, rows, cols, run);
          } else {
            expect_same_outputs(got, testing::quantize_on(Device::cpu(), x, rows, cols, run), rows,
                                cols, run);
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, QuantizeKernel, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

// The CPU loops exist once per instruction-set level (OCTET_CPU_ISA caps it, as for
// kernels::convert); each level the machine has must match the reference.
TEST(QuantizeKernelCpu, EveryInstructionSetVariantMatchesTheReference) {
  const char* saved = std::getenv("OCTET_CPU_ISA");
  const std::string restore = saved ? saved : "";
  testing::Rng rng(testing::fresh_seed());
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    SCOPED_TRACE(std::string("OCTET_CPU_ISA=") + isa);
    setenv("OCTET_CPU_ISA", isa, 1);
    for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
      SCOPED_TRACE(qc.name());
      const int64_t rows = 130, cols = 257;
      const std::vector<float> x =
          testing::random_matrix(testing::Distribution::heavy_tailed, rows * cols, qc.in, rng);
      const QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, true);
      const Quantized got = testing::quantize_on(Device::cpu(), x, rows, cols, run);
      expect_matches_reference(got, x, rows, cols, run);
      const Quantized want_t =
          testing::quantize_reference(testing::transposed(x, rows, cols), cols, rows, run);
      expect_same_bytes(got.data_t, want_t.data, rows, 1, "data_t");
    }
  }
  setenv("OCTET_CPU_ISA", "avx9000", 1);
  EXPECT_THROW(testing::quantize_on(Device::cpu(), {1.0f}, 1, 1, QuantizeRun()), Error);
  if (saved) {
    setenv("OCTET_CPU_ISA", restore.c_str(), 1);
  } else {
    unsetenv("OCTET_CPU_ISA");
  }
}

// The codes widened to bf16 (QuantizeOutputs::wide, what the CPU's GEMMs multiply): each value is
// its code's, bit for bit (a NaN code a NaN), on every grid, format, input and instruction-set
// level, with the transposed copy and without, and asking for it changes no other output. Per
// tensor the encoding pass widens 4096 values at a time: one chunk of ragged pieces (130 x 257),
// several chunks over the threads (300 x 700), one value; and under Overflow::nonfinite an x with
// a NaN and infinities, whose codes are NaN and Inf.
TEST(QuantizeKernelCpu, WideCopyHoldsEachCodesValueAndChangesNothingElse) {
  const char* saved = std::getenv("OCTET_CPU_ISA");
  const std::string restore = saved ? saved : "";
  testing::Rng rng(testing::fresh_seed());
  auto expect_wide = [](const Quantized& q, DType fp8) {
    ASSERT_EQ(q.wide.size(), q.data.size());
    int64_t bad = 0;
    for (size_t i = 0; i < q.data.size(); ++i) {
      const float v = fp8_to_f32(q.data[i], fp8);
      const uint16_t w = q.wide[i];
      const bool ok = std::isnan(v) ? (w & 0x7F80) == 0x7F80 && (w & 0x7F) != 0
                                    : w == static_cast<uint16_t>(f32_bits(v) >> 16);
      if (!ok && bad++ < 5) {
        ADD_FAILURE() << "value " << i << ": code 0x" << std::hex << int(q.data[i]) << " wide 0x"
                      << w << std::dec << ", want " << v;
      }
    }
    EXPECT_EQ(bad, 0);
  };
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    SCOPED_TRACE(std::string("OCTET_CPU_ISA=") + isa);
    setenv("OCTET_CPU_ISA", isa, 1);
    for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
      for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{130, 257}, {300, 700}, {1, 1}}) {
        for (const bool with_t : {false, true}) {
          SCOPED_TRACE(qc.name() + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]" +
                       (with_t ? " with data_t" : ""));
          const std::vector<float> x =
              testing::random_matrix(testing::Distribution::heavy_tailed, rows * cols, qc.in, rng);
          QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, with_t);
          const Quantized plain = testing::quantize_on(Device::cpu(), x, rows, cols, run);
          run.wide = true;
          const Quantized got = testing::quantize_on(Device::cpu(), x, rows, cols, run);
          expect_same_outputs(got, plain, rows, cols, run);
          expect_wide(got, qc.fp8);
        }
      }
      std::vector<float> x =
          testing::random_matrix(testing::Distribution::normal, 130 * 257, qc.in, rng);
      x[5] = NAN;
      x[7] = INFINITY;
      x[4200] = -INFINITY;
      QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, false);
      run.overflow = Overflow::nonfinite;
      run.wide = true;
      const Quantized got = testing::quantize_on(Device::cpu(), x, 130, 257, run);
      SCOPED_TRACE(qc.name() + " with NaN and Inf");
      expect_matches_reference(got, x, 130, 257, run);
      expect_wide(got, qc.fp8);
    }
    if (::testing::Test::HasFailure()) break;
  }
  if (saved) {
    setenv("OCTET_CPU_ISA", restore.c_str(), 1);
  } else {
    unsetenv("OCTET_CPU_ISA");
  }
}

// A given amax (its producer's, QuantizeOptions::given_amax) takes the amax pass's place: with x's
// own amax every output is the bits of the quantize that took it (data, scale, wide, amax,
// counts), current and delayed (a given scale) alike, bf16 and f32 x, on every instruction-set
// level, over several chunks (300 x 700) and a tail; with twice the amax the scale halves. Other
// grids and a tensor that is not f32[1] are refused.
TEST(QuantizeKernelCpu, AGivenAmaxTakesThePlaceOfTheAmaxPass) {
  using testing::GuardedArray;
  testing::Rng rng(testing::fresh_seed());
  testing::for_each_cpu_isa([&] {
    for (const DType in : {DType::bf16, DType::f32}) {
      for (const bool delayed : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(in)) + (delayed ? " delayed" : " current"));
        const int64_t rows = 300, cols = 700, n = rows * cols;
        const std::vector<float> x =
            testing::random_matrix(testing::Distribution::heavy_tailed, n, in, rng);
        GuardedArray xa(Device::cpu(), in, {rows, cols});
        if (in == DType::f32) {
          xa.write(x.data());
        } else {
          std::vector<uint16_t> b(x.size());
          for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
          xa.write(b.data());
        }
        float amax = 0.0f;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        auto run = [&](float given) {
          struct Out {
            std::vector<uint8_t> data, scale, wide, amax, counts;
          };
          GuardedArray data(Device::cpu(), DType::e4m3, {rows, cols});
          GuardedArray scale(Device::cpu(), DType::f32, {1, 1});
          GuardedArray wide(Device::cpu(), DType::bf16, {rows, cols});
          GuardedArray amax_out(Device::cpu(), DType::f32, {1});
          GuardedArray counts(Device::cpu(), DType::i32, {2});
          GuardedArray given_amax(Device::cpu(), DType::f32, {1});
          GuardedArray given_scale(Device::cpu(), DType::f32, {1});
          given_amax.write(&given);
          const float s = 0.5f;
          given_scale.write(&s);
          kernels::QuantizeOutputs out;
          out.data = data.tensor();
          out.scale_inv = scale.tensor();
          out.wide = wide.tensor();
          out.amax = amax_out.tensor();
          out.counts = counts.tensor();
          kernels::QuantizeOptions o;
          if (delayed) o.given_scale = given_scale.tensor();
          if (given >= 0.0f) o.given_amax = given_amax.tensor();
          kernels::quantize(xa.tensor(), out, o);
          return Out{data.read(), scale.read(), wide.read(), amax_out.read(), counts.read()};
        };
        const auto own = run(-1.0f), given = run(amax);
        EXPECT_EQ(given.data, own.data);
        EXPECT_EQ(given.scale, own.scale);
        EXPECT_EQ(given.wide, own.wide);
        EXPECT_EQ(given.amax, own.amax);
        EXPECT_EQ(given.counts, own.counts);
        const auto twice = run(2.0f * amax);
        float got_amax = 0.0f, s_own = 0.0f, s_twice = 0.0f;
        std::memcpy(&got_amax, twice.amax.data(), 4);
        std::memcpy(&s_own, own.scale.data(), 4);
        std::memcpy(&s_twice, twice.scale.data(), 4);
        EXPECT_EQ(got_amax, 2.0f * amax);
        // scale_inv = amax / 448, a power of two apart: exact either way (current); a given
        // scale keeps its own.
        EXPECT_EQ(s_twice, delayed ? s_own : 2.0f * s_own);
      }
    }
  });
}

// x f32 [4, 32] of ones and its per-tensor outputs, for the refusal tests below; refused(out, o,
// part) expects the quantize to throw an error containing `part`.
struct OnesToQuantize {
  testing::GuardedArray x{Device::cpu(), DType::f32, {4, 32}};
  testing::GuardedArray data{Device::cpu(), DType::e4m3, {4, 32}};
  testing::GuardedArray scale{Device::cpu(), DType::f32, {1, 1}};
  OnesToQuantize() {
    const std::vector<float> ones(128, 1.0f);
    x.write(ones.data());
  }
  kernels::QuantizeOutputs outputs() const {
    kernels::QuantizeOutputs out;
    out.data = data.tensor();
    out.scale_inv = scale.tensor();
    return out;
  }
  void refused(const kernels::QuantizeOutputs& out, const kernels::QuantizeOptions& o,
               const std::string& part) const {
    try {
      kernels::quantize(x.tensor(), out, o);
      ADD_FAILURE() << "accepted; expected: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
};

TEST(QuantizeKernelCpu, AGivenAmaxOfAnotherGridOrShapeIsRefused) {
  const OnesToQuantize q;
  testing::GuardedArray row_scale(Device::cpu(), DType::f32, {4, 1});
  testing::GuardedArray two(Device::cpu(), DType::f32, {2});
  testing::GuardedArray one(Device::cpu(), DType::f32, {1});
  kernels::QuantizeOutputs out = q.outputs();
  kernels::QuantizeOptions o;
  o.given_amax = two.tensor();
  q.refused(out, o, "given_amax must be f32[1] on cpu, got f32[2]");
  o.given_amax = one.tensor();
  o.grid = {1, 0, false};
  out.scale_inv = row_scale.tensor();
  q.refused(out, o, "a given amax is x's, one for the tensor; the grid must be {0, 0}");
}

// A wide output of the wrong dtype or shape is refused, naming what it must be.
TEST(QuantizeKernelCpu, AWideOutputOfTheWrongShapeOrDtypeIsRefused) {
  using testing::GuardedArray;
  const OnesToQuantize q;
  GuardedArray wrong_shape(Device::cpu(), DType::bf16, {4, 16});
  GuardedArray wrong_dtype(Device::cpu(), DType::f32, {4, 32});
  for (const GuardedArray* w : {&wrong_shape, &wrong_dtype}) {
    kernels::QuantizeOutputs out = q.outputs();
    out.wide = w->tensor();
    q.refused(out, kernels::QuantizeOptions{}, "wide must be bf16[4, 32]");
  }
}

// The transposed copy of per-row-scaled xᵀ (the row recipe) where x has few columns is cut
// into row slabs when the column chunks are too few for the threads: the slabs' column maxima
// meet before any encodes. On 1 to 8 threads (one chunk of columns to more chunks than two per
// thread, slabs of one tile to many, a last slab and chunk that are short), with a NaN in the
// last row's column, whose scale it must poison: the reference's bytes, the same on every count.
TEST(QuantizeKernelCpu, TransposedRowCopyMatchesTheReferenceOnEveryThreadCount) {
  testing::Rng rng(testing::fresh_seed());
  const int saved = omp_get_max_threads();
  const int64_t shapes[][2] = {{2048, 64}, {4100, 24}, {1000, 160}, {300, 250}, {130, 520}};
  for (const auto& shape : shapes) {
    const int64_t rows = shape[0], cols = shape[1];
    for (DType in : {DType::bf16, DType::f32}) {
      for (DType fp8 : {DType::e4m3, DType::e5m2}) {
        std::vector<float> x =
            testing::random_matrix(testing::Distribution::heavy_tailed, rows * cols, in, rng);
        x[(rows - 1) * cols + cols / 2] = NAN;
        const QuantizeRun run = testing::make_run(testing::kRowGrid, fp8, in, true);
        const Quantized want_t =
            testing::quantize_reference(testing::transposed(x, rows, cols), cols, rows, run);
        for (int threads : {1, 2, 3, 4, 8}) {
          SCOPED_TRACE(std::string(dtype_name(in)) + "->" + dtype_name(fp8) + " [" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "] on " +
                       std::to_string(threads) + " threads");
          omp_set_num_threads(threads);
          const Quantized got = testing::quantize_on(Device::cpu(), x, rows, cols, run);
          omp_set_num_threads(saved);
          expect_same_bytes(got.data_t, want_t.data, rows, 1, "data_t");
          expect_same_bytes(got.scale_inv_t_raw, want_t.scale_inv_raw, 1, 4, "scale_inv_t");
          expect_matches_reference(got, x, rows, cols, run);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace octet
