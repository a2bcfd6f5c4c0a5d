#include <omp.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include "kernels/transpose.h"
using namespace octet;
int main() {
  const int reps = 300;
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{2048, 64},
                                                              {2048, 176},
                                                              {2048, 192},
                                                              {2048, 352},
                                                              {2048, 256},
                                                              {2048, 512},
                                                              {2048, 688},
                                                              {2048, 1376},
                                                              {2048, 2752}}) {
    std::vector<uint8_t> a(r * c, 3), b(r * c);
    Tensor A(a.data(), DType::e4m3, {r, c}), B(b.data(), DType::e4m3, {c, r});
    for (int i = 0; i < 50; ++i) kernels::transpose(A, B);
    double best = 1e9;
    for (int round = 0; round < 5; ++round) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) kernels::transpose(A, B);
      best = std::min(
          best,
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
              reps);
    }
    std::printf("%4ldx%-4ld threads %d transpose %8.2f us %.3f ns/byte\n", r, c,
                omp_get_max_threads(), best, best * 1e3 / (r * c));
  }
}
