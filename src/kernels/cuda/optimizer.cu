// kernels/cuda/optimizer.cu: AdamW over a contiguous parameter buffer in one launch,
// with global-norm clipping read on the device, and the sums the step needs (sum of
// squares of the gradients, the running loss) without a host synchronisation.
#include <cmath>
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/scratch.h"
#include "kernels/optimizer.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kOptimizerThreads = 256;
// Sums use a fixed grid and add the per-block partials in block order in the last
// block to finish, so the result is the same bits on every run. The partials are static
// (one copy per device), so sums must run on one stream at a time (claim_static_scratch).
constexpr int kSumBlocks = 1024;
__device__ double g_partials[kSumBlocks];
__device__ unsigned g_blocks_done;

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t n, AdamWStep s,
                             float bias1, float bias2, float decay, const float* grad_sum_sq) {
  const float scale = grad_sum_sq != nullptr
                          ? s.grad_scale * clip_factor(*grad_sum_sq, s.max_grad_norm)
                          : s.grad_scale;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // The CPU kernel's operations in its order, each rounded on its own (the _rn
    // intrinsics are never contracted into FMAs), so both devices produce the same bits.
    const float gi = __fmul_rn(g[i], scale);
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(1.0f - s.beta1, gi));
    const float vi =
        __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - s.beta2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float m_hat = __fdiv_rn(mi, bias1);
    const float v_hat = __fdiv_rn(vi, bias2);
    const float step = __fdiv_rn(__fmul_rn(s.lr, m_hat), __fadd_rn(__fsqrt_rn(v_hat), s.eps));
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), step);
  }
}

__device__ __forceinline__ double load_double(const void* x, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
}

// out[0] = sum of x² (square) or out[0] += scale * sum of x (!square), in fp64.
__global__ void sum_kernel(const void* x, bool bf16, int64_t n, bool square, double scale,
                           float* out) {
  double sum = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = load_double(x, bf16, i);
    sum += square ? v * v : v;
  }
  __shared__ double warp_sums[kOptimizerThreads / 32];
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    double block = 0.0;
    for (int w = 0; w < kOptimizerThreads / 32; ++w) block += warp_sums[w];
    g_partials[blockIdx.x] = block;
    __threadfence();
    last = atomicAdd(&g_blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  double total = 0.0;
  for (unsigned b = 0; b < gridDim.x; ++b) total += *(volatile double*)&g_partials[b];
  if (square) {
    out[0] = static_cast<float>(total);
  } else {
    out[0] += static_cast<float>(total * scale);
  }
  g_blocks_done = 0;  // ready for the next launch (kernels on one stream run in order)
}

void launch_sum(const Tensor& x, const Tensor& out, bool square, double scale) {
  OCTET_CUDA_CHECK(square ? "sum_of_squares" : "add_scaled_sum", cudaSetDevice(out.device.index));
  claim_static_scratch(square ? "sum_of_squares" : "add_scaled_sum");
  launch_kernel(sum_kernel, kSumBlocks, kOptimizerThreads, 0, stream(), x.data,
                x.dtype == DType::bf16, x.numel(), square, scale, out.as<float>());
  OCTET_CUDA_CHECK_LAUNCH(square ? "sum_of_squares" : "add_scaled_sum");
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWStep& s, const Tensor& grad_sum_sq) {
  OCTET_CUDA_CHECK("adamw", cudaSetDevice(param.device.index));
  // Bias corrections and the decay factor as the CPU computes them, on the host: in the
  // kernel, nvcc would contract 1 - lr * wd into an FMA (a different rounding).
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float bias1 = 1.0f - static_cast<float>(std::pow(double{s.beta1}, double(s.step)));
  const float bias2 = 1.0f - static_cast<float>(std::pow(double{s.beta2}, double(s.step)));
  const int64_t n = param.numel();
  launch_kernel(adamw_kernel, blocks_for(n, kOptimizerThreads), kOptimizerThreads, 0, stream(),
                param.as<float>(), grad.as<const float>(), m.as<float>(), v.as<float>(), n, s,
                bias1, bias2, decay,
                s.max_grad_norm > 0.0f ? grad_sum_sq.as<const float>() : nullptr);
  OCTET_CUDA_CHECK_LAUNCH("adamw");
}

void sum_of_squares(const Tensor& x, const Tensor& out) {
  launch_sum(x, out, true, 1.0);
}

void add_scaled_sum(const Tensor& x, const Tensor& out, double scale) {
  launch_sum(x, out, false, scale);
}

}  // namespace octet::kernels::cuda
