// kernels/cuda/gemm_kernels.h: the small kernels around the cuBLASLt GEMM of
// gemm_cuda.cpp: scale_inv re-laid into the layouts cuBLASLt's scale modes read, the
// exact dequantization of FP8 operands for scale grids cuBLASLt cannot take, and two
// epilogues. All run on stream() and write only into caller-provided memory.
// Internal to kernels/cuda.
// defines: ScaleView, launch_row_scales, launch_vec128_scales, launch_blk128_scales,
//          launch_dequantize_operand, launch_store_accumulator, launch_scale_c
#pragma once

#include <cstdint>

#include "kernels/quantize.h"

namespace octet::kernels::cuda {

// One FP8 operand's scale_inv as kernels/gemm.h lays it out: f32 (or E8M0 when
// grid.e8m0) on `grid` over the operand as stored, [rows, k]; data == nullptr means 1.
struct ScaleView {
  const void* data;
  ScaleGrid grid;
  int64_t rows, k;
};

// out[r] = scale_inv of row r for r < s.rows, and 1 for the padding rows up to out_rows
// (>= s.rows). Precondition: grid.block_cols == 0 (the grid does not split K: per
// tensor, per row, or per block of rows).
void launch_row_scales(const ScaleView& s, int64_t out_rows, float* out);

// cuBLASLt's VEC128_32F layout for out_rows (>= s.rows, a multiple of 4) rows:
// out[(c / 128) * out_rows + r] = scale_inv(r, c), 1 for the padding rows; the row index
// contiguous ("M-major, M x L" in the cuBLAS documentation). Precondition: grid is
// {1, 128}, f32.
void launch_vec128_scales(const ScaleView& s, int64_t out_rows, float* out);

// cuBLASLt's BLK128x128_32F layout: out[(r / 128) * l4 + c / 128] = scale_inv(r, c),
// the K block index contiguous and padded with zeros to l4 = ceil(ceil(k / 128) / 4) * 4
// ("K-major, L4 x ceil(rows / 128)" in the cuBLAS documentation).
// Precondition: grid is {128, 128}, f32.
void launch_blk128_scales(const ScaleView& s, float* out);

// out [rows, k] = x * scale_inv per element, x e4m3 (or e5m2) [rows, k] row-major;
// out is bf16 when out_bf16 (exact when every scale_inv is a power of two and no
// product leaves bf16's range) and f32 otherwise (one rounding per element).
void launch_dequantize_operand(const uint8_t* x, bool e5m2, const ScaleView& s, void* out,
                               bool out_bf16);

// c[i] = acc[i] + beta * c[i] (c read only when beta != 0), rounded to c's dtype
// (bf16 when c_bf16, else f32), for i < n.
void launch_store_accumulator(const float* acc, void* c, bool c_bf16, float beta, int64_t n);

// c[i] = beta * c[i], or 0 without reading c when beta == 0: a GEMM with K = 0.
void launch_scale_c(void* c, bool c_bf16, float beta, int64_t n);

}  // namespace octet::kernels::cuda
