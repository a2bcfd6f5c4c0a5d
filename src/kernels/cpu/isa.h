// kernels/cpu/isa.h: which vector instruction set the CPU kernels' variants may use:
// what the machine has, capped by OCTET_CPU_ISA (for tests and for comparing
// variants, like oneDNN's ONEDNN_MAX_CPU_ISA).
// defines: cpu::Isa, cpu::usable_isa, cpu::hardware_has_avx512_bf16
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace octet::kernels::cpu {

// Levels in increasing order; avx2 includes fma, f16c and bmi2, avx512 adds f/bw/vl/dq.
enum class Isa : int { baseline = 0, avx2 = 1, avx512 = 2 };

inline Isa hardware_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 16
  // clang before 16 cannot ask for f16c (the fuzzing build); every AVX2 CPU has it.
  const bool f16c = true;
#else
  const bool f16c = __builtin_cpu_supports("f16c");
#endif
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c &&
                    __builtin_cpu_supports("bmi2");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return Isa::avx512;
  if (avx2) return Isa::avx2;
#endif
  return Isa::baseline;
}

// Whether the machine has AVX512_BF16 (vdpbf16ps) besides the avx512 level.
inline bool hardware_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__) && !(defined(__clang__) && __clang_major__ < 16)
  __builtin_cpu_init();
  return hardware_isa() == Isa::avx512 && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

// The level a kernel of `op` may use now. OCTET_CPU_ISA is read on each call (cheap
// next to any array worth the call) so that a test can switch variants in one process.
inline Isa usable_isa(const char* op) {
  static const Isa hardware = hardware_isa();
  Isa requested = Isa::avx512;
  const char* env = std::getenv("OCTET_CPU_ISA");
  if (env != nullptr && *env != '\0') {
    const std::string_view name(env);
    if (name == "baseline") {
      requested = Isa::baseline;
    } else if (name == "avx2") {
      requested = Isa::avx2;
    } else if (name != "avx512") {
      OCTET_FAIL(op, "OCTET_CPU_ISA='", name, "' is not one of baseline, avx2, avx512");
    }
  }
  return std::min(hardware, requested);
}

}  // namespace octet::kernels::cpu
