// The block kernel before (2850e3e, namespace old) and after (5ef5795) the promotions'
// interleaving, alternating call by call on the block recipe's layer shapes (T = 2048).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
#include "kernels/cpu/gemm_cpu.h"
namespace octet::kernels::cpu::old {
size_t fp8_block_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, int64_t slice);
void fp8_block_gemm(const Fp8BlockGemm& gemm, void* workspace);
}
using namespace octet;
namespace cpu = octet::kernels::cpu;
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 30;
  const bool swap = argc > 2 && atoi(argv[2]) != 0;  // the new kernel first in each pair
  const bool row = argc > 3 && std::string(argv[3]) == "row";  // one slice: the row recipe
  struct S { int64_t m, n, k; bool a_km, b_kn; const char* what; } shapes[] = {
      {2048, 512, 256, false, false, "fwd qkv"}, {2048, 256, 256, false, false, "fwd o"},
      {2048, 1376, 256, false, false, "fwd gate/up"}, {2048, 256, 688, false, false, "fwd down"},
      {2048, 256, 512, false, true, "dgrad qkv"}, {2048, 256, 256, false, true, "dgrad o"},
      {2048, 256, 1376, false, true, "dgrad gate/up"}, {2048, 688, 256, false, true, "dgrad down"},
      {512, 256, 2048, true, true, "wgrad qkv"}, {256, 256, 2048, true, true, "wgrad o"},
      {1376, 256, 2048, true, true, "wgrad gate/up"}, {256, 688, 2048, true, true, "wgrad down"}};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> code(0x08, 0x70);
  std::uniform_real_distribution<float> sc(0.5f, 2.0f);
  double sum[2] = {0, 0};
  for (const S& s : shapes) {
    const int64_t slice = row ? s.k : 128, slices = (s.k + slice - 1) / slice;
    std::vector<uint8_t> a(s.m * s.k), b(s.n * s.k);
    for (auto& x : a) x = static_cast<uint8_t>(code(rng) | (rng() & 0x80));
    for (auto& x : b) x = static_cast<uint8_t>(code(rng) | (rng() & 0x80));
    std::vector<float> sa(s.m * slices), sb(s.n * slices), c(s.m * s.n, 0.0f);
    for (auto& x : sa) x = sc(rng);
    for (auto& x : sb) x = sc(rng);
    const bool wgrad = s.a_km;
    cpu::Fp8BlockGemm g{a.data(), DType::e4m3, b.data(), DType::e4m3, s.m, s.n, s.k, slice,
                        sa.data(), sb.data(), c.data(), wgrad ? DType::f32 : DType::bf16, 1.0f,
                        wgrad ? 1.0f : 0.0f, s.a_km, s.b_kn};
    std::vector<uint8_t> ws(std::max(cpu::fp8_block_gemm_workspace_bytes(s.m, s.n, s.k, slice),
                                     cpu::old::fp8_block_gemm_workspace_bytes(s.m, s.n, s.k, slice)));
    std::vector<double> t[2];
    for (int i = 0; i < calls + 3; ++i) {
      for (int turn = 0; turn < 2; ++turn) {
        const int way = swap ? 1 - turn : turn;
        const double t0 = now();
        if (way == 0) cpu::old::fp8_block_gemm(g, ws.data()); else cpu::fp8_block_gemm(g, ws.data());
        if (i >= 3) t[way].push_back(now() - t0);
      }
    }
    double med[2], best[2];
    for (int w = 0; w < 2; ++w) {
      std::sort(t[w].begin(), t[w].end());
      med[w] = t[w][t[w].size() / 2] * 1e3; best[w] = t[w][0] * 1e3; sum[w] += med[w];
    }
    std::printf("%-14s %5ld %5ld %5ld | before %6.3f ms (fastest %6.3f) | after %6.3f ms (fastest %6.3f) | %.2fx\n",
                s.what, s.m, s.n, s.k, med[0], best[0], med[1], best[1], med[1] / med[0]);
  }
  std::printf("sum of medians: before %.3f ms, after %.3f ms (%.3fx)\n", sum[0], sum[1], sum[1] / sum[0]);
}
