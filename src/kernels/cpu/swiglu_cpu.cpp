// kernels/cpu/swiglu_cpu.cpp: the SwiGLU gate, forward and backward, on the CPU; with
// SLEEF the same formulas 16 elements at a time (AVX-512) or 8 (AVX2). On request each
// written row's max |value| too, while the row is in L1 (the FP8 quantize's amax).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/convert.h"

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/amax.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vector_math.h"

namespace octet::kernels::cpu {
namespace {

#if defined(OCTET_CPU_VECTOR_EXP)
// max_magnitude_bits (kernels/cpu/amax.h) compiled for AVX-512 (32 bf16 magnitudes a vector)
// and AVX2.
template <typename A>
OCTET_AVX512 uint32_t amax_bits_avx512(const A* v, int64_t n) {
  return max_magnitude_bits(v, n);
}
template <typename A>
OCTET_AVX2 uint32_t amax_bits_avx2(const A* v, int64_t n) {
  return max_magnitude_bits(v, n);
}
#endif

// The max of each written row while it is in L1, into `amax` (f32[1]) unless that is empty.
// row(t) writes row t and returns its outputs' first element and count; `isa` picks the
// max's loop.
template <typename Row>
void rows_with_amax(int64_t rows, int64_t elements, const Tensor& amax, Isa isa, Row row) {
  uint32_t m = 0;
  const bool want = !amax.empty();
#pragma omp parallel for schedule(static) reduction(max : m) if (elements > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) {
    const auto [out, n] = row(t);
    if (!want) continue;
#if defined(OCTET_CPU_VECTOR_EXP)
    if (isa == Isa::avx512) {
      m = std::max(m, amax_bits_avx512(out, n));
      continue;
    }
    if (isa == Isa::avx2) {
      m = std::max(m, amax_bits_avx2(out, n));
      continue;
    }
#endif
    m = std::max(m, max_magnitude_bits(out, n));
  }
  if (want) amax.as<float>()[0] = f32_from_bits(m);
}

template <typename A>
void forward_rows(const A* gate_up, A* out, int64_t rows, int64_t hidden, const Tensor& amax) {
  rows_with_amax(rows, rows * hidden, amax, Isa::baseline, [&](int64_t t) {
    const A* gate = gate_up + t * 2 * hidden;
    const A* up = gate + hidden;
    A* o = out + t * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const float g = to_f32(gate[j]);
      // exp(-g) overflows to inf for g < -88: silu is then -0, as it should be.
      const float silu = g / (1.0f + std::exp(-g));
      o[j] = from_f32<A>(silu * to_f32(up[j]));
    }
    return std::pair<const A*, int64_t>{o, hidden};
  });
}

template <typename A>
void backward_rows(const A* dout, const A* gate_up, A* dgate_up, int64_t rows, int64_t hidden,
                   const Tensor& amax) {
  rows_with_amax(rows, rows * hidden, amax, Isa::baseline, [&](int64_t t) {
    const A* gate = gate_up + t * 2 * hidden;
    const A* up = gate + hidden;
    const A* d = dout + t * hidden;
    A* dgate = dgate_up + t * 2 * hidden;
    A* dup = dgate + hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      // Both inputs are read before either output is written: dgate_up may be gate_up.
      const float g = to_f32(gate[j]), u = to_f32(up[j]), dj = to_f32(d[j]);
      const float s = 1.0f / (1.0f + std::exp(-g));
      const float dsilu = s * (1.0f + g * (1.0f - s));
      dgate[j] = from_f32<A>((dj * u) * dsilu);
      dup[j] = from_f32<A>(dj * (g * s));
    }
    return std::pair<const A*, int64_t>{dgate, 2 * hidden};
  });
}

#if defined(OCTET_CPU_VECTOR_EXP)
// One row each (the OpenMP loops are in the callers, without the AVX-512 target: clang
// outlines a parallel region without its function's target features).
template <typename A>
OCTET_AVX512 void forward_row_avx512(const A* gate, const A* up, A* o, int64_t hidden) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < hidden; j += 16) {
    const __m512 g = load16(gate + j, hidden - j);
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, g))));
    store16(o + j, _mm512_mul_ps(silu, load16(up + j, hidden - j)), hidden - j);
  }
}

template <typename A>
OCTET_AVX512 void backward_row_avx512(const A* d, const A* gate, const A* up, A* dgate, A* dup,
                                      int64_t hidden) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < hidden; j += 16) {
    const int64_t n = hidden - j;
    const __m512 g = load16(gate + j, n), u = load16(up + j, n), dj = load16(d + j, n);
    const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, g))));
    const __m512 dsilu =
        _mm512_mul_ps(s, _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, s))));
    store16(dgate + j, _mm512_mul_ps(_mm512_mul_ps(dj, u), dsilu), n);
    store16(dup + j, _mm512_mul_ps(dj, _mm512_mul_ps(g, s)), n);
  }
}

