// tests/testing.h: what the tests share: the devices every kernel test runs on,
// seeded random inputs, and float64 reference helpers.
// defines: all_devices, device_param_name, OCTET_SKIP_WITHOUT, fresh_seed, Rng, kAllDTypes,
//          kNaN, kInf, count, kU, kUBf16, gamma, error_of, for_each_cpu_isa
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/isa.h"

namespace octet::testing {

// Every kernel test is instantiated for the CPU and for cuda:0; the cuda
// instance skips itself (and is reported skipped) where there is no GPU.
inline std::vector<Device> all_devices() {
  return {Device::cpu(), Device::cuda(0)};
}
inline std::string device_param_name(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cpu() ? "cpu" : "cuda";
}

// A fresh seed per run (inputs are new each time), printed so a failure can be replayed
// with OCTET_TEST_SEED=<seed>.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("OCTET_TEST_SEED")) return std::stoull(s);
  const uint64_t seed = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::printf("[ seed     ] OCTET_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

using Rng = std::mt19937_64;

// Runs fn() once with OCTET_CPU_ISA set to each CPU instruction-set level in turn (baseline,
// avx2, avx512, and amx where the machine has AMX; the kernels cap it at what the machine has),
// under a trace naming the level, then restores the variable as it was (also after a failed ASSERT
// inside fn).
template <typename F>
void for_each_cpu_isa(F&& fn) {
  const char* saved = std::getenv("OCTET_CPU_ISA");
  const std::string restore = saved ? saved : "";
  // amx (AVX-512 with AMX's kernels) only where the machine has AMX: elsewhere it is avx512.
  for (const char* isa : {"baseline", "avx2", "avx512", "amx"}) {
    if (std::string(isa) == "amx" && !kernels::cpu::hardware_has_amx_bf16()) continue;
    SCOPED_TRACE(std::string("OCTET_CPU_ISA=") + isa);
    setenv("OCTET_CPU_ISA", isa, 1);
    fn();
  }
  if (saved) {
    setenv("OCTET_CPU_ISA", restore.c_str(), 1);
  } else {
    unsetenv("OCTET_CPU_ISA");
  }
}

// Every element type, in DType's order.
inline constexpr DType kAllDTypes[] = {DType::f32,  DType::bf16, DType::f16, DType::e4m3,
                                       DType::e5m2, DType::e8m0, DType::i32, DType::u8};
static_assert(std::size(kAllDTypes) == kNumDTypes, "a DType is missing from kAllDTypes");

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

// How many times `what` occurs in `text`, overlapping occurrences included.
inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

inline constexpr double kU = 0x1p-24;     // unit roundoff of fp32 (half an ulp, relative)
inline constexpr double kUBf16 = 0x1p-8;  // unit roundoff of bf16
// gamma_n = n u / (1 - n u): the relative error bound of a sum of n + 1 terms rounded with unit
// roundoff u (fp32's by default), in any order, relative to the sum of their magnitudes
// (Higham, (3.5)).
inline double gamma(int64_t n, double u = kU) {
  return n * u / (1.0 - n * u);
}

// The message of the octet::Error that `fn` throws; a test failure and "(no error)" when it
// throws none.
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an octet::Error";
  return "(no error)";
}

}  // namespace octet::testing

namespace octet {
// Names devices in test listings: "Devices/X.Y/cuda  # GetParam() = cuda:0".
inline void PrintTo(const Device& device, std::ostream* os) {
  *os << device_name(device);
}
}  // namespace octet

// Skips the current test unless `device` is usable here.
#define OCTET_SKIP_WITHOUT(device)                                                    \
  do {                                                                                \
    if ((device).is_cuda() && (device).index >= ::octet::cuda_device_count())         \
      GTEST_SKIP() << "no CUDA GPU on this machine (" << ::octet::device_name(device) \
                   << " unavailable)";                                                \
  } while (0)
