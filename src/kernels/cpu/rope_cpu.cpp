// kernels/cpu/rope_cpu.cpp: rotary position embedding on the CPU, in place: either one
// position per iteration (its cos and sin computed once for all the sequences of the
// batch) or token by token with the cos and sin read from a table computed once.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"

namespace octet::kernels::cpu {
namespace {

// The cos and sin of position p's angle for pair i, in the activation dtype A (kept in
// fp32), as Hugging Face computes them in fp32 and casts them: inv_freq = 1 /
// theta^(2i / hd), angle = p * inv_freq. The one place the angles are computed, for both
// the table and the table-less rotation, so that both give the same bits.
template <typename A>
inline void cos_sin(int64_t p, int64_t i, int64_t head_dim, float theta, float& c, float& s) {
  const float position = static_cast<float>(p);
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
  const float inv_freq = 1.0f / std::pow(theta, exponent);
  const float angle = position * inv_freq;
  c = round_as<A>(std::cos(angle));
  s = round_as<A>(std::sin(angle));
}

// sign = -1 rotates by the negative angle: the transpose, for the backward pass.
template <typename A>
void rotate(A* qkv, int64_t tokens, int64_t rotated_heads, int64_t width, int64_t head_dim,
            int64_t seq_len, float theta, float sign) {
  const int64_t half = head_dim / 2;
  const int64_t positions = std::min(tokens, seq_len);
  // One position per iteration: its angles once, for every sequence of the batch.
#pragma omp parallel for schedule(static) if (tokens * rotated_heads * head_dim > kParallelElements)
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      float c, s;
      cos_sin<A>(p, i, head_dim, theta, c, s);
      s *= sign;  // exact
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

// The same rotation with position p's cos and sin read from row p of the table
// ([seq_len, head_dim]: the half cosines, then the half sines, in the dtype A): token by
// token, each head's pairs in memory order.
template <typename A>
void rotate_with_table(A* qkv, const A* table, int64_t tokens, int64_t rotated_heads, int64_t width,
                       int64_t head_dim, int64_t seq_len, float sign) {
  const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (tokens * rotated_heads * head_dim > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const A* cs = table + (t % seq_len) * head_dim;
    A* row = qkv + t * width;
    for (int64_t h = 0; h < rotated_heads; ++h) {
      A* x = row + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = to_f32(cs[i]), s = sign * to_f32(cs[half + i]);
        const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
        x[i] = from_f32<A>(x1 * c - x2 * s);
        x[i + half] = from_f32<A>(x2 * c + x1 * s);
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

void rope_table(const Tensor& table, int64_t head_dim, int64_t seq_len, float theta) {
  with_activation(table.dtype, [&](auto a) {
    using A = decltype(a);
    A* out = table.as<A>();
    const int64_t half = head_dim / 2;
    for (int64_t p = 0; p < seq_len; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        float c, s;
        cos_sin<A>(p, i, head_dim, theta, c, s);
        out[p * head_dim + i] = from_f32<A>(c);  // exact: c is already rounded to A
        out[p * head_dim + half + i] = from_f32<A>(s);
      }
    }
  });
}

void rope(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t seq_len,
          const Tensor& table, bool backward) {
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    rotate_with_table(qkv.as<A>(), table.as<A>(), qkv.rows(), n_heads + n_kv_heads, qkv.cols(),
                      head_dim, seq_len, backward ? -1.0f : 1.0f);
  });
}

}  // namespace octet::kernels::cpu
