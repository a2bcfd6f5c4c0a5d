// kernels/cuda/quantize.cu: FP8 quantization on CUDA devices: picks the kernel for
// the scale grid (quantize_tensor.cu, quantize_tiles.cu; a plain one-block-per-scale-
// block kernel for grids no recipe uses), plus dequantize and the delayed-scaling
// update of every tensor of a model in one launch. The scalar routines are those of
// the CPU (core/convert.h, kernels/quantize.h), so both devices produce the same bits.
//
// OCTET_CUDA_FP8_CVT=software makes the saturating conversions use the scalar
// encoder instead of the hardware cvt.rn.satfinite (the same bits; for testing both).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quantize_device.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace octet::kernels::cuda {
namespace {

using qz::kThreads;

__device__ qz::Scratch g_scratch;  // zero-initialised; see qz::Scratch

constexpr int kMaxDevices = 64;

// The device address of g_scratch on `device` (the current device), looked up once.
qz::Scratch* scratch(int device) {
  static std::atomic<qz::Scratch*> cache[kMaxDevices] = {};
  OCTET_CHECK(device >= 0 && device < kMaxDevices, "quantize", "CUDA device index ", device,
              " is out of range");
  qz::Scratch* p = cache[device].load(std::memory_order_acquire);
  if (p == nullptr) {
    void* address = nullptr;
    OCTET_CUDA_CHECK("quantize", cudaGetSymbolAddress(&address, g_scratch));
    p = static_cast<qz::Scratch*>(address);
    cache[device].store(p, std::memory_order_release);
  }
  return p;
}

bool hardware_cvt() {
  const char* v = std::getenv("OCTET_CUDA_FP8_CVT");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "hardware") return true;
  OCTET_CHECK(std::string_view(v) == "software", "quantize",
              "OCTET_CUDA_FP8_CVT must be 'hardware' or 'software', got '", v, "'");
  return false;
}

// x, or xᵀ read in place: element (r, c) is x[c * rows + r] for x stored [cols, rows].
struct Matrix {
  const void* x;
  bool bf16;
  int64_t rows, cols;
  bool transposed;
  __device__ uint32_t bits(int64_t r, int64_t c) const {
    const int64_t i = transposed ? c * rows + r : r * cols + c;
    return bf16 ? uint32_t{static_cast<const uint16_t*>(x)[i]} << 16
                : static_cast<const uint32_t*>(x)[i];
  }
};

// Any other grid: one CUDA block per scale block: its amax, then the cast, reading x
// (or xᵀ, strided) element by element. Correct for every grid; no recipe uses it.
__global__ void __launch_bounds__(kThreads)
    generic_kernel(Matrix m, uint8_t* data, void* scale_inv, int64_t br, int64_t bc,
                   int64_t grid_cols, qz::Codec codec, qz::Finish finish, bool count) {
  __shared__ uint32_t s_warp[kThreads / 32];
  const int64_t b = blockIdx.x;
  const int64_t r0 = (b / grid_cols) * br, c0 = (b % grid_cols) * bc;
  const int64_t w = min(c0 + bc, m.cols) - c0, n = (min(r0 + br, m.rows) - r0) * w;
  uint32_t local = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    local = max(local, m.bits(r0 + i / w, c0 + i % w) & 0x7FFFFFFFu);
  }
  uint32_t amax = qz::warp_max(local);
  if (threadIdx.x % 32 == 0) s_warp[threadIdx.x / 32] = amax;
  __syncthreads();
  for (int k = 0; k < kThreads / 32; ++k) amax = max(amax, s_warp[k]);
  const float scale = qz::block_scale_of(amax, codec, scale_inv, b, threadIdx.x == 0);
  unsigned saturated = 0, flushed = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t r = r0 + i / w, c = c0 + i % w;
    const uint32_t xb[4] = {m.bits(r, c), 0, 0, 0};
    const uint32_t code = count ? qz::encode4<true>(xb, scale, codec, saturated, flushed)
                                : qz::encode4<false>(xb, scale, codec, saturated, flushed);
    data[r * m.cols + c] = static_cast<uint8_t>(code);
  }
  qz::block_finish(finish, codec, local, saturated, flushed);
}

void launch_generic(const Matrix& m, uint8_t* data, void* scale_inv, ScaleGrid grid,
                    const qz::Codec& codec, const qz::Finish& finish, bool count) {
  const int64_t br = grid.block_rows == 0 ? m.rows : grid.block_rows;
  const int64_t bc = grid.block_cols == 0 ? m.cols : grid.block_cols;
  const int64_t grid_rows = (m.rows + br - 1) / br, grid_cols = (m.cols + bc - 1) / bc;
  OCTET_CHECK(grid_rows * grid_cols <= 0x7FFFFFFF, "quantize", "too many scale blocks (",
              grid_rows * grid_cols, ") for one launch");
  launch_kernel(generic_kernel, static_cast<unsigned>(grid_rows * grid_cols), kThreads, 0, stream(),
                m, data, scale_inv, br, bc, grid_cols, codec, finish, count);
  OCTET_CUDA_CHECK_LAUNCH("quantize");
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
    const float v = __fmul_rn(e5m2 ? e5m2_to_f32(data[i]) : e4m3_to_f32(data[i]), s);
    if (y_bf16) {
      static_cast<uint16_t*>(y)[i] = f32_to_bf16(v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
  }
}

// One thread per tensor: every tensor of a model in one launch.
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

bool is_tile_width(int64_t n) {
  return n == 16 || n == 32 || n == 64 || n == 128;
}

}  // namespace

