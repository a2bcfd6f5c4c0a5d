// Hot-cache time of the CPU quantize's row grid, with and without the column copy, at tiny's shapes.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <omp.h>
#include "core/convert.h"
#include "kernels/quantize.h"
using namespace octet;
int main(int argc, char** argv) {
  const int reps = 4000;
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{512, 64}, {512, 352}, {128, 64}}) {
    std::vector<uint16_t> x(r * c);
    std::mt19937 g(1);
    std::normal_distribution<float> d;
    for (auto& v : x) v = f32_to_bf16(d(g));
    std::vector<uint8_t> data(r * c), data_t(r * c);
    std::vector<float> s(r), st(c), amax(1);
    std::vector<uint16_t> wide(r * c);
    Tensor X(x.data(), DType::bf16, {r, c});
    for (int mode = 0; mode < 2; ++mode) {
      kernels::QuantizeOutputs o;
      o.data = Tensor(data.data(), DType::e4m3, {r, c});
      o.scale_inv = Tensor(s.data(), DType::f32, {r, 1});
      o.amax = Tensor(amax.data(), DType::f32, {1});
      kernels::QuantizeOptions opt;
      opt.grid = {1, 0, false};
      if (mode == 1) {
        o.data_t = Tensor(data_t.data(), DType::e4m3, {r, c});
        o.scale_inv_t = Tensor(st.data(), DType::f32, {c, 1});
        o.data_t_in_x_layout = true;
      }
      if (mode == 2) {  // the column copy alone
        o.data = Tensor(); o.scale_inv = Tensor();
        o.data_t = Tensor(data_t.data(), DType::e4m3, {r, c});
        o.scale_inv_t = Tensor(st.data(), DType::f32, {c, 1});
        o.data_t_in_x_layout = true;
      }
      for (int i = 0; i < 100; ++i) kernels::quantize(X, o, opt);
      double best = 1e9;
      for (int round = 0; round < 5; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) kernels::quantize(X, o, opt);
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
        best = std::min(best, us);
      }
      std::printf("%4ldx%-4ld threads %d %-12s %7.2f us  %.2f ns/elem\n", r, c, omp_get_max_threads(),
                  mode == 0 ? "rows" : mode == 1 ? "rows+cols" : "cols", best, best * 1e3 / (r * c));
    }
  }
}
