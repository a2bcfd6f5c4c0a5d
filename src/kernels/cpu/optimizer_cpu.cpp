// kernels/cpu/optimizer_cpu.cpp: AdamW (optionally writing the bf16 working copy in the same
// pass) and the sum of squares on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cpu/bf16_round_avx512.h"
#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/isa.h"
#include "kernels/optimizer.h"

namespace octet::kernels::cpu {

namespace {

[[gnu::always_inline]] inline float load_f32(float v) {
  return v;
}
[[gnu::always_inline]] inline float load_f32(uint16_t v) {
  return bf16_to_f32(v);
}

// The step's factors, each the f32 value the scalar formula computes once per element.
struct AdamWFactors {
  float scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bias1, bias2, decay, lr, eps;
};

// Elements [begin, end): the update, each operation an fp32 rounding in this order (the CUDA
// kernel's too, and tests/kernels/test_optimizer.cpp's bound). kBf16Copy: also writes the
// updated parameter rounded to bf16 into w. The vector variants below do the same operations
// on 16 or 8 lanes (IEEE division and square root are correctly rounded at every width, and
// the build contracts no multiply-add: -ffp-contract=off), so every variant gives the same bits.
template <bool kBf16Copy>
[[gnu::always_inline]] inline void adamw_scalar(const AdamWFactors& f, float* __restrict p,
                                                const float* __restrict g, float* __restrict mm,
                                                float* __restrict vv, uint16_t* __restrict w,
                                                int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * f.scale;
    mm[i] = f.beta1 * mm[i] + f.one_minus_beta1 * gi;
    vv[i] = f.beta2 * vv[i] + f.one_minus_beta2 * gi * gi;
    const float m_hat = mm[i] / f.bias1;
    const float v_hat = vv[i] / f.bias2;
    const float updated = p[i] * f.decay - f.lr * m_hat / (std::sqrt(v_hat) + f.eps);
    p[i] = updated;
    if constexpr (kBf16Copy) w[i] = f32_to_bf16(updated);
  }
}

using AdamWChunk = void (*)(const AdamWFactors&, float*, const float*, float*, float*, uint16_t*,
                            int64_t, int64_t);

template <bool kBf16Copy>
void adamw_chunk_baseline(const AdamWFactors& f, float* p, const float* g, float* mm, float* vv,
                          uint16_t* w, int64_t begin, int64_t end) {
  adamw_scalar<kBf16Copy>(f, p, g, mm, vv, w, begin, end);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define OCTET_ADAMW_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define OCTET_ADAMW_AVX2 __attribute__((target("avx2,fma")))

// The scalar loop's AdamW was the largest single kernel of the `small` bf16 step on the Zen 4
// guest (scalar: GCC keeps sqrtf's errno branch and reloads the factors after every store),
// about a tenth of it; these run at the memory's pace.
template <bool kBf16Copy>
OCTET_ADAMW_AVX512 void adamw_chunk_avx512(const AdamWFactors& f, float* p, const float* g,
                                           float* mm, float* vv, uint16_t* w, int64_t begin,
                                           int64_t end) {
  const __m512 scale = _mm512_set1_ps(f.scale), b1 = _mm512_set1_ps(f.beta1),
               c1 = _mm512_set1_ps(f.one_minus_beta1), b2 = _mm512_set1_ps(f.beta2),
               c2 = _mm512_set1_ps(f.one_minus_beta2), bias1 = _mm512_set1_ps(f.bias1),
               bias2 = _mm512_set1_ps(f.bias2), decay = _mm512_set1_ps(f.decay),
               lr = _mm512_set1_ps(f.lr), eps = _mm512_set1_ps(f.eps);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), scale);
    const __m512 m =
        _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(mm + i)), _mm512_mul_ps(c1, gi));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(vv + i)),
                                   _mm512_mul_ps(_mm512_mul_ps(c2, gi), gi));
    _mm512_storeu_ps(mm + i, m);
    _mm512_storeu_ps(vv + i, v);
    const __m512 m_hat = _mm512_div_ps(m, bias1), v_hat = _mm512_div_ps(v, bias2);
    const __m512 updated = _mm512_sub_ps(
        _mm512_mul_ps(_mm512_loadu_ps(p + i), decay),
        _mm512_div_ps(_mm512_mul_ps(lr, m_hat), _mm512_add_ps(_mm512_sqrt_ps(v_hat), eps)));
    _mm512_storeu_ps(p + i, updated);
    if constexpr (kBf16Copy) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i), avx512::round_to_bf16(updated));
    }
  }
  adamw_scalar<kBf16Copy>(f, p, g, mm, vv, w, i, end);
}

