// tests/kernels/test_quantize_vector_paths.cpp: the hand-vectorised paths of the CPU quantize
// against the paths they replace, byte for byte. AVX2 (kernels/cpu/byte_transpose_avx2.h's tile
// transpose, block_scales_avx2.h's vector scales) and AVX-512 (byte_transpose_avx512.h,
// block_scales_avx512.h, mx_blocks_avx512.h's MX rows): the tile transposes against a plain loop
// on every tile size (and MX's word transpose), the scales against the scalar code on every amax
// class, and quantize() under each OCTET_CPU_ISA level against the level below it (avx2 against
// the baseline's scalar blocks and 8 x 8 transposes, avx512 against avx2) on every grid, both
// formats and inputs, ragged shapes, with zeros, ±Inf, NaNs, FP8 subnormals and values past the
// format's max in the input. Each level is skipped on a CPU without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/isa.h"
#include "kernels/quantize.h"
#include "kernels/quantize_testing.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/block_scales_avx2.h"
#include "kernels/cpu/block_scales_avx512.h"
#include "kernels/cpu/byte_transpose_avx2.h"
#include "kernels/cpu/byte_transpose_avx512.h"
#include "kernels/cpu/mx_blocks_avx2.h"
#include "kernels/cpu/mx_blocks_avx512.h"

namespace octet {
namespace {

using kernels::cpu::Isa;
using testing::Quantized;
using testing::QuantizeRun;

bool has_avx512() {
  return kernels::cpu::hardware_isa() == Isa::avx512;
}
bool has_avx2() {
  return kernels::cpu::hardware_isa() >= Isa::avx2;
}

// Every h x w block (1..n each) of a random matrix with an odd stride, transposed by
// fn(src, src_ld, h, w, dst, dst_ld) into a larger dst full of a marker: dst's rows c < w hold
// the transpose in their first h elements, then (zero_to_n) zeros up to n; every other element
// of dst keeps the marker.
template <class T, class Fn>
void expect_transposes_on_every_size(int64_t n, int64_t src_ld, int64_t dst_ld, bool zero_to_n,
                                     Fn fn) {
  testing::Rng rng(testing::fresh_seed());
  std::vector<T> src(static_cast<size_t>(n * src_ld));
  for (T& v : src) v = static_cast<T>(rng());
  const auto marker = static_cast<T>(0xA5A5);
  std::vector<T> dst(static_cast<size_t>((n + 1) * dst_ld));
  for (int64_t h = 1; h <= n; ++h) {
    for (int64_t w = 1; w <= n; ++w) {
      std::fill(dst.begin(), dst.end(), marker);
      fn(src.data() + 3, src_ld, h, w, dst.data(), dst_ld);
      int64_t wrong = 0;
      for (int64_t c = 0; c <= n; ++c) {
        for (int64_t r = 0; r < dst_ld; ++r) {
          T want = marker;
          if (c < w && r < h) want = src[r * src_ld + 3 + c];
          if (c < w && r >= h && r < n && zero_to_n) want = 0;
          wrong += dst[c * dst_ld + r] != want;
        }
      }
      ASSERT_EQ(wrong, 0) << "block " << h << " x " << w;
    }
  }
}

// The byte tile transposes (transpose_tile64 of AVX-512 and of AVX2): only the w x h bytes
// written.
using TileTranspose = void (*)(const uint8_t*, int64_t, int64_t, int64_t, uint8_t*, int64_t);
void expect_tile_transposes_on_every_size(TileTranspose transpose) {
  expect_transposes_on_every_size<uint8_t>(64, 77, 70, false, transpose);
}

TEST(ByteTransposeAvx512, EveryTileSizeMatchesAPlainLoop) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  expect_tile_transposes_on_every_size(kernels::cpu::avx512::transpose_tile64);
}

TEST(ByteTransposeAvx2, EveryTileSizeMatchesAPlainLoop) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 (with fma, f16c, bmi2)";
  expect_tile_transposes_on_every_size(kernels::cpu::avx2::transpose_tile64);
}

