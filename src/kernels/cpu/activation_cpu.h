// kernels/cpu/activation_cpu.h: f32/bf16 element access for the CPU layer kernels
// (values are read into fp32 and written back rounded once) and a deterministic sum.
// Internal to kernels/cpu.
// defines: cpu::to_f32, cpu::from_f32, cpu::round_as, cpu::with_activation, cpu::sum_lanes,
//          cpu::dot, cpu::kParallelElements
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/convert.h"
#include "core/dtype.h"

namespace octet::kernels::cpu {

// Below this many elements one thread is faster than waking a team.
inline constexpr int64_t kParallelElements = int64_t{1} << 15;

// bf16 data is handled as its uint16_t bit pattern.
inline float to_f32(float v) {
  return v;
}
inline float to_f32(uint16_t v) {
  return bf16_to_f32(v);
}

template <typename T>
inline T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return f32_to_bf16(v);
  }
}

// v rounded to T's precision, kept in fp32.
template <typename T>
inline float round_as(float v) {
  return to_f32(from_f32<T>(v));
}

// Calls fn(float{}) for f32 data and fn(uint16_t{}) for bf16 data.
template <typename Fn>
inline decltype(auto) with_activation(DType dtype, Fn&& fn) {
  if (dtype == DType::bf16) return fn(uint16_t{});
  return fn(float{});
}

// sum_{j < n} term(j) in fp32 in a fixed order: 8 interleaved partial sums (lane l
// takes j = l mod 8, in increasing j), combined pairwise. Vectorizable without
// reassociation, and the same bits whatever the thread count.
template <typename Term>
inline float sum_lanes(int64_t n, Term term) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += term(j + l);
  }
  for (int l = 0; j < n; ++j, ++l) lane[l] += term(j);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

template <typename A, typename B>
inline float dot(const A* a, const B* b, int64_t n) {
  return sum_lanes(n, [&](int64_t j) { return to_f32(a[j]) * to_f32(b[j]); });
}

}  // namespace octet::kernels::cpu
