// cli/bench/bench_util.h: what the `octet bench` subcommands share: wall-clock timing, the
// median of repeated, synchronised calls, and their --json files.
// defines: median_call_seconds, random_buffer, JsonLines (seconds_since is core/clock.h's)
#pragma once

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/convert.h"
#include "core/device.h"
#include "core/error.h"
#include "io/json.h"

namespace octet::bench {

// A device buffer of n uniform values in [-1, 1) (bf16: the rounded values).
inline Buffer random_buffer(Device device, DType dtype, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Buffer buffer = Buffer::for_tensor(device, dtype, {n});
  if (dtype == DType::bf16) {
    std::vector<uint16_t> host(n);
    for (uint16_t& v : host) v = f32_to_bf16(uniform(rng));
    copy_bytes(buffer.data(), device, host.data(), Device::cpu(), host.size() * 2);
  } else {
    std::vector<float> host(n);
    for (float& v : host) v = uniform(rng);
    copy_bytes(buffer.data(), device, host.data(), Device::cpu(), host.size() * 4);
  }
  return buffer;
}

// The median of at least `reps` calls of fn (more for short calls: up to `max_calls`, or
// as many as fit in `budget_seconds`) after a warm-up of at least 0.25 s, each call
// followed by cuda_synchronize().
inline double median_call_seconds(const std::function<void()>& fn, int reps, int max_calls,
                                  double budget_seconds) {
  int warm_calls = 0;
  const auto warm_start = std::chrono::steady_clock::now();
  do {
    fn();
    cuda_synchronize();
    ++warm_calls;
  } while (seconds_since(warm_start) < 0.25);
  const double per_call = seconds_since(warm_start) / warm_calls;
  const int calls =
      std::max(reps, std::min(max_calls, static_cast<int>(budget_seconds / per_call)));
  std::vector<double> times;
  for (int r = 0; r < calls; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    cuda_synchronize();
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A --json file: one compact JSON record per line. Closed (nothing written) when no path
// was given.
class JsonLines {
 public:
  JsonLines(const std::string& path, const char* op) {
    if (path.empty()) return;
    out_.open(path);
    OCTET_CHECK(out_.good(), op, "cannot write --json file '", path, "'");
  }
  bool is_open() const { return out_.is_open(); }
  void write(const Json& record) {
    if (out_.is_open()) out_ << json_dump(record) << '\n';
  }

 private:
  std::ofstream out_;
};

}  // namespace octet::bench
