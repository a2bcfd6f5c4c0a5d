// kernels/cpu/rope_cpu.cpp: rotary position embedding on the CPU, in place: either one
// position per iteration (its cos and sin computed once for all the sequences of the
// batch) or token by token with the cos and sin read from a table computed once, the latter in
// AVX-512 or AVX2 lanes where the CPU has them (OCTET_CPU_ISA caps the level), bit for bit the
// scalar loop (the same fp32 products and difference, -ffp-contract=off, one rounding).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/bf16_round_avx2.h"
#include "kernels/cpu/bf16_round_avx512.h"
#include "kernels/cpu/intrinsics.h"
#define OCTET_ROPE_VECTOR 1
#define OCTET_ROPE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define OCTET_ROPE_AVX2 __attribute__((target("avx2,fma")))
#endif

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

// Pairs [i0, half) of every rotated head of one token's row, with that position's cos and sin
// (cs: the table's row).
template <typename A>
void rotate_row(A* row, const A* cs, int64_t rotated_heads, int64_t head_dim, float sign,
                int64_t i0) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < rotated_heads; ++h) {
    A* x = row + h * head_dim;
    for (int64_t i = i0; i < half; ++i) {
      const float c = to_f32(cs[i]), s = sign * to_f32(cs[half + i]);
      const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
      x[i] = from_f32<A>(x1 * c - x2 * s);
      x[i + half] = from_f32<A>(x2 * c + x1 * s);
    }
  }
}

#if defined(OCTET_ROPE_VECTOR)
// The scalar rotation of one row where the pairs come in whole vectors (plain loads and stores:
// masked ones made the rotation slower than the scalar loop on the AMD Zen 4 measured, 0.72
// against 0.54 ms of the tiny step at head_dim 16). 16 pairs or more a
// head (half a multiple of 16): each group's cos and sin once, for every head. head_dim 16: one
// vector a head, x1 | x2, against its halves swapped, x2 | x1:
//   out = (x1 | x2) (c | c) + (x2 | x1) (-s | s),
// the scalar's x1 c - x2 s and x2 c + x1 s bit for bit (x2 (-s) is -(x2 s) exactly, and
// a + (-b) rounds as a - b). Returns false for other head sizes.
template <typename A>
OCTET_ROPE_AVX512 bool rotate_row_avx512(A* row, const A* cs, int64_t rotated_heads,
                                         int64_t head_dim, float sign) {
  const int64_t half = head_dim / 2;
  const __m512 sg = _mm512_set1_ps(sign);
  if (head_dim == 16) {
    const __m512 t = avx512::load(cs);                                     // c0..c7, s0..s7
    const __m512 c = _mm512_shuffle_f32x4(t, t, 0x44);                     // c | c
    const __m512 s = _mm512_mul_ps(sg, _mm512_shuffle_f32x4(t, t, 0xEE));  // s | s, signed
    // -s | s: the sign bit flipped (0 - s would give +0 for s = +0, not -0).
    const __m512 s_signs = _mm512_mask_xor_ps(s, 0x00FF, s, _mm512_set1_ps(-0.0f));
    for (int64_t h = 0; h < rotated_heads; ++h) {
      A* x = row + h * head_dim;
      const __m512 v = avx512::load(x);
      const __m512 swapped = _mm512_shuffle_f32x4(v, v, 0x4E);
      avx512::store(x, _mm512_add_ps(_mm512_mul_ps(v, c), _mm512_mul_ps(swapped, s_signs)));
    }
    return true;
  }
  if (half % 16 != 0) return false;
  for (int64_t j = 0; j < half; j += 16) {
    const __m512 c = avx512::load(cs + j), s = _mm512_mul_ps(sg, avx512::load(cs + half + j));
    for (int64_t h = 0; h < rotated_heads; ++h) {
      A* x = row + h * head_dim + j;
      const __m512 x1 = avx512::load(x), x2 = avx512::load(x + half);
      avx512::store(x, _mm512_sub_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x2, s)));
      avx512::store(x + half, _mm512_add_ps(_mm512_mul_ps(x2, c), _mm512_mul_ps(x1, s)));
    }
  }
  return true;
}

// Groups of 8 pairs, then the scalar loop for the rest.
template <typename A>
OCTET_ROPE_AVX2 void rotate_row_avx2(A* row, const A* cs, int64_t rotated_heads, int64_t head_dim,
                                     float sign) {
  const int64_t half = head_dim / 2;
  const __m256 sg = _mm256_set1_ps(sign);
  int64_t j = 0;
  for (; j + 8 <= half; j += 8) {
    const __m256 c = avx2::load(cs + j), s = _mm256_mul_ps(sg, avx2::load(cs + half + j));
    for (int64_t h = 0; h < rotated_heads; ++h) {
      A* x = row + h * head_dim + j;
      const __m256 x1 = avx2::load(x), x2 = avx2::load(x + half);
      avx2::store(x, _mm256_sub_ps(_mm256_mul_ps(x1, c), _mm256_mul_ps(x2, s)));
      avx2::store(x + half, _mm256_add_ps(_mm256_mul_ps(x2, c), _mm256_mul_ps(x1, s)));
    }
  }
  if (j < half) rotate_row(row, cs, rotated_heads, head_dim, sign, j);
}
#endif

// The same rotation with position p's cos and sin read from row p of the table
// ([seq_len, head_dim]: the half cosines, then the half sines, in the dtype A): token by
// token.
template <typename A>
void rotate_with_table(A* qkv, const A* table, int64_t tokens, int64_t rotated_heads, int64_t width,
                       int64_t head_dim, int64_t seq_len, float sign) {
  const Isa isa = usable_isa("rope");
#pragma omp parallel for schedule(static) if (tokens * rotated_heads * head_dim > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const A* cs = table + (t % seq_len) * head_dim;
    A* row = qkv + t * width;
#if defined(OCTET_ROPE_VECTOR)
    if (isa == Isa::avx512 && rotate_row_avx512(row, cs, rotated_heads, head_dim, sign)) continue;
    if (isa >= Isa::avx2) {  // AVX-512 CPUs too, for the head sizes it does not take
      rotate_row_avx2(row, cs, rotated_heads, head_dim, sign);
      continue;
    }
#endif
    rotate_row(row, cs, rotated_heads, head_dim, sign, 0);
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
