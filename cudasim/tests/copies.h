// cudasim/tests/copies.h: host <-> emulated-device copies for cudasim's own tests.
// defines: device_copy, host_copy
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

namespace cudasim_testing {

// A new device allocation holding `host` (the test frees it, or cudaDeviceReset does).
template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> host_copy(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

}  // namespace cudasim_testing
