// kernels/cuda/transpose.cu: out-of-place 2-D transpose through shared-memory tiles.
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;

// One 32x32 tile per block; the +1 column avoids shared-memory bank conflicts.
template <typename T>
__global__ void transpose_kernel(const T* src, T* dst, int64_t rows, int64_t cols) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
    const int64_t c = c0 + j, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][j];
  }
}

template <typename T>
void launch(const Tensor& src, const Tensor& dst) {
  const int64_t rows = src.rows(), cols = src.cols();
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  OCTET_CHECK(grid.y <= 65535, "transpose", src.str(), " has too many rows for one launch");
  launch_kernel(transpose_kernel<T>, grid, dim3(kTile, kRowsPerPass), 0, stream(),
                src.as<const T>(), dst.as<T>(), rows, cols);
  OCTET_CUDA_CHECK_LAUNCH("transpose");
}

}  // namespace

void transpose(const Tensor& src, const Tensor& dst) {
  OCTET_CUDA_CHECK("transpose", cudaSetDevice(src.device.index));
  switch (dtype_size(src.dtype)) {
    case 1:
      return launch<uint8_t>(src, dst);
    case 2:
      return launch<uint16_t>(src, dst);
    case 4:
      return launch<uint32_t>(src, dst);
    default:
      OCTET_FAIL("transpose", "no CUDA transpose for ", dtype_size(src.dtype), "-byte elements");
  }
}

}  // namespace octet::kernels::cuda
