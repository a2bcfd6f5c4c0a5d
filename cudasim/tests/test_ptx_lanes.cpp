// cudasim/tests/test_ptx_lanes.cpp: the PTX twins' lane layouts and thread-local parts
// checked against the PTX ISA 9.1 text with marker values: element (r, c) of a matrix
// holds r * 64 + c, so a wrong lane mapping shows which element went where. The expected
// values below are written from the ISA's tables and formulas, not from cudasim's code.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cudasim/ptx.h"

namespace cudasim::ptx {
namespace {

// ldmatrix moves raw b16 bits, so the marker is a bit pattern, not a value.
uint16_t marker(int r, int c) {
  return static_cast<uint16_t>(r * 64 + c);
}
uint16_t lo(uint32_t w) {
  return static_cast<uint16_t>(w & 0xFFFF);
}
uint16_t hi(uint32_t w) {
  return static_cast<uint16_t>(w >> 16);
}

// Section 9.7.14.5.8, Figure 79 (A), 81 (B), 83 (C/D): a few lanes spelled out.
TEST(PtxLayout, MmaFragmentsMatchTheIsaFigures) {
  // Lane 0 (groupID 0, threadID_in_group 0): a0..a7 at (0,0) (0,1) (8,0) (8,1) (0,8) (0,9)
  // (8,8) (8,9); lane 5 (groupID 1, tig 1): (1,2) (1,3) (9,2) (9,3) (1,10) (1,11) (9,10) (9,11).
  const int a0[8][2] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  const int a5[8][2] = {{1, 2}, {1, 3}, {9, 2}, {9, 3}, {1, 10}, {1, 11}, {9, 10}, {9, 11}};
  const int a31[8][2] = {{7, 6}, {7, 7}, {15, 6}, {15, 7}, {7, 14}, {7, 15}, {15, 14}, {15, 15}};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(mma_a_coord(0, i).row, a0[i][0]) << i;
    EXPECT_EQ(mma_a_coord(0, i).col, a0[i][1]) << i;
    EXPECT_EQ(mma_a_coord(5, i).row, a5[i][0]) << i;
    EXPECT_EQ(mma_a_coord(5, i).col, a5[i][1]) << i;
    EXPECT_EQ(mma_a_coord(31, i).row, a31[i][0]) << i;
    EXPECT_EQ(mma_a_coord(31, i).col, a31[i][1]) << i;
  }
  // B (k x n): lane 5 holds b0..b3 at (2,1) (3,1) (10,1) (11,1).
  const int b5[4][2] = {{2, 1}, {3, 1}, {10, 1}, {11, 1}};
  // C/D: lane 5 holds c0..c3 at (1,2) (1,3) (9,2) (9,3).
  const int c5[4][2] = {{1, 2}, {1, 3}, {9, 2}, {9, 3}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(mma_b_coord(5, i).row, b5[i][0]) << i;
    EXPECT_EQ(mma_b_coord(5, i).col, b5[i][1]) << i;
    EXPECT_EQ(mma_c_coord(5, i).row, c5[i][0]) << i;
    EXPECT_EQ(mma_c_coord(5, i).col, c5[i][1]) << i;
  }
  // Every element of A (16x16), B (16x8), C (16x8) is held by exactly one (lane, i).
  std::vector<int> a(256), b(128), c(128);
  for (unsigned l = 0; l < 32; ++l) {
    for (int i = 0; i < 8; ++i) ++a[mma_a_coord(l, i).row * 16 + mma_a_coord(l, i).col];
    for (int i = 0; i < 4; ++i) ++b[mma_b_coord(l, i).row * 8 + mma_b_coord(l, i).col];
    for (int i = 0; i < 4; ++i) ++c[mma_c_coord(l, i).row * 8 + mma_c_coord(l, i).col];
  }
  for (int v : a) EXPECT_EQ(v, 1);
  for (int v : b) EXPECT_EQ(v, 1);
  for (int v : c) EXPECT_EQ(v, 1);
}

// A 16 x 16 b16 tile with rows 24 elements apart (16 bytes of padding, as the kernels).
struct Tile {
  static constexpr int ld = 24;
  std::vector<uint16_t> data = std::vector<uint16_t>(16 * ld, 0xDEAD);
  Tile() {
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) data[r * ld + c] = marker(r, c);
  }
  const uint8_t* row(int r, int c0) const {
    return reinterpret_cast<const uint8_t*>(data.data() + r * ld + c0);
  }
  // The 32 row addresses of an ldmatrix .x4: matrix m = rows (m & 1) * 8.., columns
  // (m >> 1) * 8.. (the order of an mma A operand); lane l addresses row l % 8 of matrix l / 8.
  std::array<const uint8_t*, 32> x4_rows() const {
    std::array<const uint8_t*, 32> rows{};
    for (int l = 0; l < 32; ++l) rows[l] = row((l & 7) + ((l >> 3) & 1) * 8, (l >> 4) * 8);
    return rows;
  }
};