// MX's word transpose (the transposed copy's rows of xᵀ): rows past h read as zero, so each
// written row of dst holds 32 defined words.
TEST(MxBlocksAvx512, WordTransposeMatchesAPlainLoopOnEverySize) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  expect_transposes_on_every_size<uint16_t>(
      32, 45, 37, true,
      [](const uint16_t* src, int64_t ld, int64_t h, int64_t w, uint16_t* dst, int64_t ldo) {
        kernels::cpu::avx512::transpose32_words(src, ld, h, w, dst, ldo);
      });
}

// The amaxes to check the vector E8M0 codes on: every bf16 magnitude pattern (±0, subnormals,
// every exponent, Inf, NaNs), and for every f32 exponent the mantissas around each format's
// max (where the code steps up), the ends, and NaNs with low payload bits only.
std::vector<uint32_t> amax_patterns() {
  std::vector<uint32_t> m;
  for (uint32_t b = 0; b < 0x8000; ++b) m.push_back(b << 16);
  for (uint32_t e = 0; e <= 255; ++e) {
    for (uint32_t mant : {0u, 1u, 2u, 0x3FFFFFu, 0x400000u, 0x5FFFFFu, 0x600000u, 0x600001u,
                          0x7FFFFEu, 0x7FFFFFu}) {
      m.push_back(e << 23 | mant);
    }
  }
  return m;
}

// The amax that |x| bits stand for (NaN above Inf's bits), as the scalar code takes it.
float amax_value(uint32_t bits) {
  return bits > 0x7F800000u ? std::numeric_limits<float>::quiet_NaN() : f32_from_bits(bits);
}

// The vector E8M0 codes and multipliers (e8m0_lanes(amax bits, fp8_max, codes, mult) and
// e8m0_multipliers(codes, mult) of kLanes lanes) against kernels/quantize.h's scalar code and the
// multiplier's definition, 2^(127 - e) exactly, for both formats' maxima.
template <int kLanes, class Lanes, class Multipliers>
void expect_e8m0_matches_the_scalar(Lanes lanes, Multipliers multipliers) {
  std::vector<uint32_t> amax = amax_patterns();
  while (amax.size() % kLanes != 0) amax.push_back(0);
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    const float fp8_max = static_cast<float>(dtype_info(fp8).max_finite);
    int64_t wrong = 0;
    for (size_t i = 0; i < amax.size(); i += kLanes) {
      int32_t codes[kLanes];
      float mult[kLanes];
      lanes(amax.data() + i, fp8_max, codes, mult);
      for (int l = 0; l < kLanes; ++l) {
        const uint32_t bits = amax[i + l];
        const float value = amax_value(bits);
        const uint8_t want = kernels::e8m0_scale_inv_from_amax(value, fp8_max);
        const float want_mult = std::ldexp(1.0f, 127 - static_cast<int>(want));
        if (codes[l] != want || f32_bits(mult[l]) != f32_bits(want_mult)) {
          if (wrong++ < 5) {
            ADD_FAILURE() << dtype_name(fp8) << " amax bits 0x" << std::hex << bits << std::dec
                          << ": code " << codes[l] << " want " << int{want} << ", multiplier "
                          << mult[l] << " want " << want_mult;
          }
        }
      }
    }
    EXPECT_EQ(wrong, 0) << dtype_name(fp8);
  }
  // The multiplier for every code, 254 (2^-127, an f32 subnormal) included.
  for (int e0 = 0; e0 < 256; e0 += kLanes) {
    alignas(64) int32_t e[kLanes];
    for (int l = 0; l < kLanes; ++l) e[l] = std::min(e0 + l, 254);
    float mult[kLanes];
    multipliers(e, mult);
    for (int l = 0; l < kLanes; ++l) {
      EXPECT_EQ(f32_bits(mult[l]), f32_bits(std::ldexp(1.0f, 127 - e[l]))) << "code " << e[l];
    }
  }
}

TEST(MxBlocksAvx512, E8m0CodesAndMultipliersMatchTheScalarOnEveryAmaxClass) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  expect_e8m0_matches_the_scalar<16>(kernels::cpu::avx512::e8m0_lanes,
                                     kernels::cpu::avx512::e8m0_multipliers);
}

