// kernels/cpu/intrinsics.h: the x86 intrinsics for the CPU kernels' AVX-512 variants, with
// the warning GCC 12 gives on them silenced. Internal to kernels/cpu.
// defines: nothing of its own (immintrin.h where the compiler targets x86 with GCC or clang)
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
// GCC 12 warns that the undefined vectors its AVX-512 intrinsics (_mm512_reduce_*, the
// casts) start from are uninitialised, in every file that uses them.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
