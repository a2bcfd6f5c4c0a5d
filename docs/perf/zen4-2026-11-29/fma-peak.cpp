// The peak rates of the two instructions the tiled CPU attention's products run on, per core
// and on every thread: vfmadd zmm (fp32: P v, dS k, dS^T q, P^T dout) and vdpbf16ps zmm
// (q.k^T and dout.v^T of bf16 data). 16 independent chains each, registers only.
// g++ -O3 -fopenmp -mavx512f -mavx512bf16 fma-peak.cpp -o fma-peak && ./fma-peak
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <initializer_list>

template <bool kBf16>
__attribute__((noinline)) float run(long iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      if constexpr (kBf16) {
        acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)a, (__m512bh)b);
      } else {
        acc[i] = _mm512_fmadd_ps(a, acc[i], b);
      }
    }
  }
  float s = 0;
  for (auto& v : acc) s += _mm512_reduce_add_ps(v);
  return s;
}

template <bool kBf16>
void measure(int threads) {
  const long iters = 200'000'000 / 16;
  // Floating-point operations per instruction: 16 lanes x 2 (fma), 16 lanes x 2 pairs x 2.
  const double flops = 16.0 * iters * (kBf16 ? 64 : 32);
  float sink = 0;
  run<kBf16>(iters / 10);  // warm up the clock
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  sink += run<kBf16>(iters);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%-10s %d thread(s): %7.1f GFLOP/s (%.1f per thread) %s\n",
              kBf16 ? "vdpbf16ps" : "vfmadd231ps", threads, flops * threads / s / 1e9,
              flops / s / 1e9, sink == 12345.0f ? "!" : "");
}

int main() {
  for (int threads : {1, 2}) {
    measure<false>(threads);
    measure<true>(threads);
  }
}
