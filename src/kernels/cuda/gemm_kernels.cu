// kernels/cuda/gemm_kernels.cu: the elementwise kernels around the cuBLASLt GEMM (see
// gemm_kernels.h). Each is a grid-stride loop over its outputs with 64-bit indices; none
// needs shared memory or synchronisation, which keeps them obviously correct: they move
// at most a few bytes per GEMM element and are never where the time goes.
#include <cstdint>

#include "core/convert.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_kernels.h"
#include "kernels/cuda/launch.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kGemmThreads = 256;

// Scale-grid columns of an operand [rows, k]: ceil(k / block_cols), or 1 without a K split.
__host__ __device__ int64_t grid_cols_of(const ScaleView& s) {
  return s.grid.block_cols == 0 ? 1 : (s.k + s.grid.block_cols - 1) / s.grid.block_cols;
}

// The scale_inv of element (r, c), as the CPU's gemm_fp8_cpu.cpp reads it.
__device__ __forceinline__ float scale_at(const ScaleView& s, int64_t grid_cols, int64_t r,
                                          int64_t c) {
  if (s.data == nullptr) return 1.0f;
  const int64_t gr = s.grid.block_rows == 0 ? 0 : r / s.grid.block_rows;
  const int64_t gc = s.grid.block_cols == 0 ? 0 : c / s.grid.block_cols;
  const int64_t i = gr * grid_cols + gc;
  return s.grid.e8m0 ? e8m0_to_f32(static_cast<const uint8_t*>(s.data)[i])
                     : static_cast<const float*>(s.data)[i];
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__global__ void row_scales_kernel(ScaleView s, int64_t out_rows, float* out) {
  for (int64_t r = first_index(); r < out_rows; r += stride())
    out[r] = r < s.rows ? scale_at(s, 1, r, 0) : 1.0f;
}

// out[kb * out_rows + r]: one float per (row, 128-column tile), rows contiguous.
__global__ void vec128_scales_kernel(ScaleView s, int64_t out_rows, int64_t k_blocks, float* out) {
  const int64_t n = k_blocks * out_rows;
  const int64_t grid_cols = grid_cols_of(s);
  for (int64_t i = first_index(); i < n; i += stride()) {
    const int64_t kb = i / out_rows, r = i % out_rows;
    out[i] = r < s.rows ? scale_at(s, grid_cols, r, kb * 128) : 1.0f;
  }
}

// out[rb * l4 + kb]: one float per 128x128 block, K blocks contiguous, padded to l4 with 0.
__global__ void blk128_scales_kernel(ScaleView s, int64_t k_blocks, int64_t l4, float* out) {
  const int64_t row_blocks = (s.rows + 127) / 128;
  const int64_t n = row_blocks * l4;
  const int64_t grid_cols = grid_cols_of(s);
  for (int64_t i = first_index(); i < n; i += stride()) {
    const int64_t rb = i / l4, kb = i % l4;
    out[i] = kb < k_blocks ? scale_at(s, grid_cols, rb * 128, kb * 128) : 0.0f;
  }
}

__global__ void dequantize_kernel(const uint8_t* x, bool e5m2, ScaleView s, void* out,
                                  bool out_bf16) {
  const int64_t n = s.rows * s.k;
  const int64_t grid_cols = grid_cols_of(s);
  for (int64_t i = first_index(); i < n; i += stride()) {
    const int64_t r = i / s.k, c = i % s.k;
    const float v = e5m2 ? e5m2_to_f32(x[i]) : e4m3_to_f32(x[i]);
    const float scaled = __fmul_rn(v, scale_at(s, grid_cols, r, c));
    if (out_bf16) {
      static_cast<uint16_t*>(out)[i] = f32_to_bf16(scaled);
    } else {
      static_cast<float*>(out)[i] = scaled;
    }
  }
}

__device__ __forceinline__ float load_c(const void* c, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(c)[i]) : static_cast<const float*>(c)[i];
}
__device__ __forceinline__ void store_c(void* c, bool bf16, int64_t i, float v) {
  if (bf16) {
    static_cast<uint16_t*>(c)[i] = f32_to_bf16(v);
  } else {
    static_cast<float*>(c)[i] = v;
  }
}

// The CPU's epilogue order (gemm_fp8_cpu.cpp): v = acc, then v + beta * old, each rounded.
__global__ void store_accumulator_kernel(const float* acc, void* c, bool c_bf16, float beta,
                                         int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride()) {
    float v = acc[i];
    if (beta != 0.0f) v = __fadd_rn(v, __fmul_rn(beta, load_c(c, c_bf16, i)));
    store_c(c, c_bf16, i, v);
  }
}

__global__ void scale_c_kernel(void* c, bool c_bf16, float beta, int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride()) {
    store_c(c, c_bf16, i, beta == 0.0f ? 0.0f : __fmul_rn(beta, load_c(c, c_bf16, i)));
  }
}

}  // namespace

void launch_row_scales(const ScaleView& s, int64_t out_rows, float* out) {
  if (out_rows == 0) return;
  launch_kernel(row_scales_kernel, blocks_for(out_rows, kGemmThreads), kGemmThreads, 0, stream(), s,
                out_rows, out);
  OCTET_CUDA_CHECK_LAUNCH("gemm");
}

void launch_vec128_scales(const ScaleView& s, int64_t out_rows, float* out) {
  const int64_t k_blocks = (s.k + 127) / 128;
  if (out_rows == 0 || k_blocks == 0) return;
  launch_kernel(vec128_scales_kernel, blocks_for(k_blocks * out_rows, kGemmThreads), kGemmThreads,
                0, stream(), s, out_rows, k_blocks, out);
  OCTET_CUDA_CHECK_LAUNCH("gemm");
}

void launch_blk128_scales(const ScaleView& s, float* out) {
  const int64_t k_blocks = (s.k + 127) / 128;
  const int64_t l4 = (k_blocks + 3) / 4 * 4;
  const int64_t n = (s.rows + 127) / 128 * l4;
  if (n == 0) return;
  launch_kernel(blk128_scales_kernel, blocks_for(n, kGemmThreads), kGemmThreads, 0, stream(), s,
                k_blocks, l4, out);
  OCTET_CUDA_CHECK_LAUNCH("gemm");
}

void launch_dequantize_operand(const uint8_t* x, bool e5m2, const ScaleView& s, void* out,
                               bool out_bf16) {
  const int64_t n = s.rows * s.k;
  if (n == 0) return;
  launch_kernel(dequantize_kernel, blocks_for(n, kGemmThreads), kGemmThreads, 0, stream(), x, e5m2,
                s, out, out_bf16);
  OCTET_CUDA_CHECK_LAUNCH("gemm");
}

void launch_store_accumulator(const float* acc, void* c, bool c_bf16, float beta, int64_t n) {
  if (n == 0) return;
  launch_kernel(store_accumulator_kernel, blocks_for(n, kGemmThreads), kGemmThreads, 0, stream(),
                acc, c, c_bf16, beta, n);
  OCTET_CUDA_CHECK_LAUNCH("gemm");
}

void launch_scale_c(void* c, bool c_bf16, float beta, int64_t n) {
  if (n == 0) return;
  launch_kernel(scale_c_kernel, blocks_for(n, kGemmThreads), kGemmThreads, 0, stream(), c, c_bf16,
                beta, n);
  OCTET_CUDA_CHECK_LAUNCH("gemm");
}

}  // namespace octet::kernels::cuda
