#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <omp.h>
#include "kernels/gemm.h"
#include "kernels/cpu/gemm_cpu.h"
using namespace octet;
using namespace octet::kernels;
int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  struct D { int64_t m, n, k; } shapes[] = {{2048, 512, 256}, {2048, 256, 256}, {2048, 1376, 256}, {2048, 256, 688}, {2048, 688, 256}, {2048, 256, 1376}, {2048, 256, 512}};
  for (auto s : shapes) {
    std::vector<uint16_t> a16(s.m * s.k, 0x3f80), b16(s.n * s.k, 0x3f80), c(s.m * s.n);
    Device cpu = Device::cpu();
    Tensor A16(a16.data(), DType::bf16, {s.m, s.k}, cpu), B16(b16.data(), DType::bf16, {s.n, s.k}, cpu);
    Tensor C(c.data(), DType::bf16, {s.m, s.n}, cpu);
    GemmOptions bf;
    size_t wsa = cpu::bf16_amx_gemm_workspace_bytes(s.m, s.n, s.k);
    std::vector<uint8_t> ws2(wsa + 4096);
    void* w2 = (void*)(((uintptr_t)ws2.data() + 4095) & ~uintptr_t(4095));
    auto ops = cpu::bf16_amx_operands(s.m, s.n, s.k, w2);
    for (int64_t r = 0; r < s.m; ++r) std::fill_n(ops.a + r * ops.lda, s.k, 0x3f80);
    for (int64_t r = 0; r < s.n; ++r) std::fill_n(ops.b + r * ops.ldb, s.k, 0x3f80);
    std::vector<double> t[4];
    for (int r = 0; r < 100; ++r) for (int w = 0; w < 4; ++w) {
      
      auto t0 = std::chrono::steady_clock::now();
      if (w < 2) cpu::bf16_amx_gemm({nullptr, nullptr, s.m, s.n, s.k, c.data(), DType::bf16, 1.0f, 0.0f}, w2);
      else gemm(A16, B16, C, bf);
      t[w].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    double med[4];
    for (int w = 0; w < 4; ++w) { std::sort(t[w].begin(), t[w].end()); med[w] = t[w][t[w].size() / 2]; }
    printf("%5ld %5ld %5ld | amx %7.1f %7.1f (x%.2f) | onednn %7.1f %7.1f (x%.2f)\n", s.m, s.n, s.k, med[0], med[1], med[0]/med[1], med[2], med[3], med[2]/med[3]);
  }
}
