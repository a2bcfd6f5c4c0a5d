// Hot-cache time of the CPU quantize's row grid with the transposed copy (non-AMX path), tiny 8x256
// shapes.
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "core/convert.h"
#include "kernels/quantize.h"
using namespace octet;
int main() {
  const int reps = 200;
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{2048, 64},
                                                              {2048, 176},
                                                              {2048, 192},
                                                              {2048, 352},
                                                              {2048, 256},
                                                              {2048, 512},
                                                              {2048, 688},
                                                              {2048, 1376},
                                                              {2048, 2752}}) {
    std::vector<uint16_t> x(r * c);
    std::mt19937 g(1);
    std::normal_distribution<float> d;
    for (auto& v : x) v = f32_to_bf16(d(g));
    std::vector<uint8_t> data(r * c), data_t(r * c);
    std::vector<float> s(r), st(c), amax(1);
    Tensor X(x.data(), DType::bf16, {r, c});
    for (int mode : {0, 1, 3}) {
      kernels::QuantizeOutputs o;
      o.amax = Tensor(amax.data(), DType::f32, {1});
      kernels::QuantizeOptions opt;
      opt.grid = {1, 0, false};
      if (true) {
        o.data = Tensor(data.data(), DType::e4m3, {r, c});
        o.scale_inv = Tensor(s.data(), DType::f32, {r, 1});
      }
      if (mode >= 1) {
        o.data_t = Tensor(data_t.data(), DType::e4m3, {mode == 3 ? r : c, mode == 3 ? c : r});
        o.scale_inv_t = Tensor(st.data(), DType::f32, {c, 1});
        o.data_t_in_x_layout = mode == 3;
      }
      for (int i = 0; i < 50; ++i) kernels::quantize(X, o, opt);
      double best = 1e9;
      for (int round = 0; round < 5; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) kernels::quantize(X, o, opt);
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    reps;
        best = std::min(best, us);
      }
      const char* names[] = {"rows", "rows+T", "rows+T(again)", "rows+cols(xlay)"};
      std::printf("%4ldx%-4ld threads %d %-15s %8.2f us  %.3f ns/elem\n", r, c,
                  omp_get_max_threads(), names[mode], best, best * 1e3 / (r * c));
    }
  }
}
