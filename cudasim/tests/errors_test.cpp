// cudasim/tests/errors_test.cpp: the emulated device reports what the real one would: bad launch
// configurations through cudaGetLastError, host pointers handed to kernels, partial warp
// collectives and barriers not every thread reaches as sticky faults (with a message naming the
// kernel, block, thread and what was missing), instead of hanging or running on.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cudasim/thread.h"

namespace {

using testing::internal::CaptureStderr;
using testing::internal::GetCapturedStderr;

// Each test leaves the device without a sticky error for the next.
class CudasimErrors : public testing::Test {
 protected:
  void TearDown() override { cudaDeviceReset(); }
};

int g_runs = 0;  // host-side count of kernel thread executions (kernels run on this thread)

__global__ void count_kernel(int* p) {
  atomicAdd(&g_runs, 1);
  if (p != nullptr && threadIdx.x == 0) p[0] = 1;
}

TEST_F(CudasimErrors, TooManyThreadsIsAConfigurationError) {
  g_runs = 0;
  cudasim::launch(count_kernel, dim3(1), dim3(1025), 0, nullptr, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  cudasim::launch(count_kernel, dim3(1), dim3(32, 32, 2), 0, nullptr, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudasim::launch(count_kernel, dim3(1), dim3(1, 1, 65), 0, nullptr, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(g_runs, 0);
  cudasim::launch(count_kernel, dim3(1), dim3(1024), 0, nullptr, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(g_runs, 1024);
}

TEST_F(CudasimErrors, GridPastItsLimitsIsAConfigurationError) {
  g_runs = 0;
  cudasim::launch(count_kernel, dim3(1, 65536), dim3(1), 0, nullptr, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudasim::launch(count_kernel, dim3(1, 1, 65536), dim3(1), 0, nullptr, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudasim::launch(count_kernel, dim3(0), dim3(1), 0, nullptr, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(g_runs, 0);
}

__global__ void smem_kernel(int* p) {
  if (threadIdx.x == 0) p[0] = static_cast<int>(cudasim::dynamic_shared_bytes());
}

TEST_F(CudasimErrors, DynamicSharedMemoryPastTheAllowanceIsRefused) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)), cudaSuccess);
  cudasim::launch(smem_kernel, dim3(1), dim3(32), 48 * 1024, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudasim::launch(smem_kernel, dim3(1), dim3(32), 48 * 1024 + 1, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // the default limit is 48 KB
  EXPECT_EQ(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 227 * 1024 + 1),
            cudaErrorInvalidValue);  // sm_90 has 227 KB a block
  (void)cudaGetLastError();
  ASSERT_EQ(
      cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
      cudaSuccess);
  cudasim::launch(smem_kernel, dim3(1), dim3(32), 100 * 1024, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int h = 0;
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 100 * 1024);
  cudasim::launch(smem_kernel, dim3(1), dim3(32), 100 * 1024 + 4, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // past what the attribute allowed
  cudaFree(d);
}

TEST_F(CudasimErrors, AHostPointerArgumentIsRefused) {
  g_runs = 0;
  std::vector<int> host(4);
  CaptureStderr();
  cudasim::launch(count_kernel, dim3(1), dim3(32), 0, nullptr, host.data());
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);  // sticky, as the fault would be
  EXPECT_EQ(g_runs, 0);
  EXPECT_NE(err.find("argument 0"), std::string::npos) << err;
  EXPECT_NE(err.find("not device memory"), std::string::npos) << err;
  int local = 0;
  CaptureStderr();
  cudaDeviceReset();
  cudasim::launch(count_kernel, dim3(1), dim3(32), 0, nullptr, &local);
  EXPECT_NE(GetCapturedStderr().find("stack"), std::string::npos);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}

struct Args {
  const float* x;
  int n;
};
__global__ void struct_kernel(Args a) {
  if (threadIdx.x == 0 && a.n > 0) ++g_runs;
}

TEST_F(CudasimErrors, AHostPointerInsideAStructArgumentIsRefused) {
  std::vector<float> host(16);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), 16 * sizeof(float)), cudaSuccess);
  g_runs = 0;
  cudasim::launch(struct_kernel, dim3(1), dim3(32), 0, nullptr, Args{dev + 3, 16});
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(g_runs, 1);
  float on_stack[4] = {};
  CaptureStderr();
  cudasim::launch(struct_kernel, dim3(1), dim3(32), 0, nullptr, Args{on_stack, 4});
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_NE(err.find("argument 0 (a struct"), std::string::npos) << err;
  cudaDeviceReset();
#if defined(__SANITIZE_ADDRESS__)  // only AddressSanitizer can tell a heap address
  CaptureStderr();
  cudasim::launch(struct_kernel, dim3(1), dim3(32), 0, nullptr, Args{host.data() + 1, 4});
  EXPECT_NE(GetCapturedStderr().find("heap"), std::string::npos);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  cudaDeviceReset();
#endif
  EXPECT_EQ(g_runs, 1);
  cudaFree(dev);
}

// A whole 8-byte word of padding after `a` (b is 16-aligned) and another at the end.
struct Padded {
  int64_t a;
  alignas(16) int64_t b;
};
static_assert(sizeof(Padded) == 32);
__global__ void padded_kernel(Padded p) {
  if (threadIdx.x == 0 && p.a == 1 && p.b == 2) ++g_runs;
}

TEST_F(CudasimErrors, AHostAddressLeftInAStructsPaddingIsNotReported) {
  // Every word of the struct first holds a stack address, then the fields are assigned: the
  // padding words keep the address, as a struct copied from reused stack memory can.
  float on_stack[4] = {};
  const auto address = reinterpret_cast<uintptr_t>(on_stack);
  Padded p;
  for (size_t off = 0; off < sizeof p; off += 8)
    std::memcpy(reinterpret_cast<char*>(&p) + off, &address, sizeof address);
  p.a = 1;
  p.b = 2;
  alignas(Padded) unsigned char bytes[sizeof(Padded)];
  cudasim::detail::bytes_without_padding(p, bytes);
  Padded fields;
  std::memcpy(&fields, bytes, sizeof fields);
  EXPECT_EQ(fields.a, 1);
  EXPECT_EQ(fields.b, 2);
  for (size_t i : {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31})
    EXPECT_EQ(bytes[i], 0) << "padding byte " << i;
  g_runs = 0;
  CaptureStderr();
  cudasim::launch(padded_kernel, dim3(1), dim3(32), 0, nullptr, p);
  EXPECT_EQ(GetCapturedStderr(), "");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(g_runs, 1);
}

__global__ void partial_shuffle_kernel(int* out) {
  if (threadIdx.x == 7) return;  // lane 7 leaves; the others name it in their mask
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

TEST_F(CudasimErrors, AShuffleWhoseMaskNamesAnAbsentLaneFaults) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 32 * sizeof(int)), cudaSuccess);
  CaptureStderr();
  cudasim::launch(partial_shuffle_kernel, dim3(2), dim3(32), 0, nullptr, d);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);  // sticky
  EXPECT_NE(err.find("__shfl_xor_sync"), std::string::npos) << err;
  EXPECT_NE(err.find("lane 7"), std::string::npos) << err;
  EXPECT_NE(err.find("partial_shuffle_kernel"), std::string::npos) << err;
  EXPECT_NE(err.find("CUDASIM_SEED"), std::string::npos) << err;
}

