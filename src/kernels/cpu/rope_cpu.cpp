// kernels/cpu/rope_cpu.cpp: rotary position embedding on the CPU, in place, one position
// per iteration (its cos and sin computed once for all the sequences of the batch).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"

namespace octet::kernels::cpu {
namespace {

// sign = -1 rotates by the negative angle: the transpose, for the backward pass.
template <typename A>
void rotate(A* qkv, int64_t tokens, int64_t rotated_heads, int64_t width, int64_t head_dim,
            int64_t seq_len, float theta, float sign) {
  const int64_t half = head_dim / 2;
  const int64_t positions = std::min(tokens, seq_len);
  // One position per iteration: its angles once, for every sequence of the batch.
#pragma omp parallel for schedule(static) if (tokens * rotated_heads * head_dim > kParallelElements)
  for (int64_t p = 0; p < positions; ++p) {
    const float position = static_cast<float>(p);
    for (int64_t i = 0; i < half; ++i) {
      // Hugging Face's fp32 steps: inv_freq = 1 / theta^(2i / hd), angle = p * inv_freq.
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      const float inv_freq = 1.0f / std::pow(theta, exponent);
      const float angle = position * inv_freq;
      // cos and sin in the activation dtype, as Hugging Face casts them.
      const float c = round_as<A>(std::cos(angle));
      const float s = sign * round_as<A>(std::sin(angle));
      for (int64_t t = p; t < tokens; t += seq_len) {
        A* row = qkv + t * width;
        for (int64_t h = 0; h < rotated_heads; ++h) {
          A* x = row + h * head_dim;
          const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
          x[i] = from_f32<A>(x1 * c - x2 * s);
          x[i + half] = from_f32<A>(x2 * c + x1 * s);
        }
      }
    }
  }
}

}  // namespace

void rope(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t seq_len,
          float theta, bool backward) {
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    rotate(qkv.as<A>(), qkv.rows(), n_heads + n_kv_heads, qkv.cols(), head_dim, seq_len, theta,
           backward ? -1.0f : 1.0f);
  });
}

}  // namespace octet::kernels::cpu
