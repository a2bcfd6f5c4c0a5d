// kernels/cpu/norm_cpu.cpp: RMSNorm forward and backward on the CPU, one row per
// iteration, fp32 math; the row loops compiled for the baseline, AVX2 and AVX-512 (in the
// same order: the compiler does not reassociate, though it may fuse a multiply and an add),
// picked at run time as isa.h says.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

// Columns of dweight one thread owns in the backward pass.
constexpr int64_t kColumnBlock = 64;

// A: the activation type (x, y, dy, dx); W: the weight's. One row of the forward pass.
template <typename A, typename W>
[[gnu::always_inline]] inline void forward_row(const A* xr, const W* w, A* yr, float* rstd,
                                               int64_t dim, float eps) {
  const float r = 1.0f / std::sqrt(dot(xr, xr, dim) / static_cast<float>(dim) + eps);
  *rstd = r;
  // Read x[j] before y[j] is written: y may be x.
  for (int64_t j = 0; j < dim; ++j)
    yr[j] = from_f32<A>(to_f32(w[j]) * round_as<A>(to_f32(xr[j]) * r));
}

// dweight[j0 + j] += sum_t dy[t][j0 + j] xhat[t][j0 + j] for j < n, t in increasing order.
template <typename A>
[[gnu::always_inline]] inline void dweight_block(const A* dy, const A* x, const float* rstd,
                                                 float* dweight, int64_t rows, int64_t dim,
                                                 int64_t j0, int64_t n) {
  float acc[kColumnBlock] = {};
  for (int64_t t = 0; t < rows; ++t) {
    const A* dyr = dy + t * dim + j0;
    const A* xr = x + t * dim + j0;
    const float r = rstd[t];
    for (int64_t j = 0; j < n; ++j) acc[j] += to_f32(dyr[j]) * round_as<A>(to_f32(xr[j]) * r);
  }
  for (int64_t j = 0; j < n; ++j) dweight[j0 + j] += acc[j];
}

// One row of dx.
template <typename A, typename W>
[[gnu::always_inline]] inline void dx_row(const A* dyr, const A* xr, const W* w, float r, A* dxr,
                                          int64_t dim) {
  const float s =
      sum_lanes(dim, [&](int64_t j) { return (to_f32(dyr[j]) * to_f32(w[j])) * to_f32(xr[j]); });
  const float c = s * r * r * r / static_cast<float>(dim);
  for (int64_t j = 0; j < dim; ++j) {
    dxr[j] = from_f32<A>(r * (to_f32(dyr[j]) * to_f32(w[j])) - c * to_f32(xr[j]));
  }
}

// The row functions once per instruction set (the compiler vectorizes each for its own),
// picked once per call.
template <typename A, typename W>
struct Rows {
  void (*forward)(const A*, const W*, A*, float*, int64_t, float);
  void (*dweight)(const A*, const A*, const float*, float*, int64_t, int64_t, int64_t, int64_t);
  void (*dx)(const A*, const A*, const W*, float, A*, int64_t);
};

#define OCTET_NORM_VARIANT(name, attributes)                                                    \
  template <typename A, typename W>                                                             \
  attributes void forward_##name(const A* x, const W* w, A* y, float* rstd, int64_t dim,        \
                                 float eps) {                                                   \
    forward_row(x, w, y, rstd, dim, eps);                                                       \
  }                                                                                             \
  template <typename A>                                                                         \
  attributes void dweight_##name(const A* dy, const A* x, const float* rstd, float* dweight,    \
                                 int64_t rows, int64_t dim, int64_t j0, int64_t n) {            \
    dweight_block(dy, x, rstd, dweight, rows, dim, j0, n);                                      \
  }                                                                                             \
  template <typename A, typename W>                                                             \
  attributes void dx_##name(const A* dy, const A* x, const W* w, float r, A* dx, int64_t dim) { \
    dx_row(dy, x, w, r, dx, dim);                                                               \
  }

OCTET_NORM_VARIANT(baseline, )
#if defined(__x86_64__) && defined(__GNUC__)
OCTET_NORM_VARIANT(avx2, __attribute__((target("avx2,fma,f16c,bmi2"))))
OCTET_NORM_VARIANT(avx512,
                   __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2"))))
#endif
#undef OCTET_NORM_VARIANT

template <typename A, typename W>
Rows<A, W> pick_rows() {
#if defined(__x86_64__) && defined(__GNUC__)
  const Isa isa = usable_isa("rmsnorm");
  if (isa == Isa::avx512) return {forward_avx512<A, W>, dweight_avx512<A>, dx_avx512<A, W>};
  if (isa == Isa::avx2) return {forward_avx2<A, W>, dweight_avx2<A>, dx_avx2<A, W>};
#endif
  return {forward_baseline<A, W>, dweight_baseline<A>, dx_baseline<A, W>};
}

template <typename A, typename W>
void forward_rows(const A* x, const W* w, A* y, float* rstd, int64_t rows, int64_t dim, float eps) {
  const Rows<A, W> f = pick_rows<A, W>();
#pragma omp parallel for schedule(static) if (rows * dim > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) f.forward(x + t * dim, w, y + t * dim, rstd + t, dim, eps);
}

template <typename A, typename W>
void backward_rows(const A* dy, const A* x, const W* w, const float* rstd, A* dx, float* dweight,
                   int64_t rows, int64_t dim) {
  const Rows<A, W> f = pick_rows<A, W>();
  // dweight first, since dx may overwrite dy. Threads own column blocks and walk the
  // rows in order, so each column sums in increasing t whatever the thread count.
  const int64_t blocks = (dim + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (rows * dim > kParallelElements)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kColumnBlock, n = std::min(dim, j0 + kColumnBlock) - j0;
    f.dweight(dy, x, rstd, dweight, rows, dim, j0, n);
  }

#pragma omp parallel for schedule(static) if (rows * dim > kParallelElements)
  for (int64_t t = 0; t < rows; ++t) f.dx(dy + t * dim, x + t * dim, w, rstd[t], dx + t * dim, dim);
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
