// cli/bench/convert_bench.cpp: times kernels::convert on the CPU (see convert_bench.h).
#include "convert_bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/convert.h"
#include "kernels/convert.h"

namespace octet::bench {
namespace {

constexpr int64_t kElements = int64_t{16} << 20;
constexpr int kRepetitions = 7;

// Inputs spread over the E4M3 range with both signs, so that every branch of the
// encoders (subnormal, normal, saturated) is taken in realistic proportions.
void fill_input(const Tensor& t) {
  std::mt19937_64 rng(12345);
  std::normal_distribution<float> normal(0.0f, 64.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = normal(rng);
    switch (t.dtype) {
      case DType::f32:
        t.as<float>()[i] = x;
        break;
      case DType::bf16:
        t.as<uint16_t>()[i] = f32_to_bf16(x);
        break;
      case DType::e4m3:
        t.as<uint8_t>()[i] = f32_to_e4m3(x);
        break;
      default:
        t.as<uint8_t>()[i] = 0;
        break;
    }
  }
}

double median_seconds(const Tensor& src, const Tensor& dst) {
  kernels::convert(src, dst);  // warm-up: page faults, thread team, tables
  std::vector<double> seconds;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    kernels::convert(src, dst);
    seconds.push_back(seconds_since(start));
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

std::vector<ConvertBenchRow> bench_convert(int threads) {
  const std::pair<DType, DType> pairs[] = {
      {DType::f32, DType::e4m3},  {DType::f32, DType::e5m2}, {DType::bf16, DType::e4m3},
      {DType::e4m3, DType::bf16}, {DType::e4m3, DType::f32}, {DType::f32, DType::bf16},
  };
  const int saved_threads = omp_get_max_threads();
  std::vector<int> thread_counts = {1};
  if (threads > 1) thread_counts.push_back(threads);

  std::vector<ConvertBenchRow> rows;
  for (const auto& [from, to] : pairs) {
    const Buffer src_buffer = Buffer::for_tensor(Device::cpu(), from, {kElements});
    const Buffer dst_buffer = Buffer::for_tensor(Device::cpu(), to, {kElements});
    const Tensor src = src_buffer.tensor(from, {kElements});
    const Tensor dst = dst_buffer.tensor(to, {kElements});
    fill_input(src);
    for (int t : thread_counts) {
      omp_set_num_threads(t);
      const double s = median_seconds(src, dst);
      rows.push_back({dtype_name(from), dtype_name(to), kElements, t, s,
                      static_cast<double>(src.nbytes()) / s / 1e9});
    }
  }
  omp_set_num_threads(saved_threads);
  return rows;
}

}  // namespace octet::bench
