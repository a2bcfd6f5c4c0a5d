// docs/perf/emr-2026-11-30/s21-mx-wgrad-ab.cpp: the twenty-first session's scratch program (a
// record of how s21-mx-wgrad-ab.txt was measured, not part of the build): the MX weight gradients
// of one 256-wide layer at 8 x 256 tokens as the MX recipe runs them (dyᵀ E5M2 [out, T] and xᵀ
// E4M3 [in, T], both K-major with an E8M0 scale per 32 tokens, C f32, beta 1) through
// kernels::gemm, alternating call by call between OCTET_CPU_ISA unset (the folded rows widened
// into the AMX kernel's layout, where bf16_amx_gemm_takes) and OCTET_CPU_ISA=avx512 (the folded
// widening, then oneDNN's brgemm); the median and the fastest of the calls after three. Build:
//   g++ -std=c++20 -O2 -fopenmp -Isrc s21-mx-wgrad-ab.cpp build-cpu/liboctet.a -ldnnl -lsleef \
//       -lsentencepiece_train -lsentencepiece $(mpicxx --showme:link) -lpthread -o mab
//   OMP_NUM_THREADS=2 ./mab [CALLS]
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
  } shapes[] = {{2048, 512, 256, "fwd qkv"}, {2048, 256, 256, "fwd o"}, {2048, 1376, 256, "fwd gate/up"}, {2048, 256, 688, "fwd down"}, {2048, 256, 512, "dgrad qkv"}, {2048, 256, 256, "dgrad o"}, {2048, 256, 1376, "dgrad gate/up"}, {2048, 688, 256, "dgrad down"}, {512, 256, 2048, "wgrad qkv"},
                {256, 256, 2048, "wgrad o"},
                {1376, 256, 2048, "wgrad gate/up"},
                {256, 688, 2048, "wgrad down"}};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> code(0x08, 0x70), scale(120, 134);
  double sum[2] = {0, 0};
  for (const S& s : shapes) {
    std::vector<uint8_t> a(s.m * s.k), b(s.n * s.k), sa(s.m * ((s.k + 31) / 32)), sb(s.n * ((s.k + 31) / 32));
    for (auto& x : a) x = static_cast<uint8_t>(code(rng) | (rng() & 0x80));
    for (auto& x : b) x = static_cast<uint8_t>(code(rng) | (rng() & 0x80));
    for (auto& x : sa) x = static_cast<uint8_t>(scale(rng));
    for (auto& x : sb) x = static_cast<uint8_t>(scale(rng));
    std::vector<float> c(s.m * s.n, 0.0f);
    const Tensor ta(a.data(), DType::e5m2, {s.m, s.k}), tb(b.data(), DType::e4m3, {s.n, s.k});
    const Tensor tc(c.data(), DType::f32, {s.m, s.n});
    kernels::GemmOptions o;
    o.trans_a = false;
    o.trans_b = true;
    o.beta = 1.0f;
    const kernels::ScaleGrid mx{1, 32, true};
    o.a_grid = mx;
    o.b_grid = mx;
    o.a_scale_inv = Tensor(sa.data(), DType::e8m0, {s.m, ((s.k + 31) / 32)});
    o.b_scale_inv = Tensor(sb.data(), DType::e8m0, {s.n, ((s.k + 31) / 32)});
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
    std::printf("%-14s %5ld %5ld %5ld | AMX way %6.3f ms (fastest %6.3f) | oneDNN way %6.3f ms "
                "(fastest %6.3f) | %.2fx\n",
                s.what, s.m, s.n, s.k, med[0], best[0], med[1], best[1], med[0] / med[1]);
  }
  std::printf("sum of medians: AMX way %.3f ms, oneDNN way %.3f ms\n", sum[0], sum[1]);
}
