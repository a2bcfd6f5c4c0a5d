// cudasim/tests/test_ptx_twins.cpp: the PTX twins run by emulated threads and warps: cp.async
// poisons its destination until wait_group completes its group (and a block never inherits
// another block's copies), ldmatrix .x4 / .x4.trans hand each lane the fragment of the PTX ISA
// figure, mma.m16n8k16 computes A B + C from the documented fragments, and a partial warp
// at a collective is an error, not a hang. Marker values: element (r, c) holds r * 64 + c.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "copies.h"
#include "cudasim/ptx.h"
#include "cudasim/thread.h"

namespace {

using cudasim_testing::device_copy;
using cudasim_testing::host_copy;

uint32_t shared_offset(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Thread i copies 16 bytes of src (lanes with odd i: src-size 0, a zero fill) into its slot,
// and records the slot before and after the wait.
__global__ void cp_async_kernel(const uint8_t* src, uint8_t* before, uint8_t* after) {
  uint8_t* slots = static_cast<uint8_t*>(cudasim::dynamic_shared_base());
  const unsigned i = threadIdx.x;
  cudasim::ptx::cp_async(shared_offset(slots + 16 * i), src + 16 * i, 16, i % 2 ? 0 : 16);
  cudasim::ptx::cp_async_commit_group();
  std::memcpy(before + 16 * i, slots + 16 * i, 16);
  cudasim::ptx::cp_async_wait_group(0);
  std::memcpy(after + 16 * i, slots + 16 * i, 16);
}

TEST(CudasimPtx, CpAsyncDestinationIsPoisonUntilTheWait) {
  std::vector<uint8_t> src(32 * 16);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  uint8_t* d_src = device_copy(src);
  uint8_t* d_before = device_copy(std::vector<uint8_t>(src.size(), 0));
  uint8_t* d_after = device_copy(std::vector<uint8_t>(src.size(), 0));
  cudasim::launch(cp_async_kernel, dim3(1), dim3(32), 32 * 16, nullptr, d_src, d_before, d_after);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto before = host_copy(d_before, src.size()), after = host_copy(d_after, src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(before[i], cudasim::ptx::kPoison) << i;
    EXPECT_EQ(after[i], (i / 16) % 2 ? 0 : src[i]) << i;
  }
  cudaFree(d_src);
  cudaFree(d_before);
  cudaFree(d_after);
}

// A thread that exits with a copy in flight must not have it completed into a later block
// (the blocks of a launch share the emulated threads): each block first waits with nothing
// of its own in flight, then leaves a copy in flight.
__global__ void leave_copy_in_flight(const uint8_t* src, uint8_t* out) {
  uint8_t* slot = static_cast<uint8_t*>(cudasim::dynamic_shared_base()) + 16 * threadIdx.x;
  std::memset(slot, 0x5A, 16);
  cudasim::ptx::cp_async_wait_group(0);
  std::memcpy(out + 16 * (blockIdx.x * blockDim.x + threadIdx.x), slot, 16);
  cudasim::ptx::cp_async(shared_offset(slot), src, 16, 16);
  cudasim::ptx::cp_async_commit_group();
}

TEST(CudasimPtx, CpAsyncCopiesDoNotLeakIntoTheNextBlock) {
  uint8_t* d_src = device_copy(std::vector<uint8_t>(16, 0x11));
  uint8_t* d_out = device_copy(std::vector<uint8_t>(5 * 4 * 16, 0));
  cudasim::launch(leave_copy_in_flight, dim3(5), dim3(4), 4 * 16, nullptr, d_src, d_out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (uint8_t v : host_copy(d_out, 5 * 4 * 16)) EXPECT_EQ(v, 0x5A);
  cudaFree(d_src);
  cudaFree(d_out);
}

constexpr int kLd = 24;  // a 16 x 16 b16 tile, rows 24 elements apart (as the kernels pad)

// One warp: the tile into shared memory, then ldmatrix with the rows of matrix m = rows
// (m & 1) * 8.., columns (m >> 1) * 8.. (an mma A operand's order); out[lane * 4 + m].
__global__ void ldmatrix_kernel(const uint16_t* tile, uint32_t* out, bool trans) {
  uint16_t* s = static_cast<uint16_t*>(cudasim::dynamic_shared_base());
  const unsigned lane = threadIdx.x;
  for (int i = static_cast<int>(lane); i < 16 * kLd; i += 32) s[i] = tile[i];
  __syncwarp();
  const int row = static_cast<int>((lane & 7) + ((lane >> 3) & 1) * 8);
  const int col = static_cast<int>((lane >> 4) * 8);
  const auto r = cudasim::ptx::ldmatrix_x4(shared_offset(s + row * kLd + col), trans);
  for (int m = 0; m < 4; ++m) out[lane * 4 + m] = r[m];
}

std::vector<uint16_t> marker_tile() {
  std::vector<uint16_t> t(16 * kLd, 0xDEAD);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) t[r * kLd + c] = static_cast<uint16_t>(r * 64 + c);
  return t;
}

TEST(CudasimPtx, LdmatrixX4HandsEachLaneTheIsaFragment) {
  for (const bool trans : {false, true}) {
    uint16_t* d_tile = device_copy(marker_tile());
    uint32_t* d_out = device_copy(std::vector<uint32_t>(128, 0));
    cudasim::launch(ldmatrix_kernel, dim3(1), dim3(32), 16 * kLd * 2, nullptr, d_tile, d_out,
                    trans);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto out = host_copy(d_out, 128);
    for (unsigned l = 0; l < 32; ++l) {
      for (unsigned m = 0; m < 4; ++m) {
        const unsigned r0 = (m & 1) * 8, c0 = (m >> 1) * 8, q = l / 4, p = 2 * (l % 4);
        // Section 9.7.14.5.15, Figure 104: row q, columns p, p + 1; .trans: column q, rows p, p
        // + 1.
        const unsigned lo = trans ? (r0 + p) * 64 + c0 + q : (r0 + q) * 64 + c0 + p;
        const unsigned hi = trans ? (r0 + p + 1) * 64 + c0 + q : (r0 + q) * 64 + c0 + p + 1;
        EXPECT_EQ(out[l * 4 + m], lo | (hi << 16))
            << "trans " << trans << " lane " << l << " m " << m;
      }
    }
    cudaFree(d_tile);
    cudaFree(d_out);
  }
}

uint16_t bf16_bits(float x) {  // exact for the small integers used here
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
}

// One warp: D = A B + C, each lane building its fragments from row-major A (16 x 16) and B
// (16 x 8) by the formulas of section 9.7.14.5.8 and writing its D elements to d[row * 8 + col].
__global__ void mma_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  const unsigned lane = threadIdx.x;
  const unsigned g = lane >> 2, t = lane % 4;
  uint32_t fa[4] = {0, 0, 0, 0}, fb[2] = {0, 0};
  for (int i = 0; i < 8; ++i) {
    const unsigned row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    const unsigned col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    fa[i / 2] |= uint32_t{a[row * 16 + col]} << (16 * (i & 1));
  }
  for (int i = 0; i < 4; ++i) {
    const unsigned k = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
    fb[i / 2] |= uint32_t{b[k * 8 + g]} << (16 * (i & 1));
  }
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)];
  cudasim::ptx::mma_m16n8k16_bf16(acc, fa, fb[0], fb[1]);
  for (int i = 0; i < 4; ++i) d[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)] = acc[i];
}

