// kernels/cpu/optimizer_cpu.cpp: AdamW (optionally writing the bf16 working copy in the same
// pass) and the sum of squares on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/optimizer.h"

namespace octet::kernels::cpu {

namespace {

// The step's factors, each the f32 value the scalar formula computes once per element.
struct AdamWFactors {
  float scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bias1, bias2, decay, lr, eps;
};

// Elements [begin, end): the update, each operation an fp32 rounding in this order (the CUDA
// kernel's too, and tests/kernels/test_optimizer.cpp's bound). kBf16Copy: also writes the
// updated parameter rounded to bf16 into w. Compiled once per instruction-set level (below),
// where GCC vectorises it: vectorising reorders nothing, IEEE division and square root are
// correctly rounded at every width, and the build contracts no multiply-add
// (-ffp-contract=off), so every level gives the same bits. The factors come by value and sqrt
// sets no errno (CMakeLists.txt compiles this file with -fno-math-errno; `#pragma GCC optimize`
// does not reach the builtin): with either missing, the loop stayed scalar, a tenth of the
// `small` bf16 step on the Zen 4 guest.
template <bool kBf16Copy>
[[gnu::always_inline]] inline void adamw_loop(const AdamWFactors f, float* __restrict p,
                                              const float* __restrict g, float* __restrict mm,
                                              float* __restrict vv, uint16_t* __restrict w,
                                              int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * f.scale;
    const float m = f.beta1 * mm[i] + f.one_minus_beta1 * gi;
    const float v = f.beta2 * vv[i] + f.one_minus_beta2 * gi * gi;
    mm[i] = m;
    vv[i] = v;
    const float m_hat = m / f.bias1;
    const float v_hat = v / f.bias2;
    const float updated = p[i] * f.decay - f.lr * m_hat / (std::sqrt(v_hat) + f.eps);
    p[i] = updated;
    if constexpr (kBf16Copy) w[i] = f32_to_bf16(updated);
  }
}

// Chunk sums in fp64: each chunk's elements into kLanes partial sums (element i of the chunk
// into partial i % kLanes, in order), the partials then added in order 0..kLanes-1. The
// partials are what the vectorised loop keeps in its lanes, so every instruction-set level
// gives the same bits. kSquare: the squares, exact in fp64 (a float's 24-bit significand
// squared fits 53 bits).
constexpr int kLanes = 32;
template <bool kSquare, class In>
[[gnu::always_inline]] inline double sum_loop(const In* __restrict x, int64_t n) {
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = to_f32(x[i + j]);
      partial[j] += kSquare ? v * v : v;
    }
  }
  for (int j = 0; i + j < n; ++j) {
    const double v = to_f32(x[i + j]);
    partial[j] += kSquare ? v * v : v;
  }
  double sum = 0.0;
  for (const double s : partial) sum += s;
  return sum;
}

struct Loops {
  void (*adamw)(const AdamWFactors&, float*, const float*, float*, float*, uint16_t*, int64_t,
                int64_t);
  void (*adamw_bf16)(const AdamWFactors&, float*, const float*, float*, float*, uint16_t*, int64_t,
                     int64_t);
  double (*sum_f32)(const void*, int64_t);  // add_scaled_sum takes f32 only
  double (*squares_f32)(const void*, int64_t);
  double (*squares_bf16)(const void*, int64_t);
};

#define OCTET_OPTIMIZER_VARIANT(name, attributes)                                               \
  attributes void adamw_##name(const AdamWFactors& f, float* p, const float* g, float* mm,      \
                               float* vv, uint16_t* w, int64_t begin, int64_t end) {            \
    adamw_loop<false>(f, p, g, mm, vv, w, begin, end);                                          \
  }                                                                                             \
  attributes void adamw_bf16_##name(const AdamWFactors& f, float* p, const float* g, float* mm, \
                                    float* vv, uint16_t* w, int64_t begin, int64_t end) {       \
    adamw_loop<true>(f, p, g, mm, vv, w, begin, end);                                           \
  }                                                                                             \
  attributes double sum_f32_##name(const void* x, int64_t n) {                                  \
    return sum_loop<false>(static_cast<const float*>(x), n);                                    \
  }                                                                                             \
  attributes double squares_f32_##name(const void* x, int64_t n) {                              \
    return sum_loop<true>(static_cast<const float*>(x), n);                                     \
  }                                                                                             \
  attributes double squares_bf16_##name(const void* x, int64_t n) {                             \
    return sum_loop<true>(static_cast<const uint16_t*>(x), n);                                  \
  }                                                                                             \
  [[maybe_unused]] constexpr Loops kLoops_##name = {                                            \
      adamw_##name, adamw_bf16_##name, sum_f32_##name, squares_f32_##name, squares_bf16_##name};

OCTET_OPTIMIZER_VARIANT(baseline, )
#if defined(__x86_64__) && defined(__GNUC__)
OCTET_OPTIMIZER_VARIANT(avx2, __attribute__((target("avx2,fma"))))
OCTET_OPTIMIZER_VARIANT(avx512,
                        __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))))
#endif
#undef OCTET_OPTIMIZER_VARIANT

const Loops& pick_loops(const char* op) {
#if defined(__x86_64__) && defined(__GNUC__)
  const Isa isa = usable_isa(op);
  if (isa == Isa::avx512) return kLoops_avx512;
  if (isa == Isa::avx2) return kLoops_avx2;
#endif
  return kLoops_baseline;
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
  const Loops& loops = pick_loops("adamw");
  const auto chunk = kBf16Copy ? loops.adamw_bf16 : loops.adamw;
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

// Sums in fp64 over chunks of kSumChunk elements (sum_loop's partials within each), the chunks'
// sums added in chunk order: the result depends neither on the thread count nor on the
// instruction-set level.
constexpr int64_t kSumChunk = int64_t{1} << 14;

template <bool kSquare>
double sum_in_chunks(const Tensor& x) {
  const bool bf16 = x.dtype == DType::bf16;
  const Loops& loops = pick_loops(kSquare ? "sum_of_squares" : "add_scaled_sum");
  const auto chunk_sum = kSquare ? (bf16 ? loops.squares_bf16 : loops.squares_f32) : loops.sum_f32;
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
