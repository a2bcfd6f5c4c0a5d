// Time fp8_block_gemm with the block recipe's 128-wide K slices against one slice (no promotion
// until C is stored), same shapes and operands, alternating call by call.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include "kernels/cpu/gemm_cpu.h"
using namespace octet;
using namespace octet::kernels::cpu;
struct GShape { const char* name; int64_t m, n, k; bool a_km, b_kn; };
int main() {
  GShape shapes[] = {{"qkv fwd", 2048, 512, 256, false, false}, {"gate_up fwd", 2048, 1376, 256, false, false},
                    {"gate_up dgrad", 2048, 256, 1376, false, true}, {"down fwd", 2048, 256, 688, false, false},
                    {"qkv wgrad", 512, 256, 2048, true, true}, {"gate_up wgrad", 1376, 256, 2048, true, true},
                    {"down wgrad", 256, 688, 2048, true, true}, {"o wgrad", 256, 256, 2048, true, true}};
  for (auto& s : shapes) {
    std::vector<uint8_t> a(s.m * s.k), b(s.n * s.k);
    for (auto& v : a) v = (rand() % 0x70) | (rand() & 0x80);
    for (auto& v : b) v = (rand() % 0x70) | (rand() & 0x80);
    std::vector<float> sa(s.m * 32, 1.5f), sb(s.n * 32, 0.75f);
    std::vector<float> c(s.m * s.n);
    size_t ws = std::max(fp8_block_gemm_workspace_bytes(s.m, s.n, s.k, 128), fp8_block_gemm_workspace_bytes(s.m, s.n, s.k, s.k));
    void* w = aligned_alloc(4096, (ws + 4095) / 4096 * 4096);
    double best[2] = {1e9, 1e9}, sum[2] = {0, 0};
    const int reps = 40;
    for (int r = 0; r < reps; ++r) {
      for (int v0 = 0; v0 < 2; ++v0) {
        int v = (r & 1) ? 1 - v0 : v0;
        Fp8BlockGemm g{a.data(), DType::e4m3, b.data(), DType::e4m3, s.m, s.n, s.k, v ? s.k : 128,
                       sa.data(), sb.data(), c.data(), DType::f32, 1.0f, 0.0f, s.a_km, s.b_kn};
        auto t0 = std::chrono::steady_clock::now();
        fp8_block_gemm(g, w);
        double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 4) { best[v] = std::min(best[v], t); sum[v] += t; }
      }
    }
    printf("%-14s %5ld %5ld %5ld  slice128 best %.3f mean %.3f | one slice best %.3f mean %.3f | ratio(mean) %.2f\n", s.name, s.m, s.n, s.k,
           best[0], sum[0] / (reps - 4), best[1], sum[1] / (reps - 4), sum[0] / sum[1]);
    free(w);
  }
}
