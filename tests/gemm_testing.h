// tests/gemm_testing.h: what the GEMM tests (tests/kernels/test_gemm.cpp,
// tests/fp8/test_scaled_gemm.cpp) share: a reference C with its error bound, the check of
// a device's C against the CPU's, and the restoring of the CPU GEMM engine.
// defines: Expected, Dims, expect_within_bound, expect_close_to_cpu, EngineGuard, cpu_engines
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"

namespace octet::testing {

// A reference C: the float64 value of each element and a bound on how far a kernel's
// result may be from it.
struct Expected {
  std::vector<double> value, bound;
};

// A GEMM's shape: C is m x n, the sum runs over k.
struct Dims {
  int64_t m, n, k;
};

// Asserts |C - exact| <= bound everywhere; reports the worst element.
inline void expect_within_bound(const std::vector<double>& got, const Expected& e,
                                const std::string& what) {
  ASSERT_EQ(got.size(), e.value.size()) << what;
  size_t worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - e.value[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / std::max(e.bound[i], 1e-300);
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": element " << worst << " is " << got[worst] << ", exact "
                              << e.value[worst] << ", bound " << e.bound[worst];
}

// A device's C against the CPU's: each lies within its bound of the exact result, so
// they differ by at most the sum of the two bounds.
inline void expect_close_to_cpu(const std::vector<double>& got, const std::vector<double>& cpu,
                                const Expected& device_bound, const Expected& cpu_bound,
                                const std::string& what) {
  ASSERT_EQ(got.size(), cpu.size()) << what;
  size_t worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(got[i] - cpu[i]);
    const double allowed = std::max(device_bound.bound[i] + cpu_bound.bound[i], 1e-300);
    // NaN and infinities must agree exactly (both NaN, or the same infinity).
    const bool same_special = (std::isnan(got[i]) && std::isnan(cpu[i])) || got[i] == cpu[i];
    const double ratio = same_special ? 0.0 : std::isnan(diff) ? INFINITY : diff / allowed;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  EXPECT_LE(worst_ratio, 1.0) << what << " vs the CPU: element " << worst << " is " << got[worst]
                              << ", CPU " << cpu[worst] << ", allowed difference "
                              << device_bound.bound[worst] + cpu_bound.bound[worst];
}

// Restores the CPU GEMM engine a test switches between when it goes out of scope.
class EngineGuard {
 public:
  EngineGuard() : saved_(kernels::cpu::gemm_impl()) {}
  ~EngineGuard() { kernels::cpu::set_gemm_impl(saved_); }

 private:
  kernels::cpu::GemmImpl saved_;
};

// The CPU engines that run on this machine: the reference always; oneDNN on bf16 widened to
// f32 where the build has oneDNN; oneDNN's own bf16 matmul where it has one on this CPU.
inline std::vector<kernels::cpu::GemmImpl> cpu_engines() {
  using kernels::cpu::GemmImpl;
  std::vector<GemmImpl> engines{GemmImpl::reference};
  if (kernels::cpu::onednn_available()) engines.push_back(GemmImpl::onednn_f32);
  if (kernels::cpu::onednn_bf16_available()) engines.push_back(GemmImpl::onednn);
  return engines;
}

}  // namespace octet::testing
