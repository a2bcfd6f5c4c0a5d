// kernels/cuda/convert.cu: element-wise dtype conversion on CUDA devices, with the
// same scalar routines as the CPU (core/convert.h), so the bits agree by construction.
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace octet::kernels::cuda {
namespace {

// Reads element i of a float-like array as f32 (exact for every source dtype).
__device__ __forceinline__ float load_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::e4m3:
      return e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    default:
      return e5m2_to_f32(static_cast<const uint8_t*>(p)[i]);
  }
}

// Writes an f32 as element i of the destination dtype (rounded to nearest even).
__device__ __forceinline__ void store_f32(void* p, DType t, int64_t i, float x, bool saturate) {
  const Overflow o = saturate ? Overflow::saturate : Overflow::nonfinite;
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = x;
      break;
    case DType::bf16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(x);
      break;
    case DType::f16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(x);
      break;
    case DType::e4m3:
      static_cast<uint8_t*>(p)[i] = f32_to_e4m3(x, o);
      break;
    default:
      static_cast<uint8_t*>(p)[i] = f32_to_e5m2(x, o);
      break;
  }
}

// Every supported pair goes through f32, which is exact for all source dtypes,
// so one kernel serves all of them; the dtype switches are uniform across the grid.
__global__ void convert_kernel(const void* src, DType from, void* dst, DType to, int64_t n,
                               bool saturate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    store_f32(dst, to, i, load_f32(src, from, i), saturate);
  }
}

}  // namespace

void convert(const Tensor& src, const Tensor& dst, Overflow overflow) {
  OCTET_CUDA_CHECK("convert", cudaSetDevice(src.device.index));
  if (src.dtype == dst.dtype) {
    OCTET_CUDA_CHECK("convert", cudaMemcpyAsync(dst.data, src.data, src.nbytes(),
                                                cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  constexpr int kThreads = 256;
  const int64_t n = src.numel();
  launch_kernel(convert_kernel, blocks_for(n, kThreads), kThreads, 0, stream(), src.data, src.dtype,
                dst.data, dst.dtype, n, overflow == Overflow::saturate);
  OCTET_CUDA_CHECK_LAUNCH("convert");
}

}  // namespace octet::kernels::cuda
