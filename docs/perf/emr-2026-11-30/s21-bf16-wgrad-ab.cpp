// docs/perf/emr-2026-11-30/s21-bf16-wgrad-ab.cpp: the twenty-first session's scratch program (a
// record of how s21-bf16-wgrad-ab.txt was measured, not part of the build): the bf16 weight
// gradients of one 256-wide layer at 8 x 256 tokens (dW [out, in] += dyᵀ x, dy stored [T, out], x
// [T, in], C f32, beta 1) through kernels::gemm, alternating call by call between OCTET_CPU_ISA
// unset (octet's AMX kernel, where bf16_amx_gemm_takes) and OCTET_CPU_ISA=avx512 (oneDNN's
// brgemm, which runs on AMX by its own choice); per shape the median and the fastest of the
// calls after three. Build against a tree's build-cpu/liboctet.a:
//   g++ -std=c++20 -O2 -fopenmp -Isrc s21-bf16-wgrad-ab.cpp build-cpu/liboctet.a -ldnnl -lsleef \
//       -lsentencepiece_train -lsentencepiece $(mpicxx --showme:link) -lpthread -o wab
//   OMP_NUM_THREADS=2 ./wab [CALLS]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/gemm.h"
using namespace octet;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 40;
  struct S {
    int64_t m, n, k;
    const char* what;
  } shapes[] = {{512, 256, 2048, "wgrad qkv"},
                {256, 256, 2048, "wgrad o"},
                {1376, 256, 2048, "wgrad gate/up"},
                {256, 688, 2048, "wgrad down"},
                {1024, 256, 2048, "wgrad lm head"}};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> bits(0x3c00, 0x4000);  // bf16 in [2^-7, 2]
  double sum[2] = {0, 0};
  for (const S& s : shapes) {
    std::vector<uint16_t> a(s.m * s.k), b(s.n * s.k);
    for (auto& x : a) x = static_cast<uint16_t>(bits(rng));
    for (auto& x : b) x = static_cast<uint16_t>(bits(rng));
    std::vector<float> c(s.m * s.n, 0.0f);
    const Tensor ta(a.data(), DType::bf16, {s.k, s.m}), tb(b.data(), DType::bf16, {s.k, s.n});
    const Tensor tc(c.data(), DType::f32, {s.m, s.n});
    kernels::GemmOptions o;
    o.trans_a = true;
    o.trans_b = false;
    o.beta = 1.0f;
    std::vector<uint8_t> ws(std::max<size_t>(kernels::gemm_workspace_bytes(ta, tb, tc, o), 1));
    o.workspace = Tensor(ws.data(), DType::u8, {static_cast<int64_t>(ws.size())});
    std::vector<double> t[2];
    for (int i = 0; i < calls + 3; ++i) {
      for (int way = 0; way < 2; ++way) {
        if (way == 0) {
          unsetenv("OCTET_CPU_ISA");
        } else {
          setenv("OCTET_CPU_ISA", "avx512", 1);
        }
        const double t0 = now();
        kernels::gemm(ta, tb, tc, o);
        if (i >= 3) t[way].push_back(now() - t0);
      }
    }
    double med[2], best[2];
    for (int w = 0; w < 2; ++w) {
      std::sort(t[w].begin(), t[w].end());
      med[w] = t[w][t[w].size() / 2] * 1e3;
      best[w] = t[w][0] * 1e3;
      sum[w] += med[w];
    }
    std::printf("%-14s %5ld %5ld %5ld | octet %6.3f ms (fastest %6.3f) | oneDNN %6.3f ms (fastest "
                "%6.3f) | %.2fx\n",
                s.what, s.m, s.n, s.k, med[0], best[0], med[1], best[1], med[0] / med[1]);
  }
  std::printf("sum of medians: octet's way %.3f ms, oneDNN %.3f ms\n", sum[0], sum[1]);
}
