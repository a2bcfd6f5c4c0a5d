// kernels/cpu/isa.h: which vector instruction set the CPU kernels' variants may use:
// what the machine has, capped by OCTET_CPU_ISA (for tests and for comparing
// variants, like oneDNN's ONEDNN_MAX_CPU_ISA).
// defines: cpu::Isa, cpu::usable_isa, cpu::hardware_has_avx512_bf16, cpu::usable_amx,
//          cpu::f32_fma_outruns_bf16_dot
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

// Whether the machine has AMX tiles with bf16 products (tdpbf16ps) and AVX512_BF16, and
// Linux lets this process use the tiles' state (arch_prctl ARCH_REQ_XCOMP_PERM for
// XTILEDATA, asked once; oneDNN asks the same for its own AMX kernels).
inline bool hardware_has_amx_bf16() {
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    !(defined(__clang__) && __clang_major__ < 16)
  static const bool usable = [] {
    // CPUID.(7, 0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE (GCC 12's __builtin_cpu_supports
    // does not know them); XCR0 bits 17 and 18 the tiles' state, enabled by the OS.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!hardware_has_avx512_bf16() || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) ||
        (edx & (1u << 22)) == 0 || (edx & (1u << 24)) == 0)
      return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

// Whether f32 FMAs make more products a cycle than vdpbf16ps on this CPU: an Intel core with
// AVX512_BF16 and no usable AMX (a Sapphire or Emerald Rapids guest whose hypervisor hides AMX,
// or Cooper Lake). On the Emerald Rapids guest of docs/perf/cpu-step.md (twenty-eighth session)
// vdpbf16ps zmm issues once every 2 cycles and vfmadd231ps zmm twice a cycle: 32 products a
// cycle against 16, and oneDNN's f32 matmul ran the `small` layer's bf16 GEMMs in 0.67x its bf16
// matmul's time. AMD's Zen 4 and 5 issue vdpbf16ps at their FMAs' rate (twice the products);
// with AMX, oneDNN and octet's kernels multiply bf16 on the tiles.
inline bool f32_fma_outruns_bf16_dot() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_is("intel") && hardware_has_avx512_bf16() && !hardware_has_amx_bf16();
#else
  return false;
#endif
}

// The level a kernel of `op` may use now, and whether AMX is allowed (OCTET_CPU_ISA unset or
// amx). OCTET_CPU_ISA is read on each call (cheap next to any array worth the call) so that a
// test can switch variants in one process.
struct IsaRequest {
  Isa level;
  bool amx;
};
inline IsaRequest requested_isa(const char* op) {
  const char* env = std::getenv("OCTET_CPU_ISA");
  if (env == nullptr || *env == '\0') return {Isa::avx512, true};
  const std::string_view name(env);
  if (name == "baseline") return {Isa::baseline, false};
  if (name == "avx2") return {Isa::avx2, false};
  if (name == "avx512") return {Isa::avx512, false};
  if (name == "amx") return {Isa::avx512, true};
  OCTET_FAIL(op, "OCTET_CPU_ISA='", name, "' is not one of baseline, avx2, avx512, amx");
}

inline Isa usable_isa(const char* op) {
  static const Isa hardware = hardware_isa();
  return std::min(hardware, requested_isa(op).level);
}

// Whether a kernel of `op` may use AMX's bf16 tiles now: the machine has them (with AVX-512
// and AVX512_BF16) and OCTET_CPU_ISA is unset or amx (avx512 keeps a kernel to its AVX-512 way).
inline bool usable_amx(const char* op) {
  return requested_isa(op).amx && hardware_has_amx_bf16();
}

}  // namespace octet::kernels::cpu
