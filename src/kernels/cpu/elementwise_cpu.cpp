// kernels/cpu/elementwise_cpu.cpp: elementwise operations on the CPU.
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"

namespace octet::kernels::cpu {

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = a.numel();
  with_activation(a.dtype, [&](auto tag) {
    using A = decltype(tag);
    const A* pa = a.as<const A>();
    const A* pb = b.as<const A>();
    A* po = out.as<A>();
#pragma omp parallel for schedule(static) if (n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) po[i] = from_f32<A>(to_f32(pa[i]) + to_f32(pb[i]));
  });
}

}  // namespace octet::kernels::cpu
