// kernels/cuda/norm.cu: RMSNorm forward and backward on CUDA devices, one block per row with
// the row in registers (16 columns a thread, at most 512 threads: D <= 8192), fp32
// statistics, and a deterministic two-stage reduction of dweight through static device memory.
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_io.cuh"
#include "kernels/cuda/scratch.h"

namespace octet::kernels::cuda {
namespace {

// Groups of 8 columns a thread holds: thread x takes groups x and x + blockDim.x.
constexpr int kGroupsPerThread = 2;
// 512 threads keep the backward kernel's four register rows (w, dy, x, dweight: 64 floats)
// within the 128 registers a thread may use at that block size, with no spills.
constexpr int kMaxThreads = 512;
constexpr int64_t kMaxDim = int64_t{kMaxThreads} * kGroupsPerThread * kGroup;

// dweight's per-block partial sums: [blocks, D] with blocks <= kPartialFloats / D. Static,
// because kernels never allocate; launches on one stream never overlap, so one copy serves
// (claim_static_scratch refuses a second stream while the first has work queued).
constexpr int64_t kPartialFloats = int64_t{1} << 21;  // 8 MiB
constexpr int64_t kMaxBackwardBlocks = 512;
__device__ float g_dweight_partials[kPartialFloats];

// A multiple of 32 with threads * 16 >= dim.
int threads_for(int64_t dim) {
  const int64_t per = kGroupsPerThread * kGroup;
  const int64_t threads = ((dim + per - 1) / per + 31) / 32 * 32;
  return static_cast<int>(threads < 32 ? 32 : threads);
}

// The thread's groups of row `start` (columns beyond dim read as 0).
__device__ __forceinline__ void load_row(const void* p, bool bf16, int64_t start, int64_t dim,
                                         bool vec, float (&v)[kGroupsPerThread][kGroup]) {
#pragma unroll
  for (int k = 0; k < kGroupsPerThread; ++k) {
    const int64_t col = (threadIdx.x + static_cast<int64_t>(k) * blockDim.x) * kGroup;
    load8(p, bf16, start + col, start + dim, vec, v[k]);
  }
}

__device__ __forceinline__ void store_row(void* p, bool bf16, int64_t start, int64_t dim, bool vec,
                                          const float (&v)[kGroupsPerThread][kGroup]) {
#pragma unroll
  for (int k = 0; k < kGroupsPerThread; ++k) {
    const int64_t col = (threadIdx.x + static_cast<int64_t>(k) * blockDim.x) * kGroup;
    store8(p, bf16, start + col, start + dim, vec, v[k]);
  }
}

// y may be x: each thread reads its elements of a row before it writes them, and no other
// thread touches them. vec: dim % 8 == 0 and x, y and w 16-byte aligned.
__global__ void __launch_bounds__(kMaxThreads)
    rmsnorm_forward_kernel(const void* x, const void* w, bool bf16, bool w_bf16, void* y,
                           float* rstd, int64_t rows, int64_t dim, float eps, bool vec) {
  __shared__ float scratch[32];
  float wv[kGroupsPerThread][kGroup];
  load_row(w, w_bf16, 0, dim, vec, wv);
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {  // uniform: block_sum is safe
    float v[kGroupsPerThread][kGroup];
    load_row(x, bf16, t * dim, dim, vec, v);
    float sum_sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kGroupsPerThread; ++k) {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) sum_sq += v[k][e] * v[k][e];
    }
    sum_sq = block_sum(sum_sq, scratch);
    // The CPU's steps: 1 / sqrt(sum / D + eps), each rounded.
    const float r =
        __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_sq, static_cast<float>(dim)), eps)));
    if (threadIdx.x == 0) rstd[t] = r;
#pragma unroll
    for (int k = 0; k < kGroupsPerThread; ++k) {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        // Hugging Face's order: normalize, round to x's dtype, then scale by the weight.
        v[k][e] = __fmul_rn(wv[k][e], round_as(bf16, __fmul_rn(v[k][e], r)));
      }
    }
    store_row(y, bf16, t * dim, dim, vec, v);
  }
}

