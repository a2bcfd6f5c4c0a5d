// kernels/cpu/optimizer_cpu.cpp: AdamW (optionally writing the bf16 working copy in the same
// pass) and the sum of squares on the CPU.
#include <cmath>
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/optimizer.h"

namespace octet::kernels::cpu {

namespace {

// kBf16Copy: also writes the updated parameter rounded to bf16 into w, in the same pass.
template <bool kBf16Copy>
void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWStep& s, const Tensor& grad_sum_sq, uint16_t* w) {
  float* p = param.as<float>();
  const float* g = grad.as<const float>();
  float* mm = m.as<float>();
  float* vv = v.as<float>();
  const int64_t n = param.numel();
  const float bias1 = 1.0f - static_cast<float>(std::pow(double{s.beta1}, double(s.step)));
  const float bias2 = 1.0f - static_cast<float>(std::pow(double{s.beta2}, double(s.step)));
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float scale =
      s.max_grad_norm > 0.0f
          ? s.grad_scale * clip_factor(grad_sum_sq.as<const float>()[0], s.max_grad_norm)
          : s.grad_scale;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * scale;
    mm[i] = s.beta1 * mm[i] + (1.0f - s.beta1) * gi;
    vv[i] = s.beta2 * vv[i] + (1.0f - s.beta2) * gi * gi;
    const float m_hat = mm[i] / bias1;
    const float v_hat = vv[i] / bias2;
    const float updated = p[i] * decay - s.lr * m_hat / (std::sqrt(v_hat) + s.eps);
    p[i] = updated;
    if constexpr (kBf16Copy) w[i] = f32_to_bf16(updated);
  }
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

// sum over i of f(x[i]) in fp64, in fixed-size chunks summed in order: the result does
// not depend on the thread count.
template <typename F>
double sum_in_chunks(const Tensor& x, F f) {
  const int64_t n = x.numel();
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  double total = 0.0;
#pragma omp parallel for schedule(static) ordered if (chunks > 8)
  for (int64_t c = 0; c < chunks; ++c) {
    double sum = 0.0;
    const int64_t end = n < (c + 1) * kChunk ? n : (c + 1) * kChunk;
    for (int64_t i = c * kChunk; i < end; ++i) {
      const double v =
          x.dtype == DType::bf16 ? bf16_to_f32(x.as<const uint16_t>()[i]) : x.as<const float>()[i];
      sum += f(v);
    }
#pragma omp ordered
    total += sum;
  }
  return total;
}

}  // namespace

void sum_of_squares(const Tensor& x, const Tensor& out) {
  out.as<float>()[0] = static_cast<float>(sum_in_chunks(x, [](double v) { return v * v; }));
}

void add_scaled_sum(const Tensor& x, const Tensor& out, double scale) {
  const double sum = sum_in_chunks(x, [](double v) { return v; });
  out.as<float>()[0] += static_cast<float>(sum * scale);
}

}  // namespace octet::kernels::cpu
