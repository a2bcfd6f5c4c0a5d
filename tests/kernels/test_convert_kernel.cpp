// tests/kernels/test_convert_kernel.cpp: the array kernel kernels::convert against
// the scalar functions of core/convert.h (themselves tested against float64 in
// tests/core) for every supported pair, on every device and, on the CPU, every
// instruction-set variant. Conversions are exact: outputs must match bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "core/error.h"
#include "kernels/convert.h"
#include "kernels/cpu/bf16_round_avx512.h"
#include "kernels/cpu/isa.h"
#include "testing.h"

namespace octet {
namespace {

constexpr int64_t kLengths[] = {0, 1, 7, 63, 1000003};

// Random inputs that exercise every path: raw bit patterns (NaNs, infinities,
// huge and tiny values) mixed with values spread log-uniformly over the FP8
// range and the exact E4M3/E5M2 overflow ties.
std::vector<uint8_t> random_input(DType dtype, int64_t n, testing::Rng& rng) {
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * size);
  std::uniform_real_distribution<double> log2(-19.0, 17.0);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    float x = f32_from_bits(static_cast<uint32_t>(r >> 32));
    if (r % 4 != 0) x = static_cast<float>((r & 8 ? -1 : 1) * std::exp2(log2(rng)));
    if (r % 61 == 0) x = (r & 8) ? 464.0f : -61440.0f;
    uint8_t* out = bytes.data() + static_cast<size_t>(i) * size;
    if (dtype == DType::f32) {
      std::memcpy(out, &x, 4);
    } else if (dtype == DType::bf16 || dtype == DType::f16) {
      const uint16_t v = r % 4 == 0             ? static_cast<uint16_t>(r >> 40)
                         : dtype == DType::bf16 ? f32_to_bf16(x)
                                                : f32_to_f16(x);
      std::memcpy(out, &v, 2);
    } else {
      for (size_t b = 0; b < size; ++b) out[b] = static_cast<uint8_t>(r >> (8 * b));
    }
  }
  return bytes;
}

// The scalar definition of each pair: widen exactly to f32, then narrow.
float load_f32(DType from, const uint8_t* p) {
  uint32_t u = 0;
  std::memcpy(&u, p, dtype_size(from));
  switch (from) {
    case DType::f32:
      return f32_from_bits(u);
    case DType::bf16:
      return bf16_to_f32(static_cast<uint16_t>(u));
    case DType::f16:
      return f16_to_f32(static_cast<uint16_t>(u));
    default:
      return fp8_to_f32(static_cast<uint8_t>(u), from);
  }
}

std::vector<uint8_t> scalar_convert(DType from, DType to, Overflow mode,
                                    const std::vector<uint8_t>& src, int64_t n) {
  if (from == to) return src;
  std::vector<uint8_t> dst(static_cast<size_t>(n) * dtype_size(to));
  for (int64_t i = 0; i < n; ++i) {
    const float x = load_f32(from, src.data() + i * dtype_size(from));
    uint32_t u = 0;
    if (is_fp8(to)) u = f32_to_fp8(x, to, mode);
    if (to == DType::f32) u = f32_bits(x);
    if (to == DType::bf16) u = f32_to_bf16(x);
    if (to == DType::f16) u = f32_to_f16(x);
    std::memcpy(dst.data() + i * dtype_size(to), &u, dtype_size(to));
  }
  return dst;
}