template <bool kBf16Copy>
OCTET_ADAMW_AVX2 void adamw_chunk_avx2(const AdamWFactors& f, float* p, const float* g, float* mm,
                                       float* vv, uint16_t* w, int64_t begin, int64_t end) {
  const __m256 scale = _mm256_set1_ps(f.scale), b1 = _mm256_set1_ps(f.beta1),
               c1 = _mm256_set1_ps(f.one_minus_beta1), b2 = _mm256_set1_ps(f.beta2),
               c2 = _mm256_set1_ps(f.one_minus_beta2), bias1 = _mm256_set1_ps(f.bias1),
               bias2 = _mm256_set1_ps(f.bias2), decay = _mm256_set1_ps(f.decay),
               lr = _mm256_set1_ps(f.lr), eps = _mm256_set1_ps(f.eps);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), scale);
    const __m256 m =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mm + i)), _mm256_mul_ps(c1, gi));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(vv + i)),
                                   _mm256_mul_ps(_mm256_mul_ps(c2, gi), gi));
    _mm256_storeu_ps(mm + i, m);
    _mm256_storeu_ps(vv + i, v);
    const __m256 m_hat = _mm256_div_ps(m, bias1), v_hat = _mm256_div_ps(v, bias2);
    const __m256 updated = _mm256_sub_ps(
        _mm256_mul_ps(_mm256_loadu_ps(p + i), decay),
        _mm256_div_ps(_mm256_mul_ps(lr, m_hat), _mm256_add_ps(_mm256_sqrt_ps(v_hat), eps)));
    _mm256_storeu_ps(p + i, updated);
    if constexpr (kBf16Copy) {
      alignas(32) uint32_t bits[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(bits), _mm256_castps_si256(updated));
      for (int l = 0; l < 8; ++l) w[i + l] = f32_to_bf16(f32_from_bits(bits[l]));
    }
  }
  adamw_scalar<kBf16Copy>(f, p, g, mm, vv, w, i, end);
}
#undef OCTET_ADAMW_AVX512
#undef OCTET_ADAMW_AVX2
#endif

template <bool kBf16Copy>
AdamWChunk pick_adamw_chunk() {
#if defined(__x86_64__) && defined(__GNUC__)
  const Isa isa = usable_isa("adamw");
  if (isa == Isa::avx512) return adamw_chunk_avx512<kBf16Copy>;
  if (isa == Isa::avx2) return adamw_chunk_avx2<kBf16Copy>;
#endif
  return adamw_chunk_baseline<kBf16Copy>;
}

// kBf16Copy: also writes the updated parameter rounded to bf16 into w, in the same pass.
template <bool kBf16Copy>
void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWStep& s, const Tensor& grad_sum_sq, uint16_t* w) {
  const int64_t n = param.numel();
  const float clip =
      s.max_grad_norm > 0.0f
          ? s.grad_scale * clip_factor(grad_sum_sq.as<const float>()[0], s.max_grad_norm)
          : s.grad_scale;
  const AdamWFactors f{clip,
                       s.beta1,
                       1.0f - s.beta1,
                       s.beta2,
                       1.0f - s.beta2,
                       1.0f - static_cast<float>(std::pow(double{s.beta1}, double(s.step))),
                       1.0f - static_cast<float>(std::pow(double{s.beta2}, double(s.step))),
                       1.0f - s.lr * s.weight_decay,
                       s.lr,
                       s.eps};
  const AdamWChunk chunk = pick_adamw_chunk<kBf16Copy>();
  float* p = param.as<float>();
  const float* g = grad.as<const float>();
  float* mm = m.as<float>();
  float* vv = v.as<float>();
  // Chunks of 16 Ki elements (whole vectors but the last); the OpenMP loop stays outside the
  // target-attributed functions (clang outlines a parallel region without its function's
  // target features).
  constexpr int64_t kChunk = int64_t{1} << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t c = 0; c < chunks; ++c)
    chunk(f, p, g, mm, vv, w, c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWStep& s, const Tensor& grad_sum_sq) {
  adamw<false>(param, grad, m, v, s, grad_sum_sq, nullptr);
}

void adamw_step_to_bf16(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                        const AdamWStep& s, const Tensor& grad_sum_sq, const Tensor& working) {
  adamw<true>(param, grad, m, v, s, grad_sum_sq, working.as<uint16_t>());
}

