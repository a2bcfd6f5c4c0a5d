// kernels/cpu/cross_entropy_cpu.cpp: softmax cross-entropy and its gradient on the CPU,
// one row of logits per iteration; with SLEEF, 16 logits at a time on AVX-512 or 8 on AVX2
// (the sum of exp in lanes, then the lanes added in a fixed order).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vector_math.h"

namespace octet::kernels::cpu {
namespace {

// Each row is read for its max, read again for the sum of exp(x - max) (a row of 32K
// f32 logits is 128 KiB: the second read hits L2) and written in a third sweep.
template <typename A>
void rows_loss(const A* logits, const int32_t* targets, float* losses, A* dlogits, int64_t rows,
               int64_t vocab, float grad_scale) {
#pragma omp parallel for schedule(static) if (rows * vocab > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) {
    const A* x = logits + t * vocab;
    float m = -INFINITY;
    for (int64_t j = 0; j < vocab; ++j) {
      const float v = to_f32(x[j]);
      m = v > m ? v : m;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(to_f32(x[j]) - m);
    const float lse = m + std::log(sum);
    const int32_t target = targets[t];
    losses[t] = lse - to_f32(x[target]);
    if (dlogits == nullptr) continue;
    // x[j] is read before d[j] is written: dlogits may be logits.
    A* d = dlogits + t * vocab;
    for (int64_t j = 0; j < vocab; ++j) {
      const float p = std::exp(to_f32(x[j]) - lse);
      d[j] = from_f32<A>((j == target ? p - 1.0f : p) * grad_scale);
    }
  }
}

#if defined(OCTET_CPU_VECTOR_EXP)
// One row (the OpenMP loop is in rows_loss_vector, without the AVX-512 target: clang
// outlines a parallel region without its function's target features).
template <typename A>
OCTET_AVX512 void row_loss_avx512(const A* x, int32_t target, float* loss, A* d, int64_t vocab,
                                  float grad_scale) {
  __m512 mv = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < vocab; j += 16)
    mv = _mm512_max_ps(mv, load16(x + j, vocab - j, -INFINITY));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < vocab; j += 16)
    sum = _mm512_add_ps(sum, exp16(_mm512_sub_ps(load16(x + j, vocab - j, -INFINITY), m)));
  const float lse = _mm512_cvtss_f32(m) + std::log(_mm512_reduce_add_ps(sum));
  *loss = lse - to_f32(x[target]);
  if (d == nullptr) return;
  // x[j] is read before d[j] is written: dlogits may be logits.
  const __m512 l = _mm512_set1_ps(lse);
  for (int64_t j = 0; j < vocab; j += 16) {
    const int64_t n = std::min<int64_t>(16, vocab - j);
    float out[16];
    _mm512_storeu_ps(out, exp16(_mm512_sub_ps(load16(x + j, n, -INFINITY), l)));
    for (int64_t k = 0; k < n; ++k)
      out[k] = (j + k == target ? out[k] - 1.0f : out[k]) * grad_scale;
    for (int64_t k = 0; k < n; ++k) d[j + k] = from_f32<A>(out[k]);
  }
}

// The AVX2 row: the AVX-512 one's steps, 8 lanes at a time.
template <typename A>
OCTET_AVX2 void row_loss_avx2(const A* x, int32_t target, float* loss, A* d, int64_t vocab,
                              float grad_scale) {
  __m256 mv = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < vocab; j += 8) mv = _mm256_max_ps(mv, load8(x + j, vocab - j, -INFINITY));
  const float m = reduce_max8(mv);
  const __m256 mb = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < vocab; j += 8)
    sum = _mm256_add_ps(sum, exp8(_mm256_sub_ps(load8(x + j, vocab - j, -INFINITY), mb)));
  const float lse = m + std::log(reduce_add8(sum));
  *loss = lse - to_f32(x[target]);
  if (d == nullptr) return;
  // x[j] is read before d[j] is written: dlogits may be logits.
  const __m256 l = _mm256_set1_ps(lse);
  for (int64_t j = 0; j < vocab; j += 8) {
    const int64_t n = std::min<int64_t>(8, vocab - j);
    float out[8];
    _mm256_storeu_ps(out, exp8(_mm256_sub_ps(load8(x + j, n, -INFINITY), l)));
    for (int64_t k = 0; k < n; ++k)
      out[k] = (j + k == target ? out[k] - 1.0f : out[k]) * grad_scale;
    for (int64_t k = 0; k < n; ++k) d[j + k] = from_f32<A>(out[k]);
  }
}

// The rows of either vector level: `avx512` picks the row function.
template <typename A>
void rows_loss_vector(const A* logits, const int32_t* targets, float* losses, A* dlogits,
                      int64_t rows, int64_t vocab, float grad_scale, bool avx512) {
#pragma omp parallel for schedule(static) if (rows * vocab > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) {
    A* d = dlogits == nullptr ? nullptr : dlogits + t * vocab;
    if (avx512) {
      row_loss_avx512(logits + t * vocab, targets[t], losses + t, d, vocab, grad_scale);
    } else {
      row_loss_avx2(logits + t * vocab, targets[t], losses + t, d, vocab, grad_scale);
    }
  }
}
#endif

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                   const Tensor& dlogits, float grad_scale) {
  const int64_t rows = logits.rows(), vocab = logits.cols();
  const int32_t* tg = targets.as<const int32_t>();
  for (int64_t t = 0; t < rows; ++t) {
    OCTET_CHECK(tg[t] >= 0 && tg[t] < vocab, "cross_entropy", "targets[", t, "] = ", tg[t],
                " is outside the vocabulary [0, V=", vocab,
                "); mask padding before the loss or check the tokenizer's vocab_size");
  }
  with_activation(logits.dtype, [&](auto a) {
    using A = decltype(a);
#if defined(OCTET_CPU_VECTOR_EXP)
    if (const Isa isa = usable_isa("cross_entropy"); isa != Isa::baseline)
      return rows_loss_vector(logits.as<const A>(), tg, losses.as<float>(),
                              dlogits.empty() ? nullptr : dlogits.as<A>(), rows, vocab, grad_scale,
                              isa == Isa::avx512);
#endif
    rows_loss(logits.as<const A>(), tg, losses.as<float>(),
              dlogits.empty() ? nullptr : dlogits.as<A>(), rows, vocab, grad_scale);
  });
}

}  // namespace octet::kernels::cpu
