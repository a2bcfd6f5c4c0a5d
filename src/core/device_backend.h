// core/device_backend.h: the few CUDA runtime calls core/ needs, behind plain
// functions so that core compiles without CUDA (device_nocuda.cpp) and with it
// (device_cuda.cpp). Internal to core/.
// defines: detail::cuda_alloc, cuda_free, cuda_copy, cuda_count, cuda_sync,
//          cuda_mem_info
#pragma once

#include <cstddef>

#include "core/device.h"

namespace octet::detail {

void* cuda_alloc(int device, size_t bytes);  // throws octet::Error on failure
void cuda_free(int device, void* ptr) noexcept;
// Copies bytes; each side is device memory when its *_on_device flag is set, and the copy
// is queued on the stream of `device` (the device side's; either one for device to device).
void cuda_copy(int device, void* dst, bool dst_on_device, const void* src, bool src_on_device,
               size_t bytes);
void cuda_zero(int device, void* dst, size_t bytes);
int cuda_count() noexcept;
void cuda_sync();
// The stream every octet kernel, copy and GEMM of the current device runs on (one per device).
void* cuda_stream() noexcept;
void cuda_set_stream(void* stream) noexcept;
bool cuda_in_build() noexcept;
// Free and total bytes of `device` (cudaMemGetInfo); false where unknown (no CUDA, cudasim).
bool cuda_mem_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept;

// Buffer's memory accounting (core/device.cpp).
void count_allocation(Device device, size_t bytes);
void count_release(Device device, size_t bytes) noexcept;

}  // namespace octet::detail