// Section 9.7.14.5.15: lanes 8m .. 8m + 7 address the rows of matrix m; Figure 104: lane l
// receives row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of each matrix, low half first.
TEST(PtxLayout, LdmatrixX4MatchesTheIsaFigure) {
  const Tile t;
  const std::array<const uint8_t*, 32> rows = t.x4_rows();
  for (unsigned l = 0; l < 32; ++l) {
    const auto r = ldmatrix_lane(rows, l, false);
    for (int m = 0; m < 4; ++m) {
      const int r0 = (m & 1) * 8, c0 = (m >> 1) * 8;
      EXPECT_EQ(lo(r[m]), marker(r0 + l / 4, c0 + 2 * (l % 4))) << "lane " << l << " m " << m;
      EXPECT_EQ(hi(r[m]), marker(r0 + l / 4, c0 + 2 * (l % 4) + 1)) << "lane " << l << " m " << m;
    }
  }
  // Spot values: lane 0 register 0 holds (0,0), (0,1); lane 13 register 3 holds
  // row 8 + 3, columns 8 + 2, 8 + 3.
  EXPECT_EQ(ldmatrix_lane(rows, 0, false)[0], 0u | (1u << 16));
  EXPECT_EQ(ldmatrix_lane(rows, 13, false)[3], (11u * 64 + 10) | ((11u * 64 + 11) << 16));
}

// .trans: each matrix read column-major, so lane l receives column l / 4, rows 2 (l % 4)
// and 2 (l % 4) + 1.
TEST(PtxLayout, LdmatrixX4TransMatchesTheIsaFigure) {
  const Tile t;
  const std::array<const uint8_t*, 32> rows = t.x4_rows();
  for (unsigned l = 0; l < 32; ++l) {
    const auto r = ldmatrix_lane(rows, l, true);
    for (int m = 0; m < 4; ++m) {
      const int r0 = (m & 1) * 8, c0 = (m >> 1) * 8;
      EXPECT_EQ(lo(r[m]), marker(r0 + 2 * (l % 4), c0 + l / 4)) << "lane " << l << " m " << m;
      EXPECT_EQ(hi(r[m]), marker(r0 + 2 * (l % 4) + 1, c0 + l / 4)) << "lane " << l << " m " << m;
    }
  }
  EXPECT_EQ(ldmatrix_lane(rows, 13, true)[3], (10u * 64 + 11) | ((11u * 64 + 11) << 16));
}

uint16_t bf16(float x) {  // exact for the small integers used here
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
}

// D = A B + C with A[r][k] = r * 16 + k (exact in bf16: below 256) and B a column
// selector (B[k][n] = 1 where k = sel[n]): D[r][n] = A[r][sel[n]] + C[r][n]. The
// fragments are distributed by the ISA formulas written out here again.
TEST(PtxLayout, MmaComputesTheProductOfTheDocumentedFragments) {
  const int sel[8] = {3, 0, 15, 8, 7, 9, 1, 12};
  std::array<MmaOperands, 32> ops{};
  for (unsigned l = 0; l < 32; ++l) {
    const int g = static_cast<int>(l >> 2), t = static_cast<int>(l % 4);
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      ops[l].a[i / 2] |= uint32_t{bf16(static_cast<float>(row * 16 + col))} << (16 * (i & 1));
    }
    for (int i = 0; i < 4; ++i) {
      const int k = t * 2 + (i & 1) + (i >= 2 ? 8 : 0), n = g;
      ops[l].b[i / 2] |= uint32_t{bf16(k == sel[n] ? 1.0f : 0.0f)} << (16 * (i & 1));
    }
  }
  for (unsigned l = 0; l < 32; ++l) {
    const int g = static_cast<int>(l >> 2), t = static_cast<int>(l % 4);
    float d[4];
    for (int i = 0; i < 4; ++i) d[i] = 0.5f * static_cast<float>(i + 1);  // C
    mma_lane(ops, l, d);
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1);
      EXPECT_EQ(d[i], static_cast<float>(row * 16 + sel[col]) + 0.5f * static_cast<float>(i + 1))
          << "lane " << l << " c" << i;
    }
  }
}

