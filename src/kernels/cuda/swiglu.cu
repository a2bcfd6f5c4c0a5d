// kernels/cuda/swiglu.cu: the SwiGLU gate, forward and backward, on CUDA devices.
// Bandwidth-bound elementwise kernels: 16-byte loads and stores where the rows allow
// them, fp32 math in the CPU kernel's order (each operation rounded on its own), one
// rounding to the output dtype.
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_io.cuh"

namespace octet::kernels::cuda {
namespace {

constexpr int kSwigluThreads = 256;

// The elements are processed N at a time: item i is row t = i / (F / N), elements
// [c, c + N) of it with c = (i mod (F / N)) N. The caller picks N = 1 unless F is a
// multiple of N and every pointer is 16-byte aligned, so that each Pack is aligned.
template <typename A, int N>
__global__ void swiglu_forward_kernel(const A* __restrict__ gate_up, A* __restrict__ out,
                                      int64_t rows, int64_t hidden) {
  const int64_t per_row = hidden / N, items = rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, c = (i - t * per_row) * N;
    const A* gate = gate_up + t * 2 * hidden + c;
    const Pack<A, N> g = *reinterpret_cast<const Pack<A, N>*>(gate);
    const Pack<A, N> u = *reinterpret_cast<const Pack<A, N>*>(gate + hidden);
    Pack<A, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float gk = to_f32(g.v[k]);
      // expf(-g) overflows to inf for g < -88: silu is then -0, as on the CPU.
      const float silu = __fdiv_rn(gk, __fadd_rn(1.0f, expf(-gk)));
      store(&o.v[k], __fmul_rn(silu, to_f32(u.v[k])));
    }
    *reinterpret_cast<Pack<A, N>*>(out + t * hidden + c) = o;
  }
}

// dgate_up may be gate_up: each thread reads its elements of gate, up and dout before
// it writes the same elements of dgate and dup, and no other thread touches them (so
// no __restrict__ on those two pointers).
template <typename A, int N>
__global__ void swiglu_backward_kernel(const A* __restrict__ dout, const A* gate_up, A* dgate_up,
                                       int64_t rows, int64_t hidden) {
  const int64_t per_row = hidden / N, items = rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, c = (i - t * per_row) * N;
    const int64_t offset = t * 2 * hidden + c;
    const Pack<A, N> g = *reinterpret_cast<const Pack<A, N>*>(gate_up + offset);
    const Pack<A, N> u = *reinterpret_cast<const Pack<A, N>*>(gate_up + offset + hidden);
    const Pack<A, N> d = *reinterpret_cast<const Pack<A, N>*>(dout + t * hidden + c);
    Pack<A, N> dg, du;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float gk = to_f32(g.v[k]), uk = to_f32(u.v[k]), dk = to_f32(d.v[k]);
      // The CPU's expressions, operation by operation (the _rn intrinsics are never
      // contracted into FMAs): s = 1 / (1 + exp(-g)), dsilu = s (1 + g (1 - s)).
      const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gk)));
      const float dsilu = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(gk, __fsub_rn(1.0f, s))));
      store(&dg.v[k], __fmul_rn(__fmul_rn(dk, uk), dsilu));
      store(&du.v[k], __fmul_rn(dk, __fmul_rn(gk, s)));
    }
    *reinterpret_cast<Pack<A, N>*>(dgate_up + offset) = dg;
    *reinterpret_cast<Pack<A, N>*>(dgate_up + offset + hidden) = du;
  }
}

// N = 16 / sizeof(A) when every row segment starts 16-byte aligned, else 1. gate and up
// start hidden elements apart, so hidden must be a multiple of N.
template <typename A>
bool use_packs(int64_t hidden, const void* a, const void* b, const void* c) {
  constexpr int n = 16 / sizeof(A);
  return hidden % n == 0 && aligned16(a) && aligned16(b) && (c == nullptr || aligned16(c));
}

template <typename A>
void launch_forward(const Tensor& gate_up, const Tensor& out) {
  constexpr int n = 16 / sizeof(A);
  const int64_t rows = out.rows(), hidden = out.cols();
  const A* x = gate_up.as<const A>();
  A* y = out.as<A>();
  if (use_packs<A>(hidden, x, y, nullptr)) {
    launch_kernel(swiglu_forward_kernel<A, n>, blocks_for(rows * hidden / n, kSwigluThreads),
                  kSwigluThreads, 0, stream(), x, y, rows, hidden);
  } else {
    launch_kernel(swiglu_forward_kernel<A, 1>, blocks_for(rows * hidden, kSwigluThreads),
                  kSwigluThreads, 0, stream(), x, y, rows, hidden);
  }
  OCTET_CUDA_CHECK_LAUNCH("swiglu_forward");
}

template <typename A>
void launch_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up) {
  constexpr int n = 16 / sizeof(A);
  const int64_t rows = dout.rows(), hidden = dout.cols();
  const A* d = dout.as<const A>();
  const A* x = gate_up.as<const A>();
  A* dx = dgate_up.as<A>();
  if (use_packs<A>(hidden, d, x, dx)) {
    launch_kernel(swiglu_backward_kernel<A, n>, blocks_for(rows * hidden / n, kSwigluThreads),
                  kSwigluThreads, 0, stream(), d, x, dx, rows, hidden);
  } else {
    launch_kernel(swiglu_backward_kernel<A, 1>, blocks_for(rows * hidden, kSwigluThreads),
                  kSwigluThreads, 0, stream(), d, x, dx, rows, hidden);
  }
  OCTET_CUDA_CHECK_LAUNCH("swiglu_backward");
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  OCTET_CUDA_CHECK("swiglu_forward", cudaSetDevice(gate_up.device.index));
  if (gate_up.dtype == DType::bf16) return launch_forward<uint16_t>(gate_up, out);
  launch_forward<float>(gate_up, out);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up) {
  OCTET_CUDA_CHECK("swiglu_backward", cudaSetDevice(gate_up.device.index));
  if (gate_up.dtype == DType::bf16) return launch_backward<uint16_t>(dout, gate_up, dgate_up);
  launch_backward<float>(dout, gate_up, dgate_up);
}

}  // namespace octet::kernels::cuda
