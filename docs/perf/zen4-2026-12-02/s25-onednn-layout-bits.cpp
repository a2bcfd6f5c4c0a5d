#include <cstdio>
#include <random>
#include <vector>
#include "core/convert.h"
#include "kernels/cpu/gemm_cpu.h"
using namespace octet;
int main() {
  std::mt19937 g(3);
  for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{512, 256, 2048},
                                                            {256, 256, 2048},
                                                            {1376, 256, 2048},
                                                            {256, 688, 2048},
                                                            {192, 64, 2048},
                                                            {352, 64, 2048},
                                                            {64, 176, 2048},
                                                            {512, 512, 2048},
                                                            {1376, 512, 2048},
                                                            {512, 1376, 2048},
                                                            {256, 256, 512},
                                                            {256, 256, 1024}}) {
    std::vector<uint16_t> a(m * k), b(n * k), at(m * k), bt(n * k);
    std::uniform_int_distribution<int> code(0, 126);
    auto val = [&] {
      int c = code(g);
      float v = fp8_to_f32(static_cast<uint8_t>(c | (g() & 1 ? 0x80 : 0)), DType::e4m3);
      return f32_to_bf16(v);
    };
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kk = 0; kk < k; ++kk) {
        a[i * k + kk] = val();
        at[kk * m + i] = a[i * k + kk];
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) {
        b[j * k + kk] = val();
        bt[kk * n + j] = b[j * k + kk];
      }
    std::vector<float> c1(m * n), c2(m * n);
    kernels::cpu::run_matmul(
        {a.data(), b.data(), c1.data(), DType::bf16, DType::f32, m, n, k, false, true, 1.0f, 0.0f});
    kernels::cpu::run_matmul({at.data(), bt.data(), c2.data(), DType::bf16, DType::f32, m, n, k,
                              true, false, 1.0f, 0.0f});
    int64_t diff = 0;
    for (int64_t i = 0; i < m * n; ++i) diff += c1[i] != c2[i];
    std::printf("m %ld n %ld k %ld: %ld of %ld differ\n", m, n, k, diff, m * n);
  }
}
