// s26-onednn-time.h: the timing loop of the twenty-sixth session's oneDNN scratch programs.
#pragma once
#include <dnnl.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using dt = memory::data_type;

// One GEMM's shape, C's dtype and beta.
struct Gemm {
  int m, n, k;
  dt cdt;
  float beta = 0.f;
};

// The CPU engine and a stream on it.
struct Cpu {
  engine eng{engine::kind::cpu, 0};
  stream s{eng};
};

// 3 warm-up calls, then the best of 7 rounds of 5 calls: ms per call.
inline double best_ms(dnnl::matmul& mm, dnnl::stream& s,
                      const std::unordered_map<int, dnnl::memory>& args) {
  for (int w = 0; w < 3; w++) mm.execute(s, args);
  s.wait();
  double best = 1e9;
  for (int r = 0; r < 7; r++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int w = 0; w < 5; w++) mm.execute(s, args);
    s.wait();
    double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5 * 1e3;
    if (t < best) best = t;
  }
  return best;
}