TEST(CudasimPtx, MmaComputesTheProductOfTheIsaFragments) {
  // Small integers: every product and partial sum is exact in fp32, so any order agrees.
  std::vector<uint16_t> a(256), b(128);
  std::vector<float> c(128), want(128);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k)
      a[r * 16 + k] = bf16_bits(static_cast<float>((r * 5 + k * 3) % 11 - 5));
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) b[k * 8 + n] = bf16_bits(static_cast<float>((k * 7 + n) % 9 - 4));
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      c[r * 8 + n] = static_cast<float>(r * 8 + n);
      float s = c[r * 8 + n];
      for (int k = 0; k < 16; ++k)
        s += static_cast<float>((r * 5 + k * 3) % 11 - 5) * static_cast<float>((k * 7 + n) % 9 - 4);
      want[r * 8 + n] = s;
    }
  }
  uint16_t* da = device_copy(a);
  uint16_t* db = device_copy(b);
  float* dc = device_copy(c);
  float* dd = device_copy(std::vector<float>(128, -1.0f));
  cudasim::launch(mma_kernel, dim3(1), dim3(32), 0, nullptr, da, db, dc, dd);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = host_copy(dd, 128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(got[i], want[i]) << "row " << i / 8 << " col " << i % 8;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(dd);
}

// Half a warp at an mma: the other lanes never arrive, which the emulator reports.
__global__ void half_warp_mma_kernel(float* d) {
  if (threadIdx.x >= 16) return;
  float acc[4] = {0, 0, 0, 0};
  const uint32_t a[4] = {0, 0, 0, 0};
  cudasim::ptx::mma_m16n8k16_bf16(acc, a, 0, 0);
  d[threadIdx.x] = acc[0];
}

TEST(CudasimPtx, MmaWithPartOfTheWarpIsAnError) {
  float* dd = device_copy(std::vector<float>(32, 0.0f));
  cudasim::launch(half_warp_mma_kernel, dim3(1), dim3(32), 0, nullptr, dd);
  EXPECT_NE(cudaDeviceSynchronize(), cudaSuccess);
  cudaDeviceReset();  // the fault is sticky, as on hardware
  cudaFree(dd);
}

}  // namespace
