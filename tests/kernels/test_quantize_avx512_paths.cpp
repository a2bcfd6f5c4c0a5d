// tests/kernels/test_quantize_avx512_paths.cpp: the AVX-512-only paths of the CPU quantize
// (kernels/cpu/byte_transpose_avx512.h's tile transpose; the vector MX blocks) against the
// paths they replace, byte for byte: the tile transpose against a plain loop on every tile
// size, and quantize() under OCTET_CPU_ISA=avx512 against the avx2 variant (the scalar
// blocks, the 8 x 8 transposes) on every grid, both formats and inputs, ragged shapes, with
// zeros, ±Inf, NaNs, FP8 subnormals and values past the format's max in the input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/isa.h"
#include "kernels/quantize_testing.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/byte_transpose_avx512.h"

namespace octet {
namespace {

using kernels::cpu::Isa;
using testing::Quantized;
using testing::QuantizeRun;

bool has_avx512() {
  return kernels::cpu::hardware_isa() == Isa::avx512;
}

// Every h x w tile (1..64 each) out of a larger matrix with an odd stride, into a larger
// one: the w x h bytes must be the transpose, every other byte of dst untouched.
TEST(ByteTransposeAvx512, EveryTileSizeMatchesAPlainLoop) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  testing::Rng rng(testing::fresh_seed());
  constexpr int64_t kSrcLd = 77, kDstLd = 70;
  std::vector<uint8_t> src(64 * kSrcLd);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> dst(64 * kDstLd);
  for (int64_t h = 1; h <= 64; ++h) {
    for (int64_t w = 1; w <= 64; ++w) {
      std::memset(dst.data(), 0xA5, dst.size());
      kernels::cpu::avx512::transpose_tile64(src.data() + 3, kSrcLd, h, w, dst.data(), kDstLd);
      int64_t wrong = 0;
      for (int64_t c = 0; c < 64; ++c) {
        for (int64_t r = 0; r < kDstLd; ++r) {
          const uint8_t want = c < w && r < h ? src[r * kSrcLd + 3 + c] : uint8_t{0xA5};
          wrong += dst[c * kDstLd + r] != want;
        }
      }
      ASSERT_EQ(wrong, 0) << "tile " << h << " x " << w;
    }
  }
}

// Random values with the special ones mixed in: ±0, ±Inf, NaN, values past E5M2's max,
// f32 subnormals and values that land in the FP8 subnormals (blocks with a huge neighbour).
std::vector<float> inputs(int64_t n, DType in, testing::Rng& rng) {
  std::vector<float> x = testing::random_matrix(testing::Distribution::heavy_tailed, n, in, rng);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1e30f,
                            -3e38f,
                            1e-40f,
                            0x1p-126f,
                            1e-8f};
  for (float& v : x) {
    const uint64_t u = rng() % 64;
    if (u < std::size(specials)) v = specials[u];
    if (in == DType::bf16) v = bf16_to_f32(f32_to_bf16(v));
  }
  return x;
}

void expect_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t wrong = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      ++wrong;
      if (first == got.size()) first = i;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": first difference at byte " << first;
}

// Shapes with tails: columns not a multiple of 16, 32 or 64, rows not a multiple of 32 or
// 64, one row, one column, and one above the threading threshold (2^16 elements).
constexpr int64_t kShapes[][2] = {{1, 1},  {3, 33},    {33, 100}, {64, 64},
                                  {97, 1}, {130, 257}, {200, 96}, {300, 420}};

TEST(QuantizeAvx512Paths, EveryOutputMatchesTheAvx2VariantByteForByte) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  testing::Rng rng(testing::fresh_seed());
  for (const auto& [rows, cols] : kShapes) {
    for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
      SCOPED_TRACE(qc.name() + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const std::vector<float> x = inputs(rows * cols, qc.in, rng);
      for (Overflow overflow : {Overflow::saturate, Overflow::nonfinite}) {
        QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, true);
        run.overflow = overflow;
        Quantized want, got;
        {
          testing::ScopedEnv isa("OCTET_CPU_ISA", "avx2");
          want = testing::quantize_on(Device::cpu(), x, rows, cols, run);
        }
        {
          testing::ScopedEnv isa("OCTET_CPU_ISA", "avx512");
          got = testing::quantize_on(Device::cpu(), x, rows, cols, run);
        }
        expect_same(got.data, want.data, "data");
        expect_same(got.data_t, want.data_t, "data_t");
        expect_same(got.scale_inv_raw, want.scale_inv_raw, "scale_inv");
        expect_same(got.scale_inv_t_raw, want.scale_inv_t_raw, "scale_inv_t");
        EXPECT_EQ(f32_bits(got.amax), f32_bits(want.amax)) << "amax";
        EXPECT_EQ(got.saturated, want.saturated) << "saturated";
        EXPECT_EQ(got.flushed, want.flushed) << "flushed";
      }
    }
  }
}

}  // namespace
}  // namespace octet

#endif