// Runs kernels::convert on `device` with both arrays starting one element past
// an aligned boundary (so vector loops meet unaligned heads and tails), with
// guard elements around the output that must stay untouched.
std::vector<uint8_t> kernel_convert(Device device, DType from, DType to, Overflow mode,
                                    const std::vector<uint8_t>& src, int64_t n) {
  const size_t in_size = dtype_size(from), out_size = dtype_size(to);
  constexpr int64_t kGuard = 64;
  const Buffer in(device, (static_cast<size_t>(n) + 1) * in_size);
  const Buffer out(device, (static_cast<size_t>(n) + 1 + kGuard) * out_size);
  const Tensor s = in.view(from, {n}, in_size), d = out.view(to, {n}, out_size);
  if (n > 0) copy_bytes(s.data, device, src.data(), Device::cpu(), src.size());
  std::vector<uint8_t> guarded(out.bytes(), 0xA5);
  copy_bytes(out.data(), device, guarded.data(), Device::cpu(), guarded.size());

  kernels::convert(s, d, mode);

  copy_bytes(guarded.data(), Device::cpu(), out.data(), device, guarded.size());
  for (size_t b = 0; b < guarded.size(); ++b) {
    if (b >= out_size && b < out_size * (static_cast<size_t>(n) + 1)) continue;
    if (guarded[b] != 0xA5) {
      ADD_FAILURE() << "wrote outside dst at byte " << b;
      break;
    }
  }
  return {guarded.begin() + static_cast<ptrdiff_t>(out_size),
          guarded.begin() + static_cast<ptrdiff_t>(out_size * (static_cast<size_t>(n) + 1))};
}

struct Pair {
  DType from, to;
};
std::vector<Pair> supported_pairs() {
  std::vector<Pair> pairs;
  for (DType from : testing::kAllDTypes) {
    for (DType to : testing::kAllDTypes) {
      if (kernels::convert_supported(from, to)) pairs.push_back({from, to});
    }
  }
  return pairs;
}

// Compares every element and reports the first difference.
void expect_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                 const std::vector<uint8_t>& src, Pair p, Overflow mode, int64_t n) {
  ASSERT_EQ(got.size(), want.size());
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) return;
  const size_t out_size = dtype_size(p.to), in_size = dtype_size(p.from);
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(got.data() + i * out_size, want.data() + i * out_size, out_size) != 0) {
      uint32_t in = 0, g = 0, w = 0;
      std::memcpy(&in, src.data() + i * in_size, in_size);
      std::memcpy(&g, got.data() + i * out_size, out_size);
      std::memcpy(&w, want.data() + i * out_size, out_size);
      FAIL() << dtype_name(p.from) << " -> " << dtype_name(p.to)
             << (mode == Overflow::saturate ? " saturate" : " nonfinite") << ", n=" << n
             << ": element " << i << " input 0x" << std::hex << in << " gave 0x" << g
             << ", scalar gives 0x" << w;
    }
  }
}

