// core/device_cuda.cpp: the device backend of a build with CUDA (CUDA runtime API).
#include <cuda_runtime.h>

#include <atomic>

#include "core/device_backend.h"
#include "core/error.h"

namespace octet::detail {

namespace {
void check(cudaError_t status, const char* op, const char* what) {
  OCTET_CHECK(status == cudaSuccess, op, what, " failed: ", cudaGetErrorString(status));
}

// octet's kernels are built as sm_90a machine code and compute_90 PTX (CMakeLists.txt):
// a GPU older than compute capability 9.0 could run none of them, so it is refused here,
// the first time octet allocates on it, rather than with "no kernel image" mid-step.
void check_supported(int device) {
  static std::atomic<bool> checked[64] = {};
  if (device < 64 && checked[device].load(std::memory_order_acquire)) return;
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "buffer",
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "buffer",
        "cudaDeviceGetAttribute");
  OCTET_CHECK(major >= 9, "buffer", "cuda:", device, " has compute capability ", major, ".", minor,
              "; octet's CUDA kernels need 9.0 or newer (Hopper: H100, H200). Use "
              "--device cpu on this machine");
  if (device < 64) checked[device].store(true, std::memory_order_release);
}
}  // namespace

void* cuda_alloc(int device, size_t bytes) {
  OCTET_CHECK(device >= 0 && device < cuda_count(), "buffer", "CUDA device ", device,
              " is not present (this machine has ", cuda_count(), ")");
  check(cudaSetDevice(device), "buffer", "cudaSetDevice");
  check_supported(device);
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
// One stream per device (the legacy default stream until set_cuda_stream), so that work for
// cuda:1 never lands on a stream of cuda:0. octet supports up to kMaxDevices per process.
constexpr int kMaxDevices = 64;
cudaStream_t device_streams[kMaxDevices] = {};

int current_device() noexcept {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    cudaGetLastError();  // no device: the legacy default stream (index 0) is all there is
    return 0;
  }
  return device;
}
}  // namespace

// The stream of the current device (cudaSetDevice), as set by set_cuda_stream on it.
void* cuda_stream() noexcept {
  return device_streams[current_device()];
}
void cuda_set_stream(void* stream) noexcept {
  device_streams[current_device()] = static_cast<cudaStream_t>(stream);
}

// Copies are queued on the current device's octet stream so that they never drain the GPU: host to
// device from pageable memory returns once the source is staged, device to device runs in stream
// order, and only device to host waits (the caller reads the bytes next).
void cuda_copy(int device, void* dst, bool dst_on_device, const void* src, bool src_on_device,
               size_t bytes) {
  if (bytes == 0) return;
  check(cudaSetDevice(device), "copy", "cudaSetDevice");
  const cudaMemcpyKind kind =
      dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                    : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const auto stream = static_cast<cudaStream_t>(cuda_stream());
  check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "copy", "cudaMemcpyAsync");
  if (!dst_on_device) check(cudaStreamSynchronize(stream), "copy", "cudaStreamSynchronize");
}

void cuda_zero(int device, void* dst, size_t bytes) {
  check(cudaSetDevice(device), "zero", "cudaSetDevice");
  check(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(cuda_stream())), "zero",
        "cudaMemsetAsync");
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

bool cuda_mem_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept {
#ifdef OCTET_CUDASIM
  (void)device, (void)free_bytes, (void)total_bytes;
  return false;  // the emulated device has no memory of its own to ask about
#else
  if (device < 0 || device >= cuda_count() || cudaSetDevice(device) != cudaSuccess) return false;
  if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
#endif
}

}  // namespace octet::detail