// The AVX2 rows: the AVX-512 ones' formulas, 8 lanes at a time.
template <typename A>
OCTET_AVX2 void forward_row_avx2(const A* gate, const A* up, A* o, int64_t hidden) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  for (int64_t j = 0; j < hidden; j += 8) {
    const __m256 g = load8(gate + j, hidden - j);
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g))));
    store8(o + j, _mm256_mul_ps(silu, load8(up + j, hidden - j)), hidden - j);
  }
}

template <typename A>
OCTET_AVX2 void backward_row_avx2(const A* d, const A* gate, const A* up, A* dgate, A* dup,
                                  int64_t hidden) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  for (int64_t j = 0; j < hidden; j += 8) {
    const int64_t n = hidden - j;
    const __m256 g = load8(gate + j, n), u = load8(up + j, n), dj = load8(d + j, n);
    const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g))));
    const __m256 dsilu =
        _mm256_mul_ps(s, _mm256_add_ps(one, _mm256_mul_ps(g, _mm256_sub_ps(one, s))));
    store8(dgate + j, _mm256_mul_ps(_mm256_mul_ps(dj, u), dsilu), n);
    store8(dup + j, _mm256_mul_ps(dj, _mm256_mul_ps(g, s)), n);
  }
}

// The rows of either vector level: `avx512` picks the row functions.
template <typename A>
void forward_rows_vector(const A* gate_up, A* out, int64_t rows, int64_t hidden, bool avx512,
                         const Tensor& amax) {
  rows_with_amax(rows, rows * hidden, amax, avx512 ? Isa::avx512 : Isa::avx2, [&](int64_t t) {
    const A* gate = gate_up + t * 2 * hidden;
    if (avx512) {
      forward_row_avx512(gate, gate + hidden, out + t * hidden, hidden);
    } else {
      forward_row_avx2(gate, gate + hidden, out + t * hidden, hidden);
    }
    return std::pair<const A*, int64_t>{out + t * hidden, hidden};
  });
}

template <typename A>
void backward_rows_vector(const A* dout, const A* gate_up, A* dgate_up, int64_t rows,
                          int64_t hidden, bool avx512, const Tensor& amax) {
  rows_with_amax(rows, rows * hidden, amax, avx512 ? Isa::avx512 : Isa::avx2, [&](int64_t t) {
    const A* gate = gate_up + t * 2 * hidden;
    A* dgate = dgate_up + t * 2 * hidden;
    if (avx512) {
      backward_row_avx512(dout + t * hidden, gate, gate + hidden, dgate, dgate + hidden, hidden);
    } else {
      backward_row_avx2(dout + t * hidden, gate, gate + hidden, dgate, dgate + hidden, hidden);
    }
    return std::pair<const A*, int64_t>{dgate, 2 * hidden};
  });
}
#endif

// The instruction-set level of the vector rows; baseline: the scalar rows run.
Isa vector_swiglu() {
#if defined(OCTET_CPU_VECTOR_EXP)
  return usable_isa("swiglu");
#else
  return Isa::baseline;
#endif
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, const Tensor& out, const Tensor& out_amax) {
  with_activation(gate_up.dtype, [&](auto a) {
    using A = decltype(a);
#if defined(OCTET_CPU_VECTOR_EXP)
    if (const Isa isa = vector_swiglu(); isa != Isa::baseline)
      return forward_rows_vector(gate_up.as<const A>(), out.as<A>(), out.rows(), out.cols(),
                                 isa == Isa::avx512, out_amax);
#endif
    forward_rows(gate_up.as<const A>(), out.as<A>(), out.rows(), out.cols(), out_amax);
  });
}

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  swiglu_forward(gate_up, out, Tensor());
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,
                     const Tensor& dgate_up_amax) {
  with_activation(gate_up.dtype, [&](auto a) {
    using A = decltype(a);
#if defined(OCTET_CPU_VECTOR_EXP)
    if (const Isa isa = vector_swiglu(); isa != Isa::baseline)
      return backward_rows_vector(dout.as<const A>(), gate_up.as<const A>(), dgate_up.as<A>(),
                                  dout.rows(), dout.cols(), isa == Isa::avx512, dgate_up_amax);
#endif
    backward_rows(dout.as<const A>(), gate_up.as<const A>(), dgate_up.as<A>(), dout.rows(),
                  dout.cols(), dgate_up_amax);
  });
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up) {
  swiglu_backward(dout, gate_up, dgate_up, Tensor());
}

}  // namespace octet::kernels::cpu
