// kernels/cuda/elementwise.cu: the residual add on CUDA devices, 8 elements a thread
// with 16-byte accesses; the same bits as the CPU kernel (one fp32 addition, rounded once).
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_io.cuh"

namespace octet::kernels::cuda {
namespace {

constexpr int kAddThreads = 256;

// out may be a or b: every element is read and written by one thread, reads first.
__global__ void add_kernel(const void* a, const void* b, void* out, bool bf16, int64_t n,
                           bool vec) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = g * kGroup;
    float va[kGroup], vb[kGroup];
    load8(a, bf16, i, n, vec, va);
    load8(b, bf16, i, n, vec, vb);
#pragma unroll
    for (int k = 0; k < kGroup; ++k) va[k] = __fadd_rn(va[k], vb[k]);
    store8(out, bf16, i, n, vec, va);
  }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  OCTET_CUDA_CHECK("add", cudaSetDevice(a.device.index));
  const int64_t n = a.numel();
  const bool vec = aligned16(a.data) && aligned16(b.data) && aligned16(out.data);
  launch_kernel(add_kernel, blocks_for((n + kGroup - 1) / kGroup, kAddThreads), kAddThreads, 0,
                stream(), a.data, b.data, out.data, a.dtype == DType::bf16, n, vec);
  OCTET_CUDA_CHECK_LAUNCH("add");
}

}  // namespace octet::kernels::cuda
