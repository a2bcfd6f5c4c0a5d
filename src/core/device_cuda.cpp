// core/device_cuda.cpp: the device backend of a build with CUDA (CUDA runtime API).
#include <cuda_runtime.h>

#include "core/device_backend.h"
#include "core/error.h"

namespace octet::detail {

namespace {
void check(cudaError_t status, const char* op, const char* what) {
  OCTET_CHECK(status == cudaSuccess, op, what, " failed: ", cudaGetErrorString(status));
}
}  // namespace

void* cuda_alloc(int device, size_t bytes) {
  OCTET_CHECK(device >= 0 && device < cuda_count(), "buffer", "CUDA device ", device,
              " is not present (this machine has ", cuda_count(), ")");
  check(cudaSetDevice(device), "buffer", "cudaSetDevice");
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  OCTET_CHECK(status == cudaSuccess, "buffer", "cudaMalloc of ", bytes, " bytes on cuda:", device,
              " failed: ", cudaGetErrorString(status));
  return ptr;
}

void cuda_free(int device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  cudaSetDevice(device);
  cudaFree(ptr);
}

namespace {
cudaStream_t current_stream = nullptr;  // the legacy default stream until set_cuda_stream
}  // namespace

void* cuda_stream() noexcept {
  return current_stream;
}
void cuda_set_stream(void* stream) noexcept {
  current_stream = static_cast<cudaStream_t>(stream);
}

// Copies are queued on octet's stream so that they never drain the GPU: host to device
// from pageable memory returns once the source is staged, device to device runs in
// stream order, and only device to host waits (the caller reads the bytes next).
void cuda_copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) {
  if (bytes == 0) return;
  const cudaMemcpyKind kind =
      dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                    : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  check(cudaMemcpyAsync(dst, src, bytes, kind, current_stream), "copy", "cudaMemcpyAsync");
  if (!dst_on_device) check(cudaStreamSynchronize(current_stream), "copy", "cudaStreamSynchronize");
}

void cuda_zero(void* dst, size_t bytes) {
  check(cudaMemsetAsync(dst, 0, bytes, current_stream), "zero", "cudaMemsetAsync");
}

int cuda_count() noexcept {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver"/"no device" error
      return 0;
    }
    return n;
  }();
  return count;
}

void cuda_sync() {
  if (cuda_count() > 0) check(cudaDeviceSynchronize(), "cuda", "cudaDeviceSynchronize");
}

bool cuda_in_build() noexcept {
  return true;
}

}  // namespace octet::detail
