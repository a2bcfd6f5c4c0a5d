// kernels/cpu/norm_cpu.cpp: RMSNorm forward and backward on the CPU, one row per
// iteration, fp32 math.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"

namespace octet::kernels::cpu {
namespace {

// Columns of dweight one thread owns in the backward pass.
constexpr int64_t kColumnBlock = 64;

// A: the activation type (x, y, dy, dx); W: the weight's.
template <typename A, typename W>
void forward_rows(const A* x, const W* w, A* y, float* rstd, int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) {
    const A* xr = x + t * dim;
    A* yr = y + t * dim;
    const float r = 1.0f / std::sqrt(dot(xr, xr, dim) / static_cast<float>(dim) + eps);
    rstd[t] = r;
    // Read x[j] before y[j] is written: y may be x.
    for (int64_t j = 0; j < dim; ++j)
      yr[j] = from_f32<A>(to_f32(w[j]) * round_as<A>(to_f32(xr[j]) * r));
  }
}

template <typename A, typename W>
void backward_rows(const A* dy, const A* x, const W* w, const float* rstd, A* dx, float* dweight,
                   int64_t rows, int64_t dim) {
  // dweight first, since dx may overwrite dy. Threads own column blocks and walk the
  // rows in order, so each column sums in increasing t whatever the thread count.
  const int64_t blocks = (dim + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (rows * dim > kParallelElements)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kColumnBlock, n = std::min(dim, j0 + kColumnBlock) - j0;
    float acc[kColumnBlock] = {};
    for (int64_t t = 0; t < rows; ++t) {
      const A* dyr = dy + t * dim + j0;
      const A* xr = x + t * dim + j0;
      const float r = rstd[t];
      for (int64_t j = 0; j < n; ++j) acc[j] += to_f32(dyr[j]) * round_as<A>(to_f32(xr[j]) * r);
    }
    for (int64_t j = 0; j < n; ++j) dweight[j0 + j] += acc[j];
  }

#pragma omp parallel for schedule(static) if (rows * dim > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) {
    const A* dyr = dy + t * dim;
    const A* xr = x + t * dim;
    A* dxr = dx + t * dim;
    const float r = rstd[t];
    const float s =
        sum_lanes(dim, [&](int64_t j) { return (to_f32(dyr[j]) * to_f32(w[j])) * to_f32(xr[j]); });
    const float c = s * r * r * r / static_cast<float>(dim);
    for (int64_t j = 0; j < dim; ++j) {
      dxr[j] = from_f32<A>(r * (to_f32(dyr[j]) * to_f32(w[j])) - c * to_f32(xr[j]));
    }
  }
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  with_activation(x.dtype, [&](auto a) {
    with_activation(weight.dtype, [&](auto w) {
      using A = decltype(a);
      using W = decltype(w);
      forward_rows(x.as<const A>(), weight.as<const W>(), y.as<A>(), rstd.as<float>(), x.rows(),
                   x.cols(), eps);
    });
  });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dweight) {
  with_activation(x.dtype, [&](auto a) {
    with_activation(weight.dtype, [&](auto w) {
      using A = decltype(a);
      using W = decltype(w);
      backward_rows(dy.as<const A>(), x.as<const A>(), weight.as<const W>(), rstd.as<const float>(),
                    dx.as<A>(), dweight.as<float>(), x.rows(), x.cols());
    });
  });
}

}  // namespace octet::kernels::cpu
