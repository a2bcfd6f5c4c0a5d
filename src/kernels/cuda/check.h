// kernels/cuda/check.h: turning CUDA runtime errors into octet::Error, and the
// launch-size helper every elementwise kernel uses.
// defines: OCTET_CUDA_CHECK, OCTET_CUDA_CHECK_LAUNCH, blocks_for, stream
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/device.h"
#include "core/error.h"

#define OCTET_CUDA_CHECK(op, expr)                               \
  do {                                                           \
    const cudaError_t octet_status_ = (expr);                    \
    OCTET_CHECK(octet_status_ == cudaSuccess, op, #expr,         \
                " failed: ", cudaGetErrorString(octet_status_)); \
  } while (0)

// After a launch: configuration errors surface here (execution errors at the next sync).
#define OCTET_CUDA_CHECK_LAUNCH(op) OCTET_CUDA_CHECK(op, cudaGetLastError())

namespace octet::kernels::cuda {

// The stream every kernel launch, copy and cuBLASLt call goes on (octet::cuda_stream()).
inline cudaStream_t stream() {
  return static_cast<cudaStream_t>(octet::cuda_stream());
}

// Grid size for `n` items at `per_block` items a block, capped so that grid-stride
// loops cover the rest.
inline unsigned blocks_for(int64_t n, int per_block) {
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

}  // namespace octet::kernels::cuda