// Block b takes rows [b * rows_per_block, ...) in increasing order: dx for each row, and
// the block's dweight partial sum (in registers, in row order) into g_dweight_partials[b].
// dx may be dy: as in the forward kernel, every element is read before it is written by
// the one thread that owns it. vec: dim % 8 == 0 and dy, x, w, dx 16-byte aligned.
__global__ void __launch_bounds__(kMaxThreads)
    rmsnorm_backward_kernel(const void* dy, const void* x, const void* w, bool bf16, bool w_bf16,
                            const float* rstd, void* dx, int64_t rows, int64_t dim,
                            int64_t rows_per_block, bool vec) {
  __shared__ float scratch[32];
  float wv[kGroupsPerThread][kGroup], dw[kGroupsPerThread][kGroup] = {};
  load_row(w, w_bf16, 0, dim, vec, wv);
  const int64_t first = blockIdx.x * rows_per_block;
  const int64_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
  for (int64_t t = first; t < last; ++t) {  // uniform: block_sum is safe
    float g[kGroupsPerThread][kGroup], v[kGroupsPerThread][kGroup];
    load_row(dy, bf16, t * dim, dim, vec, g);
    load_row(x, bf16, t * dim, dim, vec, v);
    const float r = rstd[t];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kGroupsPerThread; ++k) {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        dw[k][e] += g[k][e] * round_as(bf16, __fmul_rn(v[k][e], r));
        g[k][e] = __fmul_rn(g[k][e], wv[k][e]);  // dn = dy * w
        dot += g[k][e] * v[k][e];
      }
    }
    dot = block_sum(dot, scratch);
    // The CPU's c = s * r * r * r / D, left to right.
    const float c =
        __fdiv_rn(__fmul_rn(__fmul_rn(__fmul_rn(dot, r), r), r), static_cast<float>(dim));
#pragma unroll
    for (int k = 0; k < kGroupsPerThread; ++k) {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        g[k][e] = __fsub_rn(__fmul_rn(r, g[k][e]), __fmul_rn(c, v[k][e]));
      }
    }
    store_row(dx, bf16, t * dim, dim, vec, g);
  }
  float* partial = g_dweight_partials + blockIdx.x * dim;
#pragma unroll
  for (int k = 0; k < kGroupsPerThread; ++k) {
    const int64_t col = (threadIdx.x + static_cast<int64_t>(k) * blockDim.x) * kGroup;
#pragma unroll
    for (int e = 0; e < kGroup; ++e) {
      if (col + e < dim) partial[col + e] = dw[k][e];
    }
  }
}

// dweight[j] += the blocks' partial sums of column j, added in block order.
__global__ void rmsnorm_dweight_kernel(int64_t blocks, int64_t dim, float* dweight) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < dim;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) sum = __fadd_rn(sum, g_dweight_partials[b * dim + j]);
    dweight[j] = __fadd_rn(dweight[j], sum);
  }
}

void check_dim(const char* op, int64_t dim) {
  OCTET_CHECK(dim <= kMaxDim, op, "D=", dim, " is wider than the CUDA kernel's ", kMaxDim,
              " columns (", kGroupsPerThread * kGroup, " a thread, ", kMaxThreads,
              " threads a row); use D <= ", kMaxDim);
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  constexpr const char* op = "rmsnorm_forward";
  OCTET_CUDA_CHECK(op, cudaSetDevice(x.device.index));
  claim_static_scratch(op);
  const int64_t rows = x.rows(), dim = x.cols();
  check_dim(op, dim);
  const bool vec =
      dim % kGroup == 0 && aligned16(x.data) && aligned16(y.data) && aligned16(weight.data);
  launch_kernel(rmsnorm_forward_kernel, blocks_for(rows, 1), threads_for(dim), 0, stream(), x.data,
                weight.data, x.dtype == DType::bf16, weight.dtype == DType::bf16, y.data,
                rstd.as<float>(), rows, dim, eps, vec);
  OCTET_CUDA_CHECK_LAUNCH(op);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dweight) {
  constexpr const char* op = "rmsnorm_backward";
  OCTET_CUDA_CHECK(op, cudaSetDevice(x.device.index));
  const int64_t rows = x.rows(), dim = x.cols();
  check_dim(op, dim);
  const bool vec = dim % kGroup == 0 && aligned16(dy.data) && aligned16(x.data) &&
                   aligned16(weight.data) && aligned16(dx.data);
  // As many blocks as the partials hold (and the rows need), then whole runs of rows.
  int64_t blocks = kPartialFloats / dim;
  if (blocks > kMaxBackwardBlocks) blocks = kMaxBackwardBlocks;
  if (blocks > rows) blocks = rows;
  const int64_t rows_per_block = (rows + blocks - 1) / blocks;
  blocks = (rows + rows_per_block - 1) / rows_per_block;
  launch_kernel(rmsnorm_backward_kernel, static_cast<unsigned>(blocks), threads_for(dim), 0,
                stream(), dy.data, x.data, weight.data, x.dtype == DType::bf16,
                weight.dtype == DType::bf16, rstd.as<const float>(), dx.data, rows, dim,
                rows_per_block, vec);
  OCTET_CUDA_CHECK_LAUNCH(op);
  launch_kernel(rmsnorm_dweight_kernel, blocks_for(dim, 256), 256, 0, stream(), blocks, dim,
                dweight.as<float>());
  OCTET_CUDA_CHECK_LAUNCH(op);
}

}  // namespace octet::kernels::cuda
