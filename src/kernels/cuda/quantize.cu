// kernels/cuda/quantize.cu: FP8 quantization, dequantization and the delayed-scaling
// update on CUDA devices, with the scalar routines of the CPU (core/convert.h,
// kernels/quantize.h), so both devices produce the same bits. These are the
// straightforward kernels; the fused one-pass variants replace them with numbers.
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const void* x, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
}

// |x| as ordered bits: for non-negative floats (and NaN above Inf) unsigned order is
// float order, so atomicMax on the bits is a float max in which NaN wins.
__device__ __forceinline__ unsigned abs_bits(float v) {
  return f32_bits(v) & 0x7FFFFFFFu;
}

struct Matrix {
  const void* x;
  bool bf16;
  int64_t rows, cols;
  bool transposed;  // read xᵀ: element (r, c) is x[c * rows + r] where x is [cols, rows]
  __device__ float at(int64_t r, int64_t c) const {
    return transposed ? load(x, bf16, c * rows + r) : load(x, bf16, r * cols + c);
  }
};

struct Target {
  uint8_t* data;
  void* scale_inv;  // f32 or e8m0 per block
  int* counts;      // may be null
  bool e5m2, saturate, e8m0, pow2;
  float fp8_max;
};

__device__ __forceinline__ void quantize_one(const Target& t, float v, float scale, uint8_t* out) {
  const float scaled = v * scale;
  const Overflow o = t.saturate ? Overflow::saturate : Overflow::nonfinite;
  const uint8_t q = t.e5m2 ? f32_to_e5m2(scaled, o) : f32_to_e4m3(scaled, o);
  *out = q;
  if (t.counts != nullptr) {
    const bool finite = abs_bits(v) < 0x7F800000u;
    const uint8_t unsat = t.e5m2 ? f32_to_e5m2(scaled, Overflow::nonfinite)
                                 : f32_to_e4m3(scaled, Overflow::nonfinite);
    const bool overflowed = t.e5m2 ? (unsat & 0x7Fu) >= 0x7Cu : (unsat & 0x7Fu) == 0x7Fu;
    if (finite && overflowed) atomicAdd(&t.counts[0], 1);
    if (finite && v != 0.0f && (q & 0x7Fu) == 0) atomicAdd(&t.counts[1], 1);
  }
}

// One CUDA block per scale block: reduce the block's amax, then quantize it.
__global__ void quantize_blocks(Matrix m, Target t, int64_t br, int64_t bc, int64_t grid_cols) {
  const int64_t b = blockIdx.x;
  const int64_t r0 = (b / grid_cols) * br, c0 = (b % grid_cols) * bc;
  const int64_t r1 = min(r0 + br, m.rows), c1 = min(c0 + bc, m.cols);
  const int64_t w = c1 - c0, n = (r1 - r0) * w;
  __shared__ unsigned block_amax;
  if (threadIdx.x == 0) block_amax = 0;
  __syncthreads();
  unsigned local = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    local = max(local, abs_bits(m.at(r0 + i / w, c0 + i % w)));
  }
  atomicMax(&block_amax, local);
  __syncthreads();
  const float amax = f32_from_bits(block_amax);
  float scale;
  if (t.e8m0) {
    const uint8_t e = e8m0_scale_inv_from_amax(amax, t.fp8_max);
    scale = 1.0f / e8m0_to_f32(e);  // exact: a power of two in [2^-127, 2^127]
    if (threadIdx.x == 0) static_cast<uint8_t*>(t.scale_inv)[b] = e;
  } else {
    scale = scale_from_amax(amax, t.fp8_max, 0, t.pow2);
    if (threadIdx.x == 0) static_cast<float*>(t.scale_inv)[b] = 1.0f / scale;
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t r = r0 + i / w, c = c0 + i % w;
    quantize_one(t, m.at(r, c), scale, &t.data[r * m.cols + c]);
  }
}

__global__ void amax_kernel(Matrix m, unsigned* amax_bits) {
  const int64_t n = m.rows * m.cols;
  unsigned local = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    local = max(local, abs_bits(load(m.x, m.bf16, i)));
  }
  for (int off = 16; off > 0; off /= 2)
    local = max(local, __shfl_xor_sync(0xFFFFFFFFu, local, off));
  if ((threadIdx.x & 31) == 0) atomicMax(amax_bits, local);
}

