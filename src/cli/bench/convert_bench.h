// cli/bench/convert_bench.h: timing of the CPU array conversions (kernels::convert),
// one row per (pair, thread count); `octet bench gemm` prints them.
// defines: ConvertBenchRow, bench_convert
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace octet::bench {

struct ConvertBenchRow {
  std::string from, to;  // dtype names
  int64_t elements;
  int threads;
  double seconds;   // median of the timed repetitions
  double gb_per_s;  // input bytes / s (1e9 bytes)
};

// Times kernels::convert on CPU arrays of 16M elements for f32->e4m3, f32->e5m2,
// bf16->e4m3, e4m3->bf16, e4m3->f32 and f32->bf16, with 1 thread and with
// `threads` threads (the OpenMP thread count is restored afterwards). Each row is
// the median of several repetitions after one warm-up.
std::vector<ConvertBenchRow> bench_convert(int threads);

}  // namespace octet::bench
