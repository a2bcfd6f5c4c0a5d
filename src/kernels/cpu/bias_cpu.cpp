// kernels/cpu/bias_cpu.cpp: bias add and bias gradient on the CPU.
#include <cstdint>
#include <vector>

#include "core/convert.h"
#include "kernels/backends.h"

namespace octet::kernels::cpu {
namespace {
float load(const Tensor& t, int64_t i) {
  return t.dtype == DType::bf16 ? bf16_to_f32(t.as<const uint16_t>()[i]) : t.as<const float>()[i];
}
}  // namespace

void add_bias(const Tensor& y, const Tensor& bias) {
  const int64_t rows = y.rows(), cols = y.cols();
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = t * cols + j;
      const float v = load(y, i) + load(bias, j);
      if (y.dtype == DType::bf16) {
        y.as<uint16_t>()[i] = f32_to_bf16(v);
      } else {
        y.as<float>()[i] = v;
      }
    }
  }
}

void bias_grad_accumulate(const Tensor& dy, const Tensor& grad) {
  const int64_t rows = dy.rows(), cols = dy.cols();
  // Each column summed in row order by one thread: the result does not depend on
  // the thread count.
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t j = 0; j < cols; ++j) {
    float sum = 0.0f;
    for (int64_t t = 0; t < rows; ++t) sum += load(dy, t * cols + j);
    grad.as<float>()[j] += sum;
  }
}

}  // namespace octet::kernels::cpu