TEST(BlockScalesAvx2, E8m0CodesAndMultipliersMatchTheScalarOnEveryAmaxClass) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 (with fma, f16c, bmi2)";
  expect_e8m0_matches_the_scalar<8>(kernels::cpu::avx2::e8m0_lanes,
                                    kernels::cpu::avx2::e8m0_multipliers);
}

// The vector f32 scales (scale_lanes(amax bits, fp8_max, pow2, scale) of kLanes lanes) against
// kernels/quantize.h's scale_from_amax (no margin), with and without power-of-two scales, for
// both formats' maxima.
template <int kLanes, class Lanes>
void expect_f32_scales_match_the_scalar(Lanes lanes) {
  std::vector<uint32_t> amax = amax_patterns();
  while (amax.size() % kLanes != 0) amax.push_back(0);
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    const float fp8_max = static_cast<float>(dtype_info(fp8).max_finite);
    for (bool pow2 : {false, true}) {
      int64_t wrong = 0;
      for (size_t i = 0; i < amax.size(); i += kLanes) {
        float scale[kLanes];
        lanes(amax.data() + i, fp8_max, pow2, scale);
        for (int l = 0; l < kLanes; ++l) {
          const uint32_t bits = amax[i + l];
          const float value = amax_value(bits);
          const float want = kernels::scale_from_amax(value, fp8_max, 0, pow2);
          if (f32_bits(scale[l]) != f32_bits(want) && wrong++ < 5) {
            ADD_FAILURE() << dtype_name(fp8) << (pow2 ? " pow2" : "") << " amax bits 0x" << std::hex
                          << bits << std::dec << ": " << scale[l] << " want " << want;
          }
        }
      }
      EXPECT_EQ(wrong, 0) << dtype_name(fp8) << (pow2 ? " pow2" : "");
    }
  }
}

TEST(BlockScalesAvx512, F32ScalesMatchTheScalarOnEveryAmaxClass) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  expect_f32_scales_match_the_scalar<16>(kernels::cpu::avx512::scale_lanes);
}

// The avx2 MX row's reduction of eight blocks: lane b of block_max8 is the unsigned max of
// block b's 8 folded lanes, for a planted largest value in every lane position of every block
// (any other lane order or fold would put another block's max, or a smaller value, there).
TEST(MxBlocksAvx2, BlockMax8PutsEachBlocksMaxInItsLane) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 (with fma, f16c, bmi2)";
  testing::Rng rng(testing::fresh_seed());
  for (int planted = 0; planted < 8; ++planted) {
    uint32_t in[64], got[8];
    for (uint32_t& v : in) v = static_cast<uint32_t>(rng() % 0x7F800000u);
    for (int b = 0; b < 8; ++b) in[8 * b + (planted + b) % 8] = 0x7F800001u + b;  // NaN bits
    kernels::cpu::avx2::block_max8_lanes(in, got);
    for (int b = 0; b < 8; ++b) {
      EXPECT_EQ(got[b], *std::max_element(in + 8 * b, in + 8 * b + 8))
          << "block " << b << ", planted at lane " << (planted + b) % 8;
    }
  }
}

TEST(BlockScalesAvx2, F32ScalesMatchTheScalarOnEveryAmaxClass) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 (with fma, f16c, bmi2)";
  expect_f32_scales_match_the_scalar<8>(kernels::cpu::avx2::scale_lanes);
}

