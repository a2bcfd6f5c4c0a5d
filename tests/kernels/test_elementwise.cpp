// tests/kernels/test_elementwise.cpp: kernels::add against float64 on fresh random
// inputs (also in place), and its errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "layer_testing.h"

namespace octet {
namespace {

class AddOnDevice : public ::testing::TestWithParam<Device> {};

TEST_P(AddOnDevice, SumsRoundOnceAndMayOverwriteAnOperand) {
  const Device device = GetParam();
  OCTET_SKIP_UNTIL_CUDA_KERNELS(device);
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

INSTANTIATE_TEST_SUITE_P(Devices, AddOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

TEST(AddErrors, MixedDTypesSizesAndCudaAreRefused) {
  const Device cpu = Device::cpu();
  const auto a = testing::upload(cpu, DType::f32, {3, 4}, std::vector<double>(12));
  const auto b16 = testing::upload(cpu, DType::bf16, {3, 4}, std::vector<double>(12));
  const auto b11 = testing::upload(cpu, DType::f32, {11}, std::vector<double>(11));
  testing::expect_op_error([&] { kernels::add(a.tensor, b16.tensor, a.tensor); }, "add",
                           "must share one dtype, f32 or bf16");
  testing::expect_op_error([&] { kernels::add(a.tensor, b11.tensor, a.tensor); }, "add",
                           "b must be f32 with 12 elements");
  Tensor on_cuda = a.tensor;
  on_cuda.device = Device::cuda(0);
  testing::expect_op_error([&] { kernels::add(on_cuda, on_cuda, on_cuda); }, "add",
                           "has no CUDA implementation yet");
}

}  // namespace
}  // namespace octet