// Per tensor: the scale comes from `given_scale` or from the amax gathered in amax_bits.
__global__ void quantize_tensor(Matrix m, Target t, const float* given_scale,
                                const unsigned* amax_bits) {
  const float scale = given_scale != nullptr
                          ? *given_scale
                          : scale_from_amax(f32_from_bits(*amax_bits), t.fp8_max, 0, t.pow2);
  const int64_t n = m.rows * m.cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    quantize_one(t, load(m.x, m.bf16, i), scale, &t.data[i]);
  }
}

// Runs after quantize_tensor: amax_bits may alias scale_inv, so scale_inv is written last.
__global__ void finish_tensor(Target t, const float* given_scale, unsigned* amax_bits,
                              float* amax_out) {
  const float amax = f32_from_bits(*amax_bits);
  const float scale =
      given_scale != nullptr ? *given_scale : scale_from_amax(amax, t.fp8_max, 0, t.pow2);
  if (amax_out != nullptr) *amax_out = amax;
  static_cast<float*>(t.scale_inv)[0] = 1.0f / scale;
}

__global__ void dequantize_kernel(const uint8_t* data, bool e5m2, const void* scale_inv, bool e8m0,
                                  int64_t rows, int64_t cols, int64_t br, int64_t bc,
                                  int64_t grid_cols, void* y, bool y_bf16) {
  const int64_t n = rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int64_t b = (br == 0 ? 0 : r / br) * grid_cols + (bc == 0 ? 0 : c / bc);
    const float s = e8m0 ? e8m0_to_f32(static_cast<const uint8_t*>(scale_inv)[b])
                         : static_cast<const float*>(scale_inv)[b];
    const float v = (e5m2 ? e5m2_to_f32(data[i]) : e4m3_to_f32(data[i])) * s;
    if (y_bf16) {
      static_cast<uint16_t*>(y)[i] = f32_to_bf16(v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
  }
}

__global__ void delayed_update_kernel(float* history, int64_t n, int64_t len, float* scale,
                                      float* scale_inv, const float* fp8_max, int* nonfinite,
                                      bool reduce_max, int margin) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float* row = history + i * len;
  float amax = row[0];
  if (reduce_max) {
    for (int64_t j = 1; j < len; ++j) amax = (isnan(row[j]) || row[j] > amax) ? row[j] : amax;
  }
  const float current = row[0];
  for (int64_t j = 0; j + 1 < len; ++j) row[j] = row[j + 1];
  row[len - 1] = current;
  row[0] = 0.0f;
  if (!isfinite(amax)) {
    if (nonfinite != nullptr) atomicAdd(nonfinite, 1);
    return;
  }
  if (amax > 0.0f) scale[i] = scale_from_amax(amax, fp8_max[i], margin, false);
  scale_inv[i] = 1.0f / scale[i];
}

Target make_target(const Tensor& data, const Tensor& scale_inv, int* counts,
                   const QuantizeOptions& o) {
  return Target{data.as<uint8_t>(),
                scale_inv.data,
                counts,
                data.dtype == DType::e5m2,
                o.overflow == Overflow::saturate,
                o.grid.e8m0,
                o.power_of_two_scales,
                static_cast<float>(dtype_info(data.dtype).max_finite)};
}

void quantize_grid(const Matrix& m, const Target& t, ScaleGrid grid) {
  const int64_t br = grid.block_rows == 0 ? m.rows : grid.block_rows;
  const int64_t bc = grid.block_cols == 0 ? m.cols : grid.block_cols;
  const int64_t grid_rows = (m.rows + br - 1) / br, grid_cols = (m.cols + bc - 1) / bc;
  OCTET_CHECK(grid_rows * grid_cols <= 0x7FFFFFFF, "quantize", "too many scale blocks");
  quantize_blocks<<<static_cast<unsigned>(grid_rows * grid_cols), kThreads, 0, stream()>>>(
      m, t, br, bc, grid_cols);
  OCTET_CUDA_CHECK_LAUNCH("quantize");
}

}  // namespace

