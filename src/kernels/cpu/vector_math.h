// kernels/cpu/vector_math.h: SLEEF's vector exp for the AVX-512 variants of the CPU kernels
// (1 ulp, as glibc's expf), where the build found SLEEF (OCTET_HAVE_SLEEF). Internal to
// kernels/cpu.
// defines: OCTET_AVX512, OCTET_CPU_VECTOR_EXP, cpu::exp16
#pragma once

#if defined(OCTET_HAVE_SLEEF) && defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define OCTET_CPU_VECTOR_EXP 1
// GCC 12 warns that the undefined vectors its AVX-512 reductions (_mm512_reduce_*) start
// from are uninitialised, in every file that uses them.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The target of the functions that use AVX-512 (the machine is checked at run time).
#define OCTET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")))

// sleef.h declares its AVX-512 functions only where the whole file is compiled for AVX-512;
// octet turns AVX-512 on per function, so it declares the one it calls.
extern "C" __attribute__((target("avx512f"))) __m512 Sleef_expf16_u10avx512f(__m512);

namespace octet::kernels::cpu {

OCTET_AVX512 inline __m512 exp16(__m512 x) {
  return Sleef_expf16_u10avx512f(x);
}

}  // namespace octet::kernels::cpu
#endif