// The fp32 accumulation: bf16 products are exact, the running sum rounds once per k.
TEST(PtxLayout, MmaAccumulatesInFp32) {
  std::array<MmaOperands, 32> ops{};
  // A row 0 = [2^24, 1, 1, ..., 1] (k = 0..15), B column 0 all ones: exact sum 2^24 + 15,
  // which fp32 summation from k = 0 in order rounds to 2^24 (each +1 is lost).
  for (unsigned l = 0; l < 32; ++l) {
    const int g = static_cast<int>(l >> 2), t = static_cast<int>(l % 4);
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      const float v = row == 0 ? (col == 0 ? 16777216.0f : 1.0f) : 0.0f;
      ops[l].a[i / 2] |= uint32_t{bf16(v)} << (16 * (i & 1));
    }
    for (int i = 0; i < 4; ++i) ops[l].b[i / 2] |= uint32_t{bf16(1.0f)} << (16 * (i & 1));
  }
  float d[4] = {0, 0, 0, 0};
  mma_lane(ops, 0, d);  // lane 0 holds D(0, 0)
  EXPECT_EQ(d[0], 16777216.0f);
}

TEST(PtxCpAsync, DestinationIsPoisonUntilItsGroupCompletes) {
  alignas(16) uint8_t shared[48];
  std::memset(shared, 0x11, sizeof shared);
  alignas(16) uint8_t src[32];
  for (int i = 0; i < 32; ++i) src[i] = static_cast<uint8_t>(i + 1);
  CpAsyncQueue q;
  q.issue(shared, src, 16, 16);  // group 0
  q.commit();
  q.issue(shared + 16, src + 16, 16, 16);  // group 1
  q.issue(shared + 32, src, 16, 0);        // group 1, zero fill
  q.commit();
  for (int i = 0; i < 48; ++i) ASSERT_EQ(shared[i], kPoison) << i;  // read before any wait
  src[0] = 0x7A;  // the copy reads the source when it completes
  q.wait(1);      // completes group 0 only
  EXPECT_EQ(shared[0], 0x7A);
  for (int i = 1; i < 16; ++i) EXPECT_EQ(shared[i], i + 1);
  for (int i = 16; i < 48; ++i) EXPECT_EQ(shared[i], kPoison) << i;
  EXPECT_EQ(q.groups(), 1u);
  q.wait(0);
  for (int i = 16; i < 32; ++i) EXPECT_EQ(shared[i], i + 1);
  for (int i = 32; i < 48; ++i) EXPECT_EQ(shared[i], 0) << i;
  EXPECT_EQ(q.groups(), 0u);
}

TEST(PtxCpAsync, UncommittedCopiesAreNotCompletedByAWait) {
  alignas(16) uint8_t shared[4];
  const float src = 1.5f;
  CpAsyncQueue q;
  q.issue(shared, &src, 4, 4);
  q.wait(0);  // nothing committed: the copy stays in flight
  EXPECT_EQ(shared[0], kPoison);
  q.commit();
  q.wait(0);
  float got;
  std::memcpy(&got, shared, 4);
  EXPECT_EQ(got, 1.5f);
}

// cvt d, a, b puts a in the upper byte (section 9.7.9.21): markers 448 (E4M3 0x7E) and
// 1.0 (0x38); E5M2 57344 (0x7B) and 1.0 (0x3C).
TEST(PtxCvt, FirstOperandGoesToTheUpperByte) {
  EXPECT_EQ(cvt_satfinite_e4m3x2(448.0f, 1.0f), 0x7E38);
  EXPECT_EQ(cvt_satfinite_e4m3x2(1.0f, 448.0f), 0x387E);
  EXPECT_EQ(cvt_satfinite_e5m2x2(57344.0f, 1.0f), 0x7B3C);
  EXPECT_EQ(cvt_satfinite_e5m2x2(1.0f, -2.0f), 0x3CC0);
}

TEST(PtxCvt, SatfiniteClampsOverflowAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(cvt_satfinite_e4m3x2(1e6f, -inf), 0x7EFE);  // +448, -448
  EXPECT_EQ(cvt_satfinite_e5m2x2(inf, -1e9f), 0x7BFB);  // +57344, -57344
  // Round to nearest even: 1.0625 is halfway between E4M3 1.0 (0x38) and 1.125 (0x39),
  // 1.1875 halfway between 1.125 (0x39) and 1.25 (0x3A).
  EXPECT_EQ(cvt_satfinite_e4m3x2(1.0625f, 1.1875f), 0x383A);
}

TEST(PtxEx2, FlushesSubnormalInputsAndResults) {
  EXPECT_EQ(ex2_approx_ftz(1.0f), 2.0f);
  EXPECT_EQ(ex2_approx_ftz(-126.0f), std::ldexp(1.0f, -126));
  EXPECT_EQ(ex2_approx_ftz(-127.0f), 0.0f);  // 2^-127 is subnormal: flushed
  EXPECT_EQ(ex2_approx_ftz(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(ex2_approx_ftz(std::numeric_limits<float>::denorm_min()), 1.0f);
  EXPECT_TRUE(std::isnan(ex2_approx_ftz(std::nanf(""))));
}

}  // namespace
}  // namespace cudasim::ptx