__global__ void early_exit_barrier_kernel(float* out) {
  __shared__ float s[64];
  if (threadIdx.x >= 60) return;  // these four never reach the barrier
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[63 - threadIdx.x];
}

TEST_F(CudasimErrors, ABarrierNotEveryThreadReachesFaults) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float)), cudaSuccess);
  CaptureStderr();
  cudasim::launch(early_exit_barrier_kernel, dim3(1), dim3(64), 0, nullptr, d);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(err.find("__syncthreads"), std::string::npos) << err;
  EXPECT_NE(err.find("every thread of the block must reach it"), std::string::npos) << err;
}

__global__ void divergent_barrier_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

TEST_F(CudasimErrors, DivergentBarriersFault) {
  CaptureStderr();
  cudasim::launch(divergent_barrier_kernel, dim3(1), dim3(32), 0, nullptr);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(err.find("divergent barriers"), std::string::npos) << err;
}

// Lane 0 waits at a barrier while lanes 1..31 wait for it in a shuffle: a hang on hardware.
__global__ void deadlock_kernel(int* out) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
    __syncthreads();
  }
}

TEST_F(CudasimErrors, ADeadlockIsReportedWithWhoWaitsWhere) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 32 * sizeof(int)), cudaSuccess);
  CaptureStderr();
  cudasim::launch(deadlock_kernel, dim3(1), dim3(32), 0, nullptr, d);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
  EXPECT_NE(err.find("lane 0 waits at __syncthreads"), std::string::npos) << err;
}

__global__ void mask_without_self_kernel() {
  (void)__ballot_sync(0x1u, 1);  // lane 5 calls with a mask that names only lane 0
}

TEST_F(CudasimErrors, AMaskThatDoesNotNameTheCallerFaults) {
  CaptureStderr();
  cudasim::launch(mask_without_self_kernel, dim3(1), dim3(32), 0, nullptr);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(err.find("does not name the calling lane"), std::string::npos) << err;
}

__global__ void fault_kernel() {
  if (blockIdx.x == 2 && threadIdx.x == 5) cudasim::fault(cudaErrorIllegalAddress, "planted");
}

TEST_F(CudasimErrors, AFaultNamesKernelBlockAndThreadAndIsSticky) {
  CaptureStderr();
  cudasim::launch(fault_kernel, dim3(4), dim3(32), 0, nullptr);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorIllegalAddress);  // every call, until a reset
  EXPECT_NE(err.find("block (2,0,0)"), std::string::npos) << err;
  EXPECT_NE(err.find("thread (5,0,0)"), std::string::npos) << err;
  EXPECT_NE(err.find("planted"), std::string::npos) << err;
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudasimErrors, CopiesAreCheckedAgainstTheRegistry) {
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  std::vector<char> h(64);
  EXPECT_TRUE(cudasim::is_device_range(d, 64));
  EXPECT_TRUE(cudasim::is_device_range(static_cast<char*>(d) + 60, 4));
  EXPECT_FALSE(cudasim::is_device_range(static_cast<char*>(d) + 60, 5));
  EXPECT_FALSE(cudasim::is_device_range(h.data(), 1));
  CaptureStderr();
  EXPECT_EQ(cudaMemcpy(h.data(), d, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 65, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  GetCapturedStderr();
  (void)cudaGetLastError();
  EXPECT_EQ(cudaMemcpy(d, h.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_FALSE(cudasim::is_device_range(d, 1));
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);  // twice
  (void)cudaGetLastError();
}

unsigned g_order[64];
unsigned g_next = 0;
__global__ void order_kernel() {
  if (threadIdx.x == 0) g_order[g_next++] = blockIdx.x;
}

TEST(CudasimSchedule, BlocksRunInAShuffledOrder) {
  g_next = 0;
  cudasim::launch(order_kernel, dim3(64), dim3(1), 0, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(g_next, 64u);
  std::vector<unsigned> order(g_order, g_order + 64);
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));  // 1 in 64! by chance
  std::sort(order.begin(), order.end());
  for (unsigned i = 0; i < 64; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
