// kernels/cuda/scratch.cpp: the single-stream guard of the static cross-block scratch
// (see scratch.h).
#include "kernels/cuda/scratch.h"

#include <mutex>

#include "kernels/cuda/check.h"

namespace octet::kernels::cuda {

void claim_static_scratch(const char* op) {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static cudaStream_t owner[kMaxDevices] = {};
  int device = 0;
  OCTET_CUDA_CHECK(op, cudaGetDevice(&device));
  OCTET_CHECK(device >= 0 && device < kMaxDevices, op, "CUDA device index ", device,
              " is out of range");
  const cudaStream_t s = stream();
  const std::lock_guard<std::mutex> lock(mutex);
  if (owner[device] == s) return;
  // The previous owner must be idle: cudaStreamQuery returns cudaSuccess once all of its
  // work has finished, cudaErrorNotReady while some is queued or running.
  const cudaError_t idle = cudaStreamQuery(owner[device]);
  if (idle == cudaErrorNotReady) cudaGetLastError();  // not sticky; keep the state clean
  OCTET_CHECK(idle == cudaSuccess, op,
              "this op keeps cross-block scratch in static device memory, one copy per device, "
              "so it must not run on two streams at once: it was called on stream ",
              static_cast<const void*>(s), " while stream ",
              static_cast<const void*>(owner[device]), " of cuda:", device,
              " still has work queued (", cudaGetErrorString(idle),
              "). Run every octet kernel of a device on one stream (octet::set_cuda_stream), or "
              "synchronize the old stream before switching");
  owner[device] = s;
}

}  // namespace octet::kernels::cuda