void quantize(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& o) {
  OCTET_CUDA_CHECK("quantize", cudaSetDevice(x.device.index));
  claim_static_scratch("quantize");
  qz::Call c{};
  c.x = x.data;
  c.bf16 = x.dtype == DType::bf16;
  c.rows = x.rows();
  c.cols = x.cols();
  c.data = out.data.as<uint8_t>();
  c.scale_inv = out.scale_inv.data;
  if (!out.data_t.empty()) {
    c.data_t = out.data_t.as<uint8_t>();
    c.scale_inv_t = out.scale_inv_t.data;
  }
  c.amax = out.amax.empty() ? nullptr : out.amax.as<float>();
  c.counts = out.counts.empty() ? nullptr : out.counts.as<int>();
  c.given = o.given_scale.empty() ? nullptr : o.given_scale.as<const float>();
  const bool saturate = o.overflow == Overflow::saturate;
  c.codec = qz::Codec{static_cast<float>(dtype_info(out.data.dtype).max_finite),
                      out.data.dtype == DType::e5m2,
                      saturate,
                      saturate && hardware_cvt(),
                      o.grid.e8m0,
                      o.power_of_two_scales};
  c.scratch = scratch(x.device.index);
  const ScaleGrid g = o.grid;

  if (g.block_rows == 0 && g.block_cols == 0) {
    // Current scaling: the amax pass, then the cast from the tensor's end (in L2).
    const float* scale = c.given;
    if (scale == nullptr) {
      qz::launch_amax(c);
      scale = &c.scratch->scale;
    }
    if (c.data_t != nullptr) {
      qz::launch_tiles(c, qz::TileMode::tensor, 0, scale, c.given == nullptr);
    } else {
      qz::launch_tensor_cast(c, scale, c.given == nullptr);
    }
    return;
  }
  if (g.block_rows == 1 && g.block_cols == 0) {
    if (c.data_t != nullptr) {
      qz::launch_rows_transposed(c);
    } else {
      qz::launch_rows(c);
    }
    return;
  }
  if (g.block_rows == 1 && is_tile_width(g.block_cols)) {
    qz::launch_tiles(c, qz::TileMode::tiles, static_cast<int>(g.block_cols), nullptr, false);
    return;
  }
  if (g.block_rows == 128 && g.block_cols == 128 && !g.e8m0) {
    qz::launch_tiles(c, qz::TileMode::block, 0, nullptr, false);
    return;
  }
  qz::Finish finish;
  finish.scratch = c.scratch;
  finish.amax = c.amax;
  finish.counts = c.counts;
  const Matrix m{c.x, c.bf16, c.rows, c.cols, false};
  launch_generic(m, c.data, c.scale_inv, g, c.codec, finish, c.counts != nullptr);
  if (c.data_t != nullptr) {
    const Matrix mt{c.x, c.bf16, c.cols, c.rows, true};
    launch_generic(mt, c.data_t, c.scale_inv_t, g, c.codec, qz::Finish{}, false);
  }
}

void dequantize(const Tensor& data, const Tensor& scale_inv, ScaleGrid grid, const Tensor& y) {
  OCTET_CUDA_CHECK("dequantize", cudaSetDevice(data.device.index));
  const int64_t rows = data.rows(), cols = data.cols();
  const int64_t grid_cols =
      grid.block_cols == 0 ? 1 : (cols + grid.block_cols - 1) / grid.block_cols;
  launch_kernel(dequantize_kernel, blocks_for(data.numel(), kThreads), kThreads, 0, stream(),
                data.as<const uint8_t>(), data.dtype == DType::e5m2, scale_inv.data, grid.e8m0,
                rows, cols, grid.block_rows, grid.block_cols, grid_cols, y.data,
                y.dtype == DType::bf16);
  OCTET_CUDA_CHECK_LAUNCH("dequantize");
}

void delayed_scaling_update(const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                            const Tensor& fp8_max, const Tensor& nonfinite, AmaxReduce reduce,
                            int margin) {
  OCTET_CUDA_CHECK("delayed_scaling_update", cudaSetDevice(history.device.index));
  const int64_t n = history.rows();
  launch_kernel(delayed_update_kernel, blocks_for(n, kThreads), kThreads, 0, stream(),
                history.as<float>(), n, history.cols(), scale.as<float>(), scale_inv.as<float>(),
                fp8_max.as<const float>(), nonfinite.empty() ? nullptr : nonfinite.as<int>(),
                reduce == AmaxReduce::max, margin);
  OCTET_CUDA_CHECK_LAUNCH("delayed_scaling_update");
}

}  // namespace octet::kernels::cuda
