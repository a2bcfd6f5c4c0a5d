// core/clock.h: wall-clock intervals, as the trainer, its comparison runs and the benchmarks
// time them.
// defines: seconds_since
#pragma once

#include <chrono>

namespace octet {

// Seconds of the steady clock since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace octet
