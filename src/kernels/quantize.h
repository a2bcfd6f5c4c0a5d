// kernels/quantize.h: one pass from a high-precision tensor to FP8 data with its
// scale_inv (per tensor, per row, per 1xN tile, per NxN block, or MX with E8M0),
// the transposed FP8 copy or (CPU) the codes widened to bf16 when asked, the amax and
// the saturation counts; and the way back (dequantize) for tests and debugging.
// defines: ScaleGrid, QuantizeOptions, QuantizeOutputs, quantize, dequantize,
//          scale_from_amax, e8m0_scale_inv_from_amax, scale_grid_shape
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "core/tensor.h"

namespace octet::kernels {

// The blocks of a stored [rows, cols] matrix that share one scale. 0 means "the
// whole dimension": {0, 0} per tensor, {1, 0} per row, {1, 128} 1x128 tiles,
// {128, 128} blocks, {1, 32} with e8m0 = MX.
struct ScaleGrid {
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  bool e8m0 = false;  // scale_inv stored as E8M0 powers of two (MX), else as f32

  friend bool operator==(const ScaleGrid&, const ScaleGrid&) = default;
};

// Shape of the scale_inv tensor for a [rows, cols] matrix: [ceil(rows/br), ceil(cols/bc)]
// (a dimension of 0 counts as the whole dimension).
Shape scale_grid_shape(int64_t rows, int64_t cols, ScaleGrid grid);

// The scale that maps amax onto the FP8 range, the one formula every mode uses:
// scale = fp8_max / amax / 2^margin; amax == 0 or non-finite gives 1 (the caller
// reports a non-finite amax); a scale that overflows float becomes FLT_MAX;
// power_of_two rounds the scale down to a power of two, so nothing saturates.
OCTET_HD float scale_from_amax(float amax, float fp8_max, int margin, bool power_of_two) {
  if (!(amax > 0.0f) || !(amax <= 3.402823466e38f)) return 1.0f;
  float scale = fp8_max / amax;
  if (margin != 0) scale = scale * f32_from_bits(static_cast<uint32_t>(127 - margin) << 23);
  if (!(scale <= 3.402823466e38f)) scale = 3.402823466e38f;
  if (power_of_two) scale = f32_from_bits(f32_bits(scale) & 0xFF800000u);  // keep the exponent
  return scale;
}

// MX: the power-of-two scale_inv, rounded up so that amax / scale_inv <= fp8_max
// (no block overflows); E8M0 code. amax == 0 or non-finite gives 2^0.
OCTET_HD uint8_t e8m0_scale_inv_from_amax(float amax, float fp8_max) {
  if (!(amax >= 0x1p-126f) || !(amax <= 3.402823466e38f)) {
    // Zero, subnormal (amax / 2^-127 < 2 fits any format) or non-finite.
    return amax > 0.0f && amax < 0x1p-126f ? 0 : 127;
  }
  // k = ceil(log2(amax / fp8_max)) computed exactly: start from the difference of
  // the binary exponents and step up once if fp8_max * 2^k is still below amax.
  int k = static_cast<int>(f32_bits(amax) >> 23) - static_cast<int>(f32_bits(fp8_max) >> 23);
  const int half = k / 2;
  const float pow_a = f32_from_bits(static_cast<uint32_t>(127 + half) << 23);
  const float pow_b = f32_from_bits(static_cast<uint32_t>(127 + k - half) << 23);
  if (amax > fp8_max * pow_a * pow_b) ++k;  // exact: products of powers of two
  const int e = k + 127;
  return static_cast<uint8_t>(e < 0 ? 0 : (e > 254 ? 254 : e));
}

struct QuantizeOptions {
  ScaleGrid grid;                    // also used, on xᵀ, for the transposed copy
  bool power_of_two_scales = false;  // f32 scales only
  Overflow overflow = Overflow::saturate;
  // Per-tensor delayed scaling: an f32[1] scale (on x's device) to use instead of
  // one computed from this tensor's amax. Empty: computed (current scaling).
  Tensor given_scale;
  // Per-tensor grids, CPU only: x's amax as its producer took it (an f32[1] on the CPU, max |x|,
  // NaN where x holds one; kernels/swiglu.h writes one), used instead of the quantize's own pass
  // over x. It must be x's: the scale, the codes and `amax` all follow it.
  Tensor given_amax;
};

// What quantize() writes; every tensor but data and scale_inv may be empty (not wanted).
struct QuantizeOutputs {
  Tensor data;         // e4m3|e5m2 [R, C]
  Tensor scale_inv;    // f32 (or e8m0 for MX) scale_grid_shape(R, C, grid)
  Tensor data_t;       // e4m3|e5m2 [C, R]: xᵀ quantized with the same grid applied to xᵀ
  Tensor scale_inv_t;  // scale_grid_shape(C, R, grid)
  Tensor amax;         // f32[1]: max |x| (NaN or Inf when x holds one)
  Tensor counts;       // i32[2]: {values that saturated, nonzero values flushed to zero} in data
  // bf16 [R, C], CPU only: data's values (the codes', unscaled) widened to bf16, exact for
  // both formats; written in the same pass as data under per-tensor scales. It is the
  // operand the CPU's GEMMs multiply, read in either orientation (fp8::QuantizedTensor).
  Tensor wide;
  // CPU only: data_t holds xᵀ's codes stored like x, [R, C] (xᵀ's element (i, j) at data_t[j,
  // i]), scale_inv_t as above, for the grids whose xᵀ blocks are columns of x (1xN: row, 1x128,
  // MX): x encoded down its columns with no transpose, for a GEMM that reads A stored [K, M] or
  // B stored [K, N] (GemmOptions::trans_a, trans_b false).
  bool data_t_in_x_layout = false;
};

// Quantizes x (f32 or bf16, seen as [x.rows(), x.cols()]) as described above.
// The transposed copy has its own scales for row, 1xN and MX grids (its rows are
// x's columns); for per-tensor and NxN grids they equal the transpose of data's.
void quantize(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& options);

// y = data * scale_inv per block, in y's dtype (f32 or bf16).
void dequantize(const Tensor& data, const Tensor& scale_inv, ScaleGrid grid, const Tensor& y);

}  // namespace octet::kernels
