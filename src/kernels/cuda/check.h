// kernels/cuda/check.h: turning CUDA runtime errors into octet::Error, and the
// launch-size helper every elementwise kernel uses.
// defines: OCTET_CUDA_CHECK, OCTET_CUDA_CHECK_LAUNCH, check_launch, sync_after_launch,
//          blocks_for, stream
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/device.h"
#include "core/error.h"

#define OCTET_CUDA_CHECK(op, expr)                               \
  do {                                                           \
    const cudaError_t octet_status_ = (expr);                    \
    OCTET_CHECK(octet_status_ == cudaSuccess, op, #expr,         \
                " failed: ", cudaGetErrorString(octet_status_)); \
  } while (0)

// After a launch: configuration errors surface here; execution errors at the next sync,
// or here too when OCTET_CUDA_SYNC=1 (see check_launch).
#define OCTET_CUDA_CHECK_LAUNCH(op) ::octet::kernels::cuda::check_launch(op)

namespace octet::kernels::cuda {

// The stream every kernel launch, copy and cuBLASLt call goes on (octet::cuda_stream()).
inline cudaStream_t stream() {
  return static_cast<cudaStream_t>(octet::cuda_stream());
}

// OCTET_CUDA_SYNC=1 (read once): every launch is followed by a synchronisation of its
// stream and a check, so that a fault names the kernel that caused it instead of
// surfacing at the next copy to the host, steps later. For debugging: it serialises
// the host with the GPU.
inline bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("OCTET_CUDA_SYNC");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

// What OCTET_CUDA_CHECK_LAUNCH does after a launch of `op` on stream().
inline void check_launch(const char* op) {
  OCTET_CUDA_CHECK(op, cudaGetLastError());
  if (!sync_after_launch()) return;
  const cudaError_t status = cudaStreamSynchronize(stream());
  OCTET_CHECK(status == cudaSuccess, op,
              "a kernel of this op failed while running: ", cudaGetErrorString(status),
              " (found by OCTET_CUDA_SYNC=1 right after its launch)");
}

// Grid size for `n` items at `per_block` items a block, capped so that grid-stride
// loops cover the rest.
inline unsigned blocks_for(int64_t n, int per_block) {
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

}  // namespace octet::kernels::cuda
