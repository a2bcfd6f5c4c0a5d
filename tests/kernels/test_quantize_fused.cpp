// tests/kernels/test_quantize_fused.cpp: the CPU's one-pass quantize of x and its transposed
// copy (kernels/cpu/quantize_fused_cpu.cpp) against the two-pass kernels it replaces, every
// output byte for byte (the two-pass kernels are tested against the float64/ml_dtypes
// references in test_quantize.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/cpu/quantize_fused.h"
#include "kernels/quantize_testing.h"
#include "testing.h"

namespace octet {
namespace {

using kernels::ScaleGrid;

struct Outputs {
  Buffer data, scale_inv, data_t, scale_inv_t, amax, counts;
  kernels::QuantizeOutputs out;
};

Outputs make_outputs(int64_t rows, int64_t cols, ScaleGrid grid, DType fp8, bool counts) {
  const DType sd = grid.e8m0 ? DType::e8m0 : DType::f32;
  const Shape s = kernels::scale_grid_shape(rows, cols, grid);
  const Shape st = kernels::scale_grid_shape(cols, rows, grid);
  Outputs o;
  o.data = Buffer::for_tensor(Device::cpu(), fp8, {rows, cols});
  o.scale_inv = Buffer::for_tensor(Device::cpu(), sd, s);
  o.data_t = Buffer::for_tensor(Device::cpu(), fp8, {cols, rows});
  o.scale_inv_t = Buffer::for_tensor(Device::cpu(), sd, st);
  o.amax = Buffer::for_tensor(Device::cpu(), DType::f32, {1});
  o.counts = Buffer::for_tensor(Device::cpu(), DType::i32, {2});
  // Different garbage in each: every byte must be written.
  for (Buffer* b : {&o.data, &o.scale_inv, &o.data_t, &o.scale_inv_t, &o.amax, &o.counts}) {
    std::memset(b->data(), 0x5A, b->bytes());
  }
  o.out.data = o.data.tensor(fp8, {rows, cols});
  o.out.scale_inv = o.scale_inv.tensor(sd, s);
  o.out.data_t = o.data_t.tensor(fp8, {cols, rows});
  o.out.scale_inv_t = o.scale_inv_t.tensor(sd, st);
  o.out.amax = o.amax.tensor(DType::f32, {1});
  if (counts) o.out.counts = o.counts.tensor(DType::i32, {2});
  return o;
}

void expect_same(const Buffer& got, const Buffer& want, const char* what) {
  ASSERT_EQ(got.bytes(), want.bytes()) << what;
  const auto* g = static_cast<const uint8_t*>(got.data());
  const auto* w = static_cast<const uint8_t*>(want.data());
  for (size_t i = 0; i < got.bytes(); ++i) {
    if (g[i] != w[i]) {
      ADD_FAILURE() << what << " differs at byte " << i << ": fused " << int{g[i]} << ", two-pass "
                    << int{w[i]} << " (of " << got.bytes() << ")";
      return;
    }
  }
}

struct GridCase {
  const char* name;
  ScaleGrid grid;
};

TEST(QuantizeFusedCpu, EveryOutputMatchesTheTwoPassKernelsByteForByte) {
  const GridCase grids[] = {
      {"tensor", testing::kTensorGrid}, {"row", testing::kRowGrid},   {"1x128", testing::kTileGrid},
      {"mx", testing::kMxGrid},         {"1x32 f32", {1, 32, false}}, {"1x64", {1, 64, false}},
      {"1x48", {1, 48, false}},         {"1x300", {1, 300, false}},   {"mx 1x64", {1, 64, true}},
      {"0x128", {0, 128, false}},       {"128x0", {128, 0, false}}};
  // One tile, ragged tiles both ways, many row tiles (the parallel passes), a column.
  const int64_t shapes[][2] = {{16, 64}, {130, 257}, {2048, 256}, {48, 1000}, {300, 1}};
  testing::Rng rng(testing::fresh_seed());
  int turn = 0;
  for (const GridCase& g : grids) {
    for (const auto& shape : shapes) {
      for (DType in : {DType::f32, DType::bf16}) {
        for (DType fp8 : {DType::e4m3, DType::e5m2}) {
          const int t = turn++;
          const int64_t rows = shape[0], cols = shape[1];
          std::vector<float> x =
              testing::random_matrix(testing::kDistributions[t % 3], rows * cols, in, rng);
          // Some runs hold an Inf or a NaN (the amax and the scales must carry it alike).
          if (t % 7 == 3)
            x[static_cast<size_t>(t) % x.size()] = std::numeric_limits<float>::infinity();
          if (t % 11 == 5) x[static_cast<size_t>(t * 3) % x.size()] = std::nanf("");
          kernels::QuantizeOptions o;
          o.grid = g.grid;
          o.power_of_two_scales = t % 4 == 1 && !g.grid.e8m0;
          o.overflow = t % 5 == 2 ? Overflow::nonfinite : Overflow::saturate;
          Buffer given = Buffer::for_tensor(Device::cpu(), DType::f32, {1});
          const bool per_tensor = g.grid.block_rows == 0 && g.grid.block_cols == 0;
          if (per_tensor && t % 3 == 1) {
            given.tensor(DType::f32, {1}).as<float>()[0] = std::ldexp(1.0f, t % 9 - 4);
            o.given_scale = given.tensor(DType::f32, {1});
          }
          SCOPED_TRACE(std::string(g.name) + " " + dtype_name(in) + "->" + dtype_name(fp8) + " [" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "] turn " +
                       std::to_string(t));
          const std::vector<uint8_t> bytes = testing::input_bytes(x, in);
          const Tensor xt(const_cast<uint8_t*>(bytes.data()), in, {rows, cols}, Device::cpu());
          const bool counts = t % 2 == 0;
          Outputs fused = make_outputs(rows, cols, g.grid, fp8, counts);
          Outputs two = make_outputs(rows, cols, g.grid, fp8, counts);
          // Every grid of one row by N columns takes the fused pass here (the others only
          // where the grid is one block over both x and xᵀ).
          const bool taken = kernels::cpu::quantize_fused(xt, fused.out, o);
          // E8M0 blocks must lie within a 64 x 64 tile both ways (no room for amax bits).
          const int64_t bc = std::min(g.grid.block_cols, cols),
                        bh = std::min(g.grid.block_cols, rows);
          const bool per_row =
              g.grid.block_rows == 1 && (!g.grid.e8m0 || (64 % bc == 0 && 64 % bh == 0));
          const bool one_block =
              (g.grid.block_rows == 0 || g.grid.block_rows >= std::max(rows, cols)) &&
              (g.grid.block_cols == 0 || g.grid.block_cols >= std::max(rows, cols));
          ASSERT_EQ(taken, per_row || one_block || per_tensor);
          if (!taken) continue;
          kernels::cpu::quantize_two_pass(xt, two.out, o);
          expect_same(fused.data, two.data, "data");
          expect_same(fused.scale_inv, two.scale_inv, "scale_inv");
          expect_same(fused.data_t, two.data_t, "data_t");
          expect_same(fused.scale_inv_t, two.scale_inv_t, "scale_inv_t");
          expect_same(fused.amax, two.amax, "amax");
          if (counts) expect_same(fused.counts, two.counts, "counts");
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// The cases the fused pass leaves to the two-pass kernels: no transposed copy, NxN blocks,
// E8M0 blocks wider than a tile (no room for amax bits) and one block over x but not over xᵀ.
TEST(QuantizeFusedCpu, DeclinesWhatItDoesNotCover) {
  const int64_t rows = 256, cols = 256;
  std::vector<float> x(static_cast<size_t>(rows * cols), 1.0f);
  const Tensor xt(x.data(), DType::f32, {rows, cols}, Device::cpu());
  kernels::QuantizeOptions o;
  o.grid = testing::kRowGrid;
  Outputs a = make_outputs(rows, cols, o.grid, DType::e4m3, true);
  a.out.data_t = Tensor();
  a.out.scale_inv_t = Tensor();
  EXPECT_FALSE(kernels::cpu::quantize_fused(xt, a.out, o));
  for (ScaleGrid grid : {testing::kBlockGrid, ScaleGrid{1, 128, true}}) {
    o.grid = grid;
    Outputs b = make_outputs(rows, cols, grid, DType::e4m3, true);
    EXPECT_FALSE(kernels::cpu::quantize_fused(xt, b.out, o));
  }
  // One block over x but three over xᵀ.
  o.grid = {0, 128, false};
  const Tensor column(x.data(), DType::f32, {300, 1}, Device::cpu());
  Outputs c = make_outputs(300, 1, o.grid, DType::e4m3, true);
  EXPECT_FALSE(kernels::cpu::quantize_fused(column, c.out, o));
}

}  // namespace
}  // namespace octet
