// cudasim/src/ptx_lanes.cpp: the parts of the PTX twins that need no emulated thread:
// the cp.async queue, the mma and ldmatrix lane layouts (PTX ISA sections cited in
// cudasim/ptx.h), ex2 and the paired FP8 conversions.
#include <cuda_fp8.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "cudasim/ptx.h"

namespace cudasim::ptx {
namespace {

float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

}  // namespace

// ---- pure parts ------------------------------------------------------------------------

void CpAsyncQueue::issue(uint8_t* dst, const void* src, int cp_size, int src_size) {
  std::memset(dst, kPoison, static_cast<size_t>(cp_size));
  open_.push_back({dst, static_cast<const uint8_t*>(src), cp_size, src_size});
}

void CpAsyncQueue::commit() {
  committed_.push_back(std::move(open_));  // an empty group is a group (as on hardware)
  open_.clear();
}

void CpAsyncQueue::wait(int n) {
  const size_t keep = n < 0 ? 0 : static_cast<size_t>(n);
  if (committed_.size() <= keep) return;
  const size_t done = committed_.size() - keep;
  for (size_t g = 0; g < done; ++g) {
    for (const Copy& c : committed_[g]) {
      if (c.src_size > 0) std::memcpy(c.dst, c.src, static_cast<size_t>(c.src_size));
      std::memset(c.dst + c.src_size, 0, static_cast<size_t>(c.cp_size - c.src_size));
    }
  }
  committed_.erase(committed_.begin(), committed_.begin() + static_cast<std::ptrdiff_t>(done));
}

Coord mma_a_coord(unsigned lane, int i) {
  const int group = static_cast<int>(lane >> 2), tig = static_cast<int>(lane % 4);
  const bool low_rows = i < 2 || (i >= 4 && i < 6);
  return {low_rows ? group : group + 8, tig * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}

Coord mma_b_coord(unsigned lane, int i) {
  const int group = static_cast<int>(lane >> 2), tig = static_cast<int>(lane % 4);
  return {tig * 2 + (i & 1) + (i >= 2 ? 8 : 0), group};
}

Coord mma_c_coord(unsigned lane, int i) {
  const int group = static_cast<int>(lane >> 2), tig = static_cast<int>(lane % 4);
  return {i < 2 ? group : group + 8, tig * 2 + (i & 1)};
}

std::array<uint32_t, 4> ldmatrix_lane(const std::array<const uint8_t*, 32>& rows, unsigned lane,
                                      bool trans) {
  std::array<uint32_t, 4> r{};
  const unsigned q = lane / 4, pair = 2 * (lane % 4);
  for (unsigned m = 0; m < 4; ++m) {
    uint16_t lo, hi;
    if (!trans) {  // row q of matrix m, elements pair and pair + 1
      std::memcpy(&lo, rows[8 * m + q] + 2 * pair, 2);
      std::memcpy(&hi, rows[8 * m + q] + 2 * (pair + 1), 2);
    } else {  // column q of matrix m, rows pair and pair + 1
      std::memcpy(&lo, rows[8 * m + pair] + 2 * q, 2);
      std::memcpy(&hi, rows[8 * m + pair + 1] + 2 * q, 2);
    }
    r[m] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  return r;
}

void mma_lane(const std::array<MmaOperands, 32>& ops, unsigned lane, float (&d)[4]) {
  float a[16][16], b[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    for (int i = 0; i < 8; ++i) {
      const Coord c = mma_a_coord(l, i);
      a[c.row][c.col] = bf16_to_float(static_cast<uint16_t>(ops[l].a[i / 2] >> (16 * (i & 1))));
    }
    for (int i = 0; i < 4; ++i) {
      const Coord c = mma_b_coord(l, i);
      b[c.row][c.col] = bf16_to_float(static_cast<uint16_t>(ops[l].b[i / 2] >> (16 * (i & 1))));
    }
  }
  for (int i = 0; i < 4; ++i) {
    const Coord c = mma_c_coord(lane, i);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc = std::fma(a[c.row][k], b[k][c.col], acc);
    d[i] = acc;
  }
}

float ex2_approx_ftz(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.0f, x);
  const float y = std::exp2(x);
  if (std::fpclassify(y) == FP_SUBNORMAL) return 0.0f;  // y > 0: +0
  return y;
}

uint16_t cvt_satfinite_e4m3x2(float a, float b) {
  // cuda_fp8.h puts float2 .x in the low byte (its device path issues cvt d, x.y, x.x).
  return __nv_cvt_float2_to_fp8x2(make_float2(b, a), __NV_SATFINITE, __NV_E4M3);
}

uint16_t cvt_satfinite_e5m2x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(b, a), __NV_SATFINITE, __NV_E5M2);
}

}  // namespace cudasim::ptx