// avx2::block_scales over n blocks (every n to 20: whole groups of 8 and the copied tail):
// multipliers and stored scale_inv against the lanes above, nothing written past n.
TEST(BlockScalesAvx2, RunsOfEveryLengthWriteExactlyTheirBlocks) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 (with fma, f16c, bmi2)";
  testing::Rng rng(testing::fresh_seed());
  const std::vector<uint32_t> patterns = amax_patterns();
  for (bool e8m0 : {true, false}) {
    for (int64_t n = 1; n <= 20; ++n) {
      std::vector<uint32_t> amax(static_cast<size_t>(n));
      for (uint32_t& a : amax) a = patterns[rng() % patterns.size()];
      std::vector<float> mult(static_cast<size_t>(n) + 8, -1.0f);
      std::vector<uint32_t> inv(static_cast<size_t>(n) + 8, 0xA5A5A5A5u);
      kernels::cpu::avx2::block_scales(amax.data(), n, e8m0, 448.0f, false, mult.data(),
                                       inv.data());
      for (int64_t b = 0; b < n; ++b) {
        const float value = amax_value(amax[b]);
        if (e8m0) {
          const uint8_t want = kernels::e8m0_scale_inv_from_amax(value, 448.0f);
          EXPECT_EQ(inv[b], want) << "n " << n << " block " << b;
          EXPECT_EQ(f32_bits(mult[b]), f32_bits(std::ldexp(1.0f, 127 - int{want})));
        } else {
          const float want = kernels::scale_from_amax(value, 448.0f, 0, false);
          EXPECT_EQ(f32_bits(mult[b]), f32_bits(want)) << "n " << n << " block " << b;
          EXPECT_EQ(inv[b], f32_bits(1.0f / want)) << "n " << n << " block " << b;
        }
      }
      for (size_t b = static_cast<size_t>(n); b < mult.size(); ++b) {
        EXPECT_EQ(mult[b], -1.0f) << "written past n = " << n;
        EXPECT_EQ(inv[b], 0xA5A5A5A5u) << "written past n = " << n;
      }
    }
  }
}

// Which special values inputs() mixes in.
enum class Specials { all, no_nan, finite };
const char* name(Specials s) {
  return s == Specials::all ? "with NaN" : (s == Specials::no_nan ? "no NaN" : "finite");
}

