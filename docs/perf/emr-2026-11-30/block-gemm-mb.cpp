// The block recipe's FP8 GEMM kernel (kernels/cpu/gemm_fp8_block_cpu.cpp) on AMX and on
// AVX512_BF16, beside oneDNN's bf16 matmul of the same shape (operands already bf16, alpha as
// the per-tensor FP8 GEMMs pass it), in one process, interleaved: the fastest of 50 rounds.
// Build: g++ -O2 -std=c++20 -fopenmp -Isrc block-gemm-mb.cpp build-cpu/liboctet.a -ldnnl
//        -lsleef -lopenblas -lgomp -lsentencepiece -lsentencepiece_train -lmpi_cxx -lmpi
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"
using namespace octet;
template <class F>
double once(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
int main() {
  // The 256-wide model's block-recipe GEMMs at 8 x 256 tokens: forward (M tokens), weight
  // gradients (K tokens).
  struct S { int64_t m, n, k; } shapes[] = {{2048, 256, 256}, {2048, 688, 256}, {2048, 256, 688},
                                             {256, 256, 2048}, {688, 256, 2048}};
  std::mt19937 rng(1);
  std::printf("M x N x K: fastest of 50 rounds, ms (GFLOP/s)\n");
  std::printf("%-18s | %-18s | %-18s | %-18s\n", "shape", "block on AMX", "block on AVX512_BF16",
              "oneDNN bf16");
  for (auto sh : shapes) {
    const int64_t slices = (sh.k + 127) / 128;
    std::vector<uint8_t> a(sh.m * sh.k), b(sh.n * sh.k);
    for (auto& x : a) x = rng() & 0x77;
    for (auto& x : b) x = rng() & 0x77;
    std::vector<float> sa(sh.m * slices, 0.5f), sb(sh.n * slices, 0.25f);
    std::vector<uint16_t> c(sh.m * sh.n), a16(sh.m * sh.k, 0x3f80), b16(sh.n * sh.k, 0x3f80);
    std::vector<char> ws(kernels::cpu::fp8_block_gemm_workspace_bytes(sh.m, sh.n, sh.k, 128));
    const kernels::cpu::Fp8BlockGemm g{a.data(), DType::e4m3, b.data(), DType::e4m3, sh.m, sh.n,
                                       sh.k, 128, sa.data(), sb.data(), c.data(), DType::bf16,
                                       1.0f, 0.0f};
    double best[3] = {1e9, 1e9, 1e9};
    for (int r = 0; r < 50; ++r) {
      setenv("OCTET_CPU_ISA", "amx", 1);
      best[0] = std::min(best[0], once([&] { kernels::cpu::fp8_block_gemm(g, ws.data()); }));
      setenv("OCTET_CPU_ISA", "avx512", 1);
      best[1] = std::min(best[1], once([&] { kernels::cpu::fp8_block_gemm(g, ws.data()); }));
      best[2] = std::min(best[2], once([&] {
        kernels::cpu::run_matmul({a16.data(), b16.data(), c.data(), DType::bf16, DType::bf16, sh.m,
                                  sh.n, sh.k, false, true, 0.5f, 0.0f});
      }));
    }
    char name[32];
    std::snprintf(name, sizeof name, "%ld x %ld x %ld", sh.m, sh.n, sh.k);
    std::printf("%-18s", name);
    for (double t : best) std::printf(" | %6.3f (%6.0f)    ", t * 1e3, 2.0 * sh.m * sh.n * sh.k / t * 1e-9);
    std::printf("\n");
  }
}