namespace {

// Sums in fp64 over chunks of kSumChunk elements, each chunk's elements into kLanes partial sums
// (element i of the chunk into partial i % kLanes, in order), the partials then added in order
// 0..kLanes-1, and the chunks' sums in chunk order: the result depends neither on the thread
// count nor on the instruction-set level (the vector variants keep the partials in their lanes).
// kSquare: the squares, which are exact in fp64 (a float's 24-bit significand squared fits
// 53 bits), so a fused multiply-add rounds as the add alone does.
constexpr int64_t kSumChunk = int64_t{1} << 14;
constexpr int kLanes = 32;

template <bool kSquare, class In>
[[gnu::always_inline]] inline double sum_chunk_scalar(const In* x, int64_t n) {
  double partial[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) {
    const double v = load_f32(x[i]);
    partial[i % kLanes] += kSquare ? v * v : v;
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

template <bool kSquare, class In>
double sum_chunk_baseline(const void* x, int64_t n) {
  return sum_chunk_scalar<kSquare>(static_cast<const In*>(x), n);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define OCTET_SUM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define OCTET_SUM_AVX2 __attribute__((target("avx2,fma")))
// 8 values from x as fp64.
OCTET_SUM_AVX512 inline __m512d load8_f64(const float* x) {
  return _mm512_cvtps_pd(_mm256_loadu_ps(x));
}
OCTET_SUM_AVX512 inline __m512d load8_f64(const uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}
// Four registers of eight lanes: partial 8 r + l in lane l of register r.
template <bool kSquare, class In>
OCTET_SUM_AVX512 double sum_chunk_avx512(const void* xv, int64_t n) {
  const In* x = static_cast<const In*>(xv);
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                    _mm512_setzero_pd()};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512d v = load8_f64(x + i + 8 * r);
      acc[r] = kSquare ? _mm512_fmadd_pd(v, v, acc[r]) : _mm512_add_pd(acc[r], v);
    }
  }
  alignas(64) double partial[kLanes];
  for (int r = 0; r < 4; ++r) _mm512_store_pd(partial + 8 * r, acc[r]);
  for (int64_t j = 0; i + j < n; ++j) {  // the tail, partial j of the next row
    const double v = load_f32(x[i + j]);
    partial[j] += kSquare ? v * v : v;
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}
OCTET_SUM_AVX2 inline __m256d load4_f64(const float* x) {
  return _mm256_cvtps_pd(_mm_loadu_ps(x));
}
OCTET_SUM_AVX2 inline __m256d load4_f64(const uint16_t* x) {
  const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x));
  return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16)));
}
// Eight registers of four lanes: partial 4 r + l in lane l of register r.
template <bool kSquare, class In>
OCTET_SUM_AVX2 double sum_chunk_avx2(const void* xv, int64_t n) {
  const In* x = static_cast<const In*>(xv);
  __m256d acc[8];
  for (auto& a : acc) a = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const __m256d v = load4_f64(x + i + 4 * r);
      acc[r] = kSquare ? _mm256_fmadd_pd(v, v, acc[r]) : _mm256_add_pd(acc[r], v);
    }
  }
  alignas(32) double partial[kLanes];
  for (int r = 0; r < 8; ++r) _mm256_store_pd(partial + 4 * r, acc[r]);
  for (int64_t j = 0; i + j < n; ++j) {
    const double v = load_f32(x[i + j]);
    partial[j] += kSquare ? v * v : v;
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}
#undef OCTET_SUM_AVX512
#undef OCTET_SUM_AVX2
#endif

template <bool kSquare, class In>
double (*pick_sum_chunk())(const void*, int64_t) {
#if defined(__x86_64__) && defined(__GNUC__)
  const Isa isa = usable_isa(kSquare ? "sum_of_squares" : "add_scaled_sum");
  if (isa == Isa::avx512) return sum_chunk_avx512<kSquare, In>;
  if (isa == Isa::avx2) return sum_chunk_avx2<kSquare, In>;
#endif
  return sum_chunk_baseline<kSquare, In>;
}

template <bool kSquare>
double sum_in_chunks(const Tensor& x) {
  const bool bf16 = x.dtype == DType::bf16;
  const auto chunk_sum =
      bf16 ? pick_sum_chunk<kSquare, uint16_t>() : pick_sum_chunk<kSquare, float>();
  const size_t size = dtype_size(x.dtype);
  const int64_t n = x.numel();
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  double total = 0.0;
#pragma omp parallel for schedule(static) ordered if (chunks > 8)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kSumChunk;
    const double sum =
        chunk_sum(static_cast<const char*>(x.data) + begin * static_cast<int64_t>(size),
                  std::min(kSumChunk, n - begin));
#pragma omp ordered
    total += sum;
  }
  return total;
}

}  // namespace

void sum_of_squares(const Tensor& x, const Tensor& out) {
  out.as<float>()[0] = static_cast<float>(sum_in_chunks<true>(x));
}

void add_scaled_sum(const Tensor& x, const Tensor& out, double scale) {
  const double sum = sum_in_chunks<false>(x);
  out.as<float>()[0] += static_cast<float>(sum * scale);
}

}  // namespace octet::kernels::cpu