// Random values with the special ones mixed in: ±0, ±Inf, NaN, values past E5M2's max,
// f32 subnormals and values that land in the FP8 subnormals (blocks with a huge neighbour).
// Without NaN (no_nan) every block's amax bounds its values below NaN, so the avx512
// encoder leaves its NaN select out while ±Inf still reach it (one value in 64 is special,
// so with NaN among them a group of 512 values almost always holds one). finite: no ±Inf
// either, so that the avx512 MX row of bf16 takes its 16-bit lanes' way in every group (a
// group with ±Inf or NaN goes to the f32 way whole).
std::vector<float> inputs(int64_t n, DType in, testing::Rng& rng, Specials kind) {
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
    const bool allowed =
        kind == Specials::all ||
        (kind == Specials::no_nan ? !std::isnan(specials[u % std::size(specials)])
                                  : std::isfinite(specials[u % std::size(specials)]));
    if (u < std::size(specials) && allowed) v = specials[u];
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
// 64, one row, one column, one above the threading threshold (2^16 elements); rows of the
// MX path's groups of 16 blocks (512 values) and 8 blocks: 512 + 256 + 32, 2 x 512 + 76,
// 3 x 512; MX's transposed copy in tasks of 512 rows x 32 columns: 2 x 512 + 76 rows (a
// short block) by 2 x 32 + 6 columns.
constexpr int64_t kPathShapes[][2] = {{1, 1},   {3, 33},    {33, 100}, {64, 64},
                                      {97, 1},  {130, 257}, {200, 96}, {300, 420},
                                      {3, 800}, {5, 1100},  {2, 1536}, {1100, 70}};

// One run of quantize() under OCTET_CPU_ISA=`level` against `below`, every output byte for byte.
void expect_same_outputs(const char* level, const char* below, const std::vector<float>& x,
                         int64_t rows, int64_t cols, const QuantizeRun& run) {
  Quantized want, got;
  {
    testing::ScopedEnv isa("OCTET_CPU_ISA", below);
    want = testing::quantize_on(Device::cpu(), x, rows, cols, run);
  }
  {
    testing::ScopedEnv isa("OCTET_CPU_ISA", level);
    got = testing::quantize_on(Device::cpu(), x, rows, cols, run);
  }
  expect_same(got.data, want.data, "data");
  expect_same(got.data_t, want.data_t, "data_t");
  expect_same(got.scale_inv_raw, want.scale_inv_raw, "scale_inv");
  expect_same(got.scale_inv_t_raw, want.scale_inv_t_raw, "scale_inv_t");
  EXPECT_EQ(f32_bits(got.amax), f32_bits(want.amax)) << "amax";
  if (run.counts) {
    EXPECT_EQ(got.saturated, want.saturated) << "saturated";
    EXPECT_EQ(got.flushed, want.flushed) << "flushed";
  }
}

// quantize() under OCTET_CPU_ISA=`level` against `below` on every grid, shape and input class.
void expect_level_matches_the_one_below(const char* level, const char* below) {
  testing::Rng rng(testing::fresh_seed());
  for (const auto& [rows, cols] : kPathShapes) {
    for (const testing::QuantizeCase& qc : testing::quantize_cases()) {
      SCOPED_TRACE(qc.name() + " " + std::to_string(rows) + "x" + std::to_string(cols));
      for (Specials kind : {Specials::all, Specials::no_nan, Specials::finite}) {
        SCOPED_TRACE(name(kind));
        const std::vector<float> x = inputs(rows * cols, qc.in, rng, kind);
        // Both overflow modes, with and without the counts (the kernels without them are
        // other instantiations: the training steps' ones); power-of-two f32 scales with the
        // second mode.
        for (auto [overflow, counts] :
             {std::pair{Overflow::saturate, true}, std::pair{Overflow::nonfinite, true},
              std::pair{Overflow::saturate, false}, std::pair{Overflow::nonfinite, false}}) {
          SCOPED_TRACE(counts ? "counts" : "no counts");
          QuantizeRun run = testing::make_run(qc.grid, qc.fp8, qc.in, true);
          run.overflow = overflow;
          run.counts = counts;
          run.power_of_two_scales = !qc.grid.e8m0 && overflow == Overflow::nonfinite;
          expect_same_outputs(level, below, x, rows, cols, run);
        }
      }
    }
  }
}

// Every finite bf16 value, both signs, in MX blocks under each of a set of block maxima
// 2^big (the block's first value; the others, at most 2^big in magnitude, follow in order):
// products over the whole normal range, every FP8 subnormal with its ties (even and odd
// quotients), the flushes to ±0, f32 underflows, and the bf16 subnormals; both formats and
// overflow modes, with and without counts, data and the transposed copy.
void expect_every_bf16_in_mx_matches(const char* level, const char* below) {
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    for (int big : {-126, -100, -20, 0, 20, 100, 127}) {
      SCOPED_TRACE(std::string(dtype_name(fp8)) + " block max 2^" + std::to_string(big));
      const float max = std::ldexp(1.0f, big);
      std::vector<float> x;
      for (uint32_t bits = 0; bits < 0x7F80; ++bits) {
        const float v = bf16_to_f32(static_cast<uint16_t>(bits));
        if (v > max) break;
        for (float signed_v : {v, -v}) {
          if (x.size() % 32 == 0) x.push_back(max);
          x.push_back(signed_v);
        }
      }
      while (x.size() % 64 != 0) x.push_back(0.0f);
      const int64_t cols = 64, rows = static_cast<int64_t>(x.size()) / cols;
      for (auto [overflow, counts] :
           {std::pair{Overflow::saturate, false}, std::pair{Overflow::nonfinite, true}}) {
        QuantizeRun run = testing::make_run(testing::kMxGrid, fp8, DType::bf16, true);
        run.overflow = overflow;
        run.counts = counts;
        expect_same_outputs(level, below, x, rows, cols, run);
      }
    }
  }
}

TEST(QuantizeVectorPaths, Avx512OutputsMatchTheAvx2VariantByteForByte) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  expect_level_matches_the_one_below("avx512", "avx2");
}

TEST(QuantizeVectorPaths, Avx512MxOfEveryBf16ValueMatchesTheBaseline) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (f, bw, vl, dq)";
  expect_every_bf16_in_mx_matches("avx512", "baseline");
}

TEST(QuantizeVectorPaths, Avx2MxOfEveryBf16ValueMatchesTheBaseline) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 (with fma, f16c, bmi2)";
  expect_every_bf16_in_mx_matches("avx2", "baseline");
}

TEST(QuantizeVectorPaths, Avx2OutputsMatchTheBaselineVariantByteForByte) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 (with fma, f16c, bmi2)";
  expect_level_matches_the_one_below("avx2", "baseline");
}

}  // namespace
}  // namespace octet

#endif
