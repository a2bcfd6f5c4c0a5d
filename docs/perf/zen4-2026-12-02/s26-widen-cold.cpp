#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include "kernels/cpu/fp8_widen_avx512.h"
using namespace octet::kernels::cpu::avx512;
__attribute__((target("avx512f,avx512bw,avx512vl"))) void widen(const uint8_t* in, uint16_t* out,
                                                                int64_t n, const uint16_t* tab) {
  __m512i t[4];
  load_widen_table(tab, t);
  for (int64_t i = 0; i < n; i += 32) {
    __m512i v = widen32(in + i, ~0u, t);
    _mm512_storeu_si512(out + i, v);
  }
}
int main() {
  std::vector<uint16_t> tab(128);
  for (int i = 0; i < 128; i++) tab[i] = i * 3;
  std::vector<char> junk(128 << 20);
  const int64_t n = 2048 * 1376, blk = 256 * 256;
  std::vector<uint8_t> in(n);
  for (int64_t i = 0; i < n; i++) in[i] = i * 7;
  std::vector<uint16_t> out(n, 1), small(blk, 1);
  for (int mode = 0; mode < 4; ++mode) {
    double best = 1e9, sum = 0;
    for (int r = 0; r < 8; r++) {
      memset(junk.data(), r, junk.size());
      if (mode >= 2) widen(in.data(), small.data(), blk, tab.data());  // warm the small output
      auto t0 = std::chrono::steady_clock::now();
      if (mode == 0) widen(in.data(), out.data(), n, tab.data());  // cold in, cold out
      if (mode == 1) {
        for (int64_t i = 0; i < n; i += blk)
          widen(in.data() + i, small.data(), std::min(blk, n - i), tab.data());
      }  // cold in, hot out
      if (mode == 2) {
        for (int k = 0; k < n / blk; k++) widen(in.data(), small.data(), blk, tab.data());
      }  // hot-ish in (first 64K), hot out
      if (mode == 3) {
        memset(out.data(), 0, n * 2);
      }
      asm volatile("" ::"r"(out.data()), "r"(small.data()) : "memory");
      double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n * 1e9;
      if (s < best) best = s;
      sum += s;
    }
    printf("mode %d best %.3f mean %.3f ns/value\n", mode, best, sum / 8);
  }
}