// All supported pairs, both overflow modes where the target is FP8.
void check_all_pairs(Device device, const std::vector<int64_t>& lengths, testing::Rng& rng) {
  for (const Pair& p : supported_pairs()) {
    for (Overflow mode : {Overflow::saturate, Overflow::nonfinite}) {
      if (!is_fp8(p.to) && mode == Overflow::nonfinite) continue;
      for (int64_t n : lengths) {
        const std::vector<uint8_t> src = random_input(p.from, n, rng);
        const std::vector<uint8_t> got = kernel_convert(device, p.from, p.to, mode, src, n);
        expect_same(got, scalar_convert(p.from, p.to, mode, src, n), src, p, mode, n);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

class ConvertKernel : public ::testing::TestWithParam<Device> {};

TEST_P(ConvertKernel, EverySupportedPairMatchesTheScalarFunctions) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  // f32/bf16/f16 -> e4m3/e5m2, back, f32 <-> bf16/f16, plus the 8 copies.
  ASSERT_EQ(supported_pairs().size(), 6u + 6u + 4u + 8u);
  testing::Rng rng(testing::fresh_seed());
  check_all_pairs(device, {std::begin(kLengths), std::end(kLengths)}, rng);
}

TEST_P(ConvertKernel, UnsupportedPairsAndBadShapesAreErrors) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  const Buffer a(device, 1024), b(device, 1024);
  const auto expect_convert_error = [](const Tensor& s, const Tensor& d, const char* what) {
    try {
      kernels::convert(s, d);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[convert]"), std::string::npos) << e.what();
    }
  };
  expect_convert_error(a.view(DType::e4m3, {16}), b.view(DType::e5m2, {16}), "e4m3 -> e5m2");
  expect_convert_error(a.view(DType::i32, {16}), b.view(DType::e4m3, {16}), "i32 -> e4m3");
  expect_convert_error(a.view(DType::bf16, {16}), b.view(DType::f16, {16}), "bf16 -> f16");
  expect_convert_error(a.view(DType::e8m0, {16}), b.view(DType::f32, {16}), "e8m0 -> f32");
  expect_convert_error(a.view(DType::f32, {16}), b.view(DType::e4m3, {17}), "count mismatch");
  expect_convert_error(a.view(DType::f32, {4, 4}), b.view(DType::bf16, {4, 5}), "count mismatch");
  // dst on the other device (its memory is never touched: the check comes first).
  std::vector<uint8_t> host(16);
  const Device other = device.is_cpu() ? Device::cuda(0) : Device::cpu();
  expect_convert_error(a.view(DType::f32, {16}), Tensor(host.data(), DType::e4m3, {16}, other),
                       "device mismatch");
  EXPECT_FALSE(kernels::convert_supported(DType::e5m2, DType::e4m3));
  EXPECT_TRUE(kernels::convert_supported(DType::u8, DType::u8));
}

INSTANTIATE_TEST_SUITE_P(Devices, ConvertKernel, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

// The CPU kernels exist once per instruction-set level (picked from the CPU,
// capped by OCTET_CPU_ISA); each level the machine has must match the scalars.
TEST(ConvertKernelCpu, EveryInstructionSetVariantMatchesTheScalarFunctions) {
  const char* saved = std::getenv("OCTET_CPU_ISA");
  const std::string restore = saved ? saved : "";
  testing::Rng rng(testing::fresh_seed());
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    SCOPED_TRACE(std::string("OCTET_CPU_ISA=") + isa);
    setenv("OCTET_CPU_ISA", isa, 1);
    check_all_pairs(Device::cpu(), {5, 100, 4099}, rng);
  }
  setenv("OCTET_CPU_ISA", "avx9000", 1);
  const Buffer a(Device::cpu(), 64), b(Device::cpu(), 64);
  EXPECT_THROW(kernels::convert(a.view(DType::f32, {16}), b.view(DType::e4m3, {16})), Error);
  if (saved) {
    setenv("OCTET_CPU_ISA", restore.c_str(), 1);
  } else {
    unsetenv("OCTET_CPU_ISA");
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void round_to_bf16_avx512(const float* in, uint16_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      kernels::cpu::avx512::round_to_bf16(_mm512_loadu_ps(in)));
}
#endif

// The AVX-512 lanes' bf16 rounding (SwiGLU's stores, the block FP8 GEMM's C) is
// f32_to_bf16 bit for bit: every upper half (every exponent, sign, NaN and Inf) with the lower
// halves around the rounding boundary (0x7FFF, 0x8000, 0x8001: ties to even both ways) and the
// ends. Tolerance: none.
TEST(ConvertKernelCpu, Bf16RoundingInAvx512LanesMatchesTheScalarForEveryUpperHalf) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (kernels::cpu::hardware_isa() != kernels::cpu::Isa::avx512) GTEST_SKIP() << "no AVX-512";
  const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFE, 0xFFFF};
  std::vector<float> in;
  for (uint32_t high = 0; high <= 0xFFFF; ++high)
    for (const uint32_t low : lows) in.push_back(f32_from_bits(high << 16 | low));
  std::vector<uint16_t> out(in.size());
  for (size_t i = 0; i < in.size(); i += 16) round_to_bf16_avx512(in.data() + i, out.data() + i);
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], f32_to_bf16(in[i])) << std::hex << "f32 bits 0x" << f32_bits(in[i]);
  }
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

}  // namespace
}  // namespace octet
