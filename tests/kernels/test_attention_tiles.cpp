// tests/kernels/test_attention_tiles.cpp: the tiled CPU attention's weighted accumulation
// (accumulate in kernels/cpu/attention_tile_ops.h and attention_tile_ops_avx2.h) against one
// std::fma per term in increasing order, bit for bit, each where the CPU has its level: head
// dims that fill one to four vectors fully or in part, and two chunks; both ways the kernels
// read a tile's weights (rows the queries: w[i][t]; rows the keys: w[t][i]); tile pairs on the
// causal diagonal and off it, whole and partial. On the diagonal the weights outside the
// causal band are masked zeros of either sign, as the kernels' P and dS are there: the band
// skips them, and the result must be the bits of adding them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/vector_math.h"

#if defined(OCTET_CPU_VECTOR_EXP)
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_tile_ops.h"
#include "kernels/cpu/attention_tile_ops_avx2.h"

namespace octet {
namespace {

using kernels::cpu::Isa;
using kernels::cpu::attn::Band;
using kernels::cpu::attn::kAllTerms;
constexpr int64_t kT = kernels::cpu::attn::kTile;

class AttentionAccumulate : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (kernels::cpu::hardware_isa() < GetParam())
      GTEST_SKIP() << "this CPU has no " << (GetParam() == Isa::avx512 ? "AVX-512" : "AVX2");
  }
};

void tile_accumulate(Isa isa, float* c, int64_t rows, const float* w, int64_t wi, int64_t wt,
                     const float* x, int64_t n, int64_t hd, Band band) {
  if (isa == Isa::avx512)
    return kernels::cpu::attn::avx512::accumulate(c, rows, w, wi, wt, x, n, hd, band);
  kernels::cpu::attn::avx2::accumulate(c, rows, w, wi, wt, x, n, hd, band);
}

TEST_P(AttentionAccumulate, IsOneFusedMultiplyAddPerTermInOrderAndItsBandSkipsOnlyMaskedZeros) {
  std::mt19937 rng(20261129);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t hd : {8, 16, 20, 40, 44, 64, 100, 128}) {
    // (rows, keys) of a tile pair: whole, or the last tiles of a sequence of 32 t + 19.
    for (int64_t part : {kT, int64_t{19}}) {
      for (int64_t lag : {int64_t{0}, kT}) {  // i0 - j0: the diagonal pair, or one below it
        for (bool rows_are_queries : {true, false}) {
          for (bool zero_start : {true, false}) {
            SCOPED_TRACE(::testing::Message() << "hd=" << hd << " part=" << part << " i0-j0=" << lag
                                              << (rows_are_queries ? " rows=queries" : " rows=keys")
                                              << (zero_start ? " c=+0" : " c=random"));
            // Rows the queries: row i is query i0 + i, term t key j0 + t; rows the keys: row
            // i is key j0 + i, term t query i0 + t (then the diagonal pair's keys are `part`).
            const int64_t rows = rows_are_queries ? part : (lag == 0 ? part : kT);
            const int64_t n = rows_are_queries ? (lag == 0 ? part : kT) : part;
            const int64_t wi = rows_are_queries ? kT : 1, wt = rows_are_queries ? 1 : kT;
            const auto visible = [&](int64_t i, int64_t t) {
              return rows_are_queries ? t <= i + lag : t + lag >= i;
            };
            std::vector<float> w(kT * kT), x(n * hd), c(rows * hd);
            for (int64_t i = 0; i < kT; ++i) {
              for (int64_t t = 0; t < kT; ++t) {
                const bool sign = (i + t) % 3 == 0;  // dS's masked zeros: 0 times a negative
                w[i * wi + t * wt] = visible(i, t) ? uniform(rng) : (sign ? -0.0f : 0.0f);
              }
            }
            for (float& v : x) v = uniform(rng);
            for (float& v : c) v = zero_start ? 0.0f : uniform(rng);
            std::vector<float> want = c;
            for (int64_t i = 0; i < rows; ++i) {
              for (int64_t k = 0; k < hd; ++k) {
                for (int64_t t = 0; t < n; ++t)
                  want[i * hd + k] = std::fma(w[i * wi + t * wt], x[t * hd + k], want[i * hd + k]);
              }
            }
            const Band band = rows_are_queries ? Band{kAllTerms.lo, lag} : Band{-lag, kAllTerms.hi};
            for (const Band& b : {kAllTerms, band}) {
              std::vector<float> got = c;
              tile_accumulate(GetParam(), got.data(), rows, w.data(), wi, wt, x.data(), n, hd, b);
              EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
                  << (b.lo == kAllTerms.lo && b.hi == kAllTerms.hi ? "every term" : "the band");
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, AttentionAccumulate, ::testing::Values(Isa::avx2, Isa::avx512),
                         [](const auto& info) {
                           return info.param == Isa::avx512 ? "avx512" : "avx2";
                         });

}  // namespace
}  // namespace octet
#endif
