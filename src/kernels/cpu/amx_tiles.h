// kernels/cpu/amx_tiles.h: what the CPU kernels that use AMX share (the block recipe's FP8 GEMM
// in gemm_fp8_block_cpu.cpp, attention's score products in attention_dot_bf16.h): their target
// attribute, and their one tile configuration, all eight tiles 16 rows of 64 bytes (A as 16 rows
// of 32 bf16, B as 16 K pairs of 16 columns, C as 16 x 16 fp32). Whether the machine lets a
// kernel use AMX is isa.h's usable_amx. Internal to kernels/cpu.
// defines: OCTET_HAVE_AMX, OCTET_AMX, cpu::amx_configure, cpu::amx_release
#pragma once

#include "kernels/cpu/intrinsics.h"

// clang before 16 (the fuzzing build) is left without: isa.h's hardware_has_amx_bf16 is false
// there too.
#if defined(__x86_64__) && defined(__GNUC__) && !(defined(__clang__) && __clang_major__ < 16)
#include <cstdint>

#define OCTET_HAVE_AMX 1
#define OCTET_AMX                                                                \
  __attribute__((                                                                \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi2," \
             "amx-tile,amx-bf16")))

namespace octet::kernels::cpu {

// Loads the tile configuration (palette 1) on this thread: every kernel's tmm0..7 as above.
OCTET_AMX inline void amx_configure() {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  // GCC's ldtilecfg asm names only the first 8 bytes as its input: the barrier keeps the stores
  // to the rest of the configuration (without it, inlined, they were dropped: SIGILL at the
  // first tile load).
  asm volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

// Returns this thread's tiles to their initial state (no configuration, nothing to save).
OCTET_AMX inline void amx_release() {
  _tile_release();
}

}  // namespace octet::kernels::cpu
#endif
