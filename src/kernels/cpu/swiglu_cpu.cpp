// kernels/cpu/swiglu_cpu.cpp: the SwiGLU gate, forward and backward, on the CPU.
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"

namespace octet::kernels::cpu {
namespace {

template <typename A>
void forward_rows(const A* gate_up, A* out, int64_t rows, int64_t hidden) {
#pragma omp parallel for schedule(static) if (rows * hidden > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) {
    const A* gate = gate_up + t * 2 * hidden;
    const A* up = gate + hidden;
    A* o = out + t * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const float g = to_f32(gate[j]);
      // exp(-g) overflows to inf for g < -88: silu is then -0, as it should be.
      const float silu = g / (1.0f + std::exp(-g));
      o[j] = from_f32<A>(silu * to_f32(up[j]));
    }
  }
}

template <typename A>
void backward_rows(const A* dout, const A* gate_up, A* dgate_up, int64_t rows, int64_t hidden) {
#pragma omp parallel for schedule(static) if (rows * hidden > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) {
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
  }
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  with_activation(gate_up.dtype, [&](auto a) {
    using A = decltype(a);
    forward_rows(gate_up.as<const A>(), out.as<A>(), out.rows(), out.cols());
  });
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up) {
  with_activation(gate_up.dtype, [&](auto a) {
    using A = decltype(a);
    backward_rows(dout.as<const A>(), gate_up.as<const A>(), dgate_up.as<A>(), dout.rows(),
                  dout.cols());
  });
}

}  // namespace octet::kernels::cpu
