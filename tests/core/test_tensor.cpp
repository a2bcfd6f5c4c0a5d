// tests/core/test_tensor.cpp: Shape, Tensor, Buffer, Device and the DType table.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "testing.h"

namespace octet {
namespace {

TEST(DType, TableRowsDescribeTheirFormats) {
  // Each max_finite follows from the bit layout; recompute it independently.
  for (DType d : {DType::bf16, DType::f16, DType::e5m2}) {
    const DTypeInfo& i = dtype_info(d);
    const double max = (2.0 - std::ldexp(1.0, -i.mantissa_bits)) *
                       std::ldexp(1.0, (1 << i.exponent_bits) - 2 - i.exponent_bias);
    EXPECT_EQ(i.max_finite, max) << i.name;
  }
  // E4M3 keeps the top exponent for finite values except mantissa 111 (NaN).
  EXPECT_EQ(dtype_info(DType::e4m3).max_finite, 1.75 * 256);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_from_name("e5m2"), DType::e5m2);
  EXPECT_THROW(dtype_from_name("fp8"), Error);
}

TEST(Shape, CountsAndFlattensLeadingDimensions) {
  const Shape s{2, 3, 5};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 30);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.cols(), 5);
  EXPECT_EQ(s.str(), "[2, 3, 5]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), Error);
  EXPECT_THROW((Shape{-1}), Error);
}

TEST(Buffer, ViewsAreBoundsCheckedAndAligned) {
  Buffer buf(Device::cpu(), 100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  const Tensor t = buf.view(DType::f32, {5, 5});
  EXPECT_EQ(t.nbytes(), 100u);
  EXPECT_THROW(buf.view(DType::f32, {5, 6}), Error);
  EXPECT_THROW(buf.view(DType::f32, {2}, 2), Error);  // misaligned for f32
  Buffer moved = std::move(buf);
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 100u);
}

TEST(Device, NamesRoundTripAndBadNamesAreErrors) {
  EXPECT_EQ(device_from_name("cpu"), Device::cpu());
  EXPECT_EQ(device_from_name("cuda:1"), Device::cuda(1));
  EXPECT_EQ(device_name(Device::cuda(2)), "cuda:2");
  EXPECT_THROW(device_from_name("gpu"), Error);
  EXPECT_THROW(device_from_name("cuda:x"), Error);
  EXPECT_GE(cuda_device_count(), 0);
}

class BufferOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(BufferOnDevice, CopiesRoundTripThroughTheDevice) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  std::vector<float> host(1000), back(1000, 0.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  Buffer dev = Buffer::for_tensor(device, DType::f32, {1000});
  const Tensor d = dev.tensor(DType::f32, {1000});
  copy_tensor(Tensor(host.data(), DType::f32, {1000}), d);
  copy_tensor(d, Tensor(back.data(), DType::f32, {1000}));
  EXPECT_EQ(std::memcmp(host.data(), back.data(), 4000), 0);
  EXPECT_THROW(copy_tensor(d, Tensor(back.data(), DType::bf16, {1000})), Error);
}

INSTANTIATE_TEST_SUITE_P(Devices, BufferOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet
