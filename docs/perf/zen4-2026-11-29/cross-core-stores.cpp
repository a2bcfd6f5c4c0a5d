// The FP8 widening's stores on two threads, with and without the other core holding the lines
// (seventh session, docs/perf/cpu-step.md). Each thread widens its own n E4M3 codes into its
// own bf16 buffer with octet's loop (fp8_to_bf16, the fused GEMM's); between timed calls, with
// "cross", each thread first reads every cache line of the OTHER thread's output, as a GEMM's
// threads read an operand one of them widened. Built against a Release build's library:
//   g++ -O2 -std=c++20 -fopenmp -Isrc docs/perf/zen4-2026-11-29/cross-core-stores.cpp \
//       build-cpu/liboctet.a -lsleef -ldnnl -o /tmp/cross-core-stores
//   OMP_NUM_THREADS=2 /tmp/cross-core-stores 262144 300 [cross]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"

int main(int argc, char** argv) {
  const long n = std::atol(argv[1]);
  const int reps = std::atoi(argv[2]);
  const bool cross = argc > 3;
  const int threads = omp_get_max_threads();
  std::vector<std::vector<uint8_t>> in(threads, std::vector<uint8_t>(n));
  std::vector<std::vector<uint16_t>> out(threads, std::vector<uint16_t>(n));
  for (auto& v : in)
    for (auto& x : v) x = std::rand() & 0x7E;
  const auto widen = octet::kernels::cpu::fp8_to_bf16(octet::DType::e4m3);
  double best = 1e9, sum = 0;
  long sink = 0;
  for (int r = 0; r < reps; ++r) {
#pragma omp parallel reduction(+ : sink)
    if (cross) {
      const uint16_t* other = out[(omp_get_thread_num() + 1) % threads].data();
      for (long i = 0; i < n; i += 32) sink += other[i];  // one load per 64-byte line
    }
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel
    widen(in[omp_get_thread_num()].data(), out[omp_get_thread_num()].data(), n);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s);
    if (r >= 3) sum += s;
  }
  std::printf("%d threads, %ld codes each%s: best %.1f us (%.2f G codes/s a thread), mean %.1f us\n",
              threads, n, cross ? ", the other core's lines" : "", best * 1e6, n / best / 1e9,
              sum / (reps - 3) * 1e6);
  return sink == 42 ? 1 : 0;
}