void quantize(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& o) {
  OCTET_CUDA_CHECK("quantize", cudaSetDevice(x.device.index));
  const Matrix m{x.data, x.dtype == DType::bf16, x.rows(), x.cols(), false};
  int* counts = out.counts.empty() ? nullptr : out.counts.as<int>();
  if (counts != nullptr)
    OCTET_CUDA_CHECK("quantize", cudaMemsetAsync(counts, 0, 2 * sizeof(int), stream()));
  const Target t = make_target(out.data, out.scale_inv, counts, o);
  const bool per_tensor = o.grid.block_rows == 0 && o.grid.block_cols == 0;
  const int64_t n = x.numel();

  if (per_tensor) {
    // The amax is gathered in scale_inv's slot (no scratch memory), which is
    // overwritten with 1/scale once every element has been quantized.
    auto* amax_bits = static_cast<unsigned*>(out.scale_inv.data);
    const float* given = o.given_scale.empty() ? nullptr : o.given_scale.as<const float>();
    OCTET_CUDA_CHECK("quantize", cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream()));
    amax_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(m, amax_bits);
    quantize_tensor<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(m, t, given, amax_bits);
    finish_tensor<<<1, 1, 0, stream()>>>(t, given, amax_bits,
                                         out.amax.empty() ? nullptr : out.amax.as<float>());
    OCTET_CUDA_CHECK_LAUNCH("quantize");
  } else {
    quantize_grid(m, t, o.grid);
    if (!out.amax.empty()) {
      auto* amax_bits = static_cast<unsigned*>(out.amax.data);
      OCTET_CUDA_CHECK("quantize", cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream()));
      amax_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(m, amax_bits);
      OCTET_CUDA_CHECK_LAUNCH("quantize");
    }
  }
  if (out.data_t.empty()) return;
  const bool symmetric = per_tensor || o.grid.block_rows == o.grid.block_cols;
  if (symmetric) {
    // Per tensor and NxN blocks: the transposed copy is the transpose of the data,
    // its scales the transpose of the scale grid.
    transpose(out.data, out.data_t);
    transpose(out.scale_inv.reshaped(scale_grid_shape(x.rows(), x.cols(), o.grid)),
              out.scale_inv_t.reshaped(scale_grid_shape(x.cols(), x.rows(), o.grid)));
  } else {
    const Matrix mt{x.data, m.bf16, x.cols(), x.rows(), true};
    quantize_grid(mt, make_target(out.data_t, out.scale_inv_t, nullptr, o), o.grid);
  }
}

void dequantize(const Tensor& data, const Tensor& scale_inv, ScaleGrid grid, const Tensor& y) {
  OCTET_CUDA_CHECK("dequantize", cudaSetDevice(data.device.index));
  const int64_t rows = data.rows(), cols = data.cols();
  const int64_t grid_cols =
      grid.block_cols == 0 ? 1 : (cols + grid.block_cols - 1) / grid.block_cols;
  dequantize_kernel<<<blocks_for(data.numel(), kThreads), kThreads, 0, stream()>>>(
      data.as<const uint8_t>(), data.dtype == DType::e5m2, scale_inv.data, grid.e8m0, rows, cols,
      grid.block_rows, grid.block_cols, grid_cols, y.data, y.dtype == DType::bf16);
  OCTET_CUDA_CHECK_LAUNCH("dequantize");
}

void delayed_scaling_update(const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                            const Tensor& fp8_max, const Tensor& nonfinite, AmaxReduce reduce,
                            int margin) {
  OCTET_CUDA_CHECK("delayed_scaling_update", cudaSetDevice(history.device.index));
  const int64_t n = history.rows();
  delayed_update_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(
      history.as<float>(), n, history.cols(), scale.as<float>(), scale_inv.as<float>(),
      fp8_max.as<const float>(), nonfinite.empty() ? nullptr : nonfinite.as<int>(),
      reduce == AmaxReduce::max, margin);
  OCTET_CUDA_CHECK_LAUNCH("delayed_scaling_update");
}

}  // namespace octet::kernels::cuda
