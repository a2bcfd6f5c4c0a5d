// tests/kernels/test_elementwise.cpp: kernels::add against float64 on fresh random
// inputs (also in place), and its errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "layer_testing.h"

namespace octet {
namespace {

class AddOnDevice : public ::testing::TestWithParam<Device> {};

// out = a + b against float64 and, off the CPU, against the CPU kernel (bit for bit: one
// fp32 addition rounded once, and one rounding to bf16, on both devices).
void expect_add_matches(Device device, int64_t rows, int64_t cols, bool misaligned,
                        testing::Rng& rng) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::string what = std::string(dtype_name(dtype)) + " [" + std::to_string(rows) + ", " +
                             std::to_string(cols) + "]" + (misaligned ? " misaligned" : "");
    std::vector<double> a = testing::uniform(rows * cols, -4, 4, rng);
    std::vector<double> b = testing::uniform(rows * cols, -4, 4, rng);
    const auto at = misaligned ? testing::upload_misaligned(device, dtype, {rows, cols}, a)
                               : testing::upload(device, dtype, {rows, cols}, a);
    const auto bt = testing::upload(device, dtype, {rows, cols}, b);
    const auto out = testing::upload(device, dtype, {rows, cols}, std::vector<double>(a.size()));
    kernels::add(at.tensor, bt.tensor, out.tensor);
    // Tolerance: one fp32 rounding of an exact sum, then one to bf16 (2^-8 relative).
    std::vector<testing::Approx> want;
    for (size_t i = 0; i < a.size(); ++i) {
      want.push_back(testing::round_to(dtype, testing::exact(a[i]) + testing::exact(b[i])));
    }
    const std::vector<double> sum = testing::download(out.tensor);
    testing::expect_within(sum, want, what);
    if (device.is_cpu()) continue;
    const auto ac = testing::upload(Device::cpu(), dtype, {rows, cols}, a);
    const auto bc = testing::upload(Device::cpu(), dtype, {rows, cols}, b);
    kernels::add(ac.tensor, bc.tensor, bc.tensor);
    EXPECT_EQ(sum, testing::download(bc.tensor)) << what << ": the CPU kernel's bits";
  }
}

TEST_P(AddOnDevice, SumsRoundOnceAndMayOverwriteAnOperand) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  const int64_t rows = 2 * 9, cols = 70;
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<double> a = testing::uniform(rows * cols, -4, 4, rng);
    std::vector<double> b = testing::uniform(rows * cols, -4, 4, rng);
    const auto at = testing::upload(device, dtype, {rows, cols}, a);
    const auto bt = testing::upload(device, dtype, {rows, cols}, b);
    const auto out = testing::upload(device, dtype, {rows, cols}, std::vector<double>(rows * cols));
    // Tolerance: one fp32 rounding of an exact sum, then one to bf16 (2^-8 relative).
    std::vector<testing::Approx> want;
    for (size_t i = 0; i < a.size(); ++i) {
      want.push_back(testing::round_to(dtype, testing::exact(a[i]) + testing::exact(b[i])));
    }
    kernels::add(at.tensor, bt.tensor, out.tensor);
    const std::vector<double> sum = testing::download(out.tensor);
    testing::expect_within(sum, want, dtype_name(dtype));
    kernels::add(at.tensor, bt.tensor, bt.tensor);
    EXPECT_EQ(testing::download(bt.tensor), sum) << dtype_name(dtype) << " out = b";
    kernels::add(at.tensor, at.tensor, at.tensor);  // a + a is exact: 2a
    for (double& v : a) v *= 2;
    EXPECT_EQ(testing::download(at.tensor), a) << dtype_name(dtype) << " out = a = b";
  }
}

// Many blocks (256 threads of 8 elements) with 16-byte groups, a tail of 1..7 elements
// (2^20 + 3 is not a multiple of 8), and the element-wise path for data off a 16-byte boundary.
TEST_P(AddOnDevice, LargeOddAndMisalignedShapesMatchFloat64AndTheCpu) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::Rng rng(testing::fresh_seed());
  expect_add_matches(device, 1024, 1000, false, rng);
  expect_add_matches(device, 1, (1 << 20) + 3, false, rng);
  expect_add_matches(device, 37, 1001, true, rng);
  expect_add_matches(device, 1, 5, false, rng);
}

INSTANTIATE_TEST_SUITE_P(Devices, AddOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(AddErrors, MixedDTypesSizesAndAbsentDevicesAreRefused) {
  const Device cpu = Device::cpu();
  const auto a = testing::upload(cpu, DType::f32, {3, 4}, std::vector<double>(12));
  const auto b16 = testing::upload(cpu, DType::bf16, {3, 4}, std::vector<double>(12));
  const auto b11 = testing::upload(cpu, DType::f32, {11}, std::vector<double>(11));
  testing::expect_op_error([&] { kernels::add(a.tensor, b16.tensor, a.tensor); }, "add",
                           "must share one dtype, f32 or bf16");
  testing::expect_op_error([&] { kernels::add(a.tensor, b11.tensor, a.tensor); }, "add",
                           "b must be f32 with 12 elements");
  Tensor on_cuda = a.tensor;
  on_cuda.device = testing::absent_cuda_device();
  testing::expect_op_error([&] { kernels::add(on_cuda, on_cuda, on_cuda); }, "add", "CUDA device");
}

}  // namespace
}  // namespace octet
