// cudasim/tests/execution_test.cpp: the emulated device's execution model: every thread runs,
// barriers order shared memory, warp shuffles and votes move the right values, atomics add up,
// dynamic shared memory is the block's own, and blocks see their coordinates.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "copies.h"
#include "cudasim/thread.h"

namespace {

using cudasim_testing::device_copy;
using cudasim_testing::host_copy;

__global__ void index_kernel(int* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = i * 3 + static_cast<int>(gridDim.x);
}

TEST(CudasimExecution, EveryThreadOfEveryBlockRuns) {
  const int n = 1000;  // 4 blocks of 256, the last one partial
  int* d = device_copy(std::vector<int>(n, -1));
  cudasim::launch(index_kernel, dim3(4), dim3(256), 0, nullptr, d, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = host_copy(d, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], i * 3 + 4) << i;
  cudaFree(d);
}

// A block sum through shared memory: correct only if the barriers order the phases.
__global__ void block_sum_kernel(const float* x, float* out) {
  __shared__ float partial[256];
  partial[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  for (unsigned s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

TEST(CudasimExecution, BarriersOrderSharedMemory) {
  std::vector<float> x(3 * 256);
  std::iota(x.begin(), x.end(), 0.0f);
  float* dx = device_copy(x);
  float* dout = device_copy(std::vector<float>(3, 0.0f));
  cudasim::launch(block_sum_kernel, dim3(3), dim3(256), 0, nullptr, dx, dout);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = host_copy(dout, 3);
  for (int b = 0; b < 3; ++b) {
    double want = 0;
    for (int i = 0; i < 256; ++i) want += x[b * 256 + i];
    EXPECT_EQ(h[b], static_cast<float>(want));  // integers below 2^24: exact in any order
  }
  cudaFree(dx);
  cudaFree(dout);
}

__global__ void warp_kernel(int* out) {
  int v = static_cast<int>(threadIdx.x);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const unsigned odd = __ballot_sync(0xffffffffu, threadIdx.x & 1);
  out[threadIdx.x] = v;
  out[64 + threadIdx.x] = static_cast<int>(odd);
  const int any = __syncthreads_or(threadIdx.x == 37);
  out[128 + threadIdx.x] = any;
}

TEST(CudasimExecution, WarpShuffleBallotAndBarrierVote) {
  int* d = device_copy(std::vector<int>(192, 0));
  cudasim::launch(warp_kernel, dim3(1), dim3(64), 0, nullptr, d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = host_copy(d, 192);
  for (int t = 0; t < 64; ++t) {
    const int warp = t / 32;
    EXPECT_EQ(h[t], 32 * 31 / 2 + 32 * 32 * warp) << t;  // sum of the warp's thread indices
    EXPECT_EQ(static_cast<unsigned>(h[64 + t]), 0xaaaaaaaau) << t;
    EXPECT_EQ(h[128 + t], 1) << t;
  }
  cudaFree(d);
}

__global__ void atomic_kernel(unsigned* counter, float* sum) {
  atomicAdd(counter, 1u);
  atomicAdd(sum, 0.5f);
}

TEST(CudasimExecution, AtomicsCountEveryThread) {
  unsigned* c = device_copy(std::vector<unsigned>(1, 0));
  float* s = device_copy(std::vector<float>(1, 0.0f));
  cudasim::launch(atomic_kernel, dim3(5, 2), dim3(8, 4, 2), 0, nullptr, c, s);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host_copy(c, 1)[0], 5u * 2 * 64);
  EXPECT_EQ(host_copy(s, 1)[0], 5.0f * 2 * 64 * 0.5f);
  cudaFree(c);
  cudaFree(s);
}

__global__ void dynamic_shared_kernel(int* out) {
  int* smem = static_cast<int*>(cudasim::dynamic_shared_base());
  smem[threadIdx.x] = static_cast<int>(threadIdx.x + blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = smem[blockDim.x - 1 - threadIdx.x];
}

TEST(CudasimExecution, DynamicSharedMemoryIsTheBlocksOwn) {
  int* d = device_copy(std::vector<int>(2 * 96, 0));
  cudasim::launch(dynamic_shared_kernel, dim3(2), dim3(96), 96 * sizeof(int), nullptr, d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = host_copy(d, 2 * 96);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 96; ++t) EXPECT_EQ(h[b * 96 + t], 95 - t + b);
  cudaFree(d);
}

}  // namespace
