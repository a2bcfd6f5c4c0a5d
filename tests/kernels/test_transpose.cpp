// tests/kernels/test_transpose.cpp: kernels::transpose against a naive loop on
// odd shapes and every element size, on every device; a transpose moves bytes,
// so the result must match exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/transpose.h"
#include "testing.h"

namespace octet {
namespace {

// Tiles are 64 x 64 and threads start above 2^16 elements: shapes below, at
// and across those sizes, thin ones in both directions, and a rank-3 input.
const Shape kTransposeShapes[] = {{1, 1},    {3, 1000}, {217, 256},  {1000, 3}, {64, 64},
                                  {65, 129}, {1, 777},  {513, 1031}, {2, 3, 5}, {7, 33, 100}};
const DType kDTypes[] = {DType::u8, DType::bf16, DType::f32, DType::e4m3};

std::vector<uint8_t> naive_transpose(const std::vector<uint8_t>& src, int64_t rows, int64_t cols,
                                     size_t size) {
  std::vector<uint8_t> dst(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(&dst[(c * rows + r) * size], &src[(r * cols + c) * size], size);
    }
  }
  return dst;
}

class Transpose : public ::testing::TestWithParam<Device> {};

TEST_P(Transpose, MatchesANaiveLoopOnOddShapes) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  for (DType dtype : kDTypes) {
    for (const Shape& shape : kTransposeShapes) {
      const int64_t rows = shape.rows(), cols = shape.cols();
      const size_t size = dtype_size(dtype);
      std::vector<uint8_t> host(static_cast<size_t>(shape.numel()) * size);
      for (uint8_t& b : host) b = static_cast<uint8_t>(rng());
      const Buffer src = Buffer::for_tensor(device, dtype, shape);
      const Buffer dst = Buffer::for_tensor(device, dtype, {cols, rows});
      copy_bytes(src.data(), device, host.data(), Device::cpu(), host.size());

      kernels::transpose(src.tensor(dtype, shape), dst.tensor(dtype, {cols, rows}));

      std::vector<uint8_t> got(host.size());
      copy_bytes(got.data(), Device::cpu(), dst.data(), device, got.size());
      const std::vector<uint8_t> want = naive_transpose(host, rows, cols, size);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
          << dtype_name(dtype) << " " << shape.str();
    }
  }
}

TEST_P(Transpose, BadShapesDTypesAndOverlapAreErrors) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  const Buffer a(device, 4096), b(device, 4096);
  const auto expect_transpose_error = [](const Tensor& s, const Tensor& d, const char* what) {
    try {
      kernels::transpose(s, d);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[transpose]"), std::string::npos) << e.what();
    }
  };
  expect_transpose_error(a.view(DType::f32, {3, 5}), b.view(DType::f32, {3, 5}), "not transposed");
  expect_transpose_error(a.view(DType::f32, {3, 5}), b.view(DType::f32, {5, 4}), "wrong rows");
  expect_transpose_error(a.view(DType::f32, {3, 5}), b.view(DType::bf16, {5, 3}), "dtype");
  expect_transpose_error(a.view(DType::f32, {3, 5}), a.view(DType::f32, {5, 3}, 32), "overlap");
}

INSTANTIATE_TEST_SUITE_P(Devices, Transpose, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet
