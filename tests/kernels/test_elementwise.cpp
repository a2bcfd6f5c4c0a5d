// tests/kernels/test_elementwise.cpp: kernels::add against float64 on fresh random
// inputs (also in place), every CPU instruction-set variant against the scalar formula, and its
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/convert.h"

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

// The CPU's add exists per instruction-set level (OCTET_CPU_ISA caps it); each level the machine
// has must give the scalar formula's bits: one fp32 addition, rounded once by f32_to_bf16 (bf16)
// or not at all (f32). Inputs: every bf16 value (as bf16, and as f32 with random low halves)
// plus a random neighbour of similar magnitude (sums that round, ties included), plus 0, Inf and
// NaN; lengths 1 to 40 (every tail), and a long run over the threads. Tolerance: none.
TEST(AddCpu, EveryInstructionSetVariantGivesTheScalarBits) {
  testing::Rng rng(testing::fresh_seed());
  auto pick = [&rng](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  std::vector<uint16_t> a16, b16;
  std::vector<float> a32, b32;
  const uint16_t specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFC0};
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto a = static_cast<uint16_t>(bits);
    // A neighbour: the same sign and exponent give sums that round; else a special value.
    const uint16_t b =
        pick(0, 7) < 6 ? static_cast<uint16_t>((a & 0xFF80) | pick(0, 0x7F)) : specials[pick(0, 5)];
    a16.push_back(a);
    b16.push_back(b);
    a32.push_back(f32_from_bits(bits << 16 | pick(0, 0xFFFF)));
    b32.push_back(f32_from_bits(static_cast<uint32_t>(b) << 16 | pick(0, 0xFFFF)));
  }
  auto run = [&](DType dtype, const void* a, const void* b, int64_t n, void* out) {
    const Tensor ta(const_cast<void*>(a), dtype, {n}, Device::cpu());
    const Tensor tb(const_cast<void*>(b), dtype, {n}, Device::cpu());
    kernels::add(ta, tb, Tensor(out, dtype, {n}, Device::cpu()));
  };
  testing::for_each_cpu_isa([&] {
    const auto n = static_cast<int64_t>(a16.size());
    std::vector<uint16_t> out16(a16.size());
    std::vector<float> out32(a32.size());
    // Every length up to 40 at an odd offset (tails of both vector widths), then all of it.
    for (int64_t len = 1; len <= 41; ++len) {
      const int64_t at = len <= 40 ? 3 * len : 0, count = len <= 40 ? len : n;
      run(DType::bf16, a16.data() + at, b16.data() + at, count, out16.data() + at);
      run(DType::f32, a32.data() + at, b32.data() + at, count, out32.data() + at);
      for (int64_t i = at; i < at + count; ++i) {
        // Which payload a sum of two NaNs keeps IEEE 754 leaves open (x86 keeps the first
        // operand's, and a compiler may swap them): there a NaN is all that is asked.
        const uint16_t want16 = f32_to_bf16(bf16_to_f32(a16[i]) + bf16_to_f32(b16[i]));
        if ((want16 & 0x7FFF) > 0x7F80 && (a16[i] & 0x7FFF) > 0x7F80 &&
            (b16[i] & 0x7FFF) > 0x7F80) {
          ASSERT_GT(out16[i] & 0x7FFF, 0x7F80) << std::hex << "bf16 0x" << a16[i] << " + NaN";
        } else {
          ASSERT_EQ(out16[i], want16) << std::hex << "bf16 0x" << a16[i] << " + 0x" << b16[i];
        }
        const float want32 = a32[i] + b32[i];
        if (std::isnan(a32[i]) && std::isnan(b32[i])) {
          ASSERT_TRUE(std::isnan(out32[i])) << std::hex << "f32 0x" << f32_bits(a32[i]) << " + NaN";
        } else {
          ASSERT_EQ(f32_bits(out32[i]), f32_bits(want32))
              << std::hex << "f32 0x" << f32_bits(a32[i]) << " + 0x" << f32_bits(b32[i]);
        }
      }
    }
  });
}

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
