// core/buffer.h: Buffer, owning memory on the CPU (64-byte aligned) or a CUDA
// device, and byte copies between devices.
// defines: Buffer, copy_bytes, zero_bytes, copy_tensor
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace octet {

// Move-only owner of `bytes` bytes on `device`. Allocation happens here and
// nowhere in a step: layers and kernels take views (Tensor) into buffers made
// once at setup.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  // A view of `shape` elements of `dtype` starting `offset_bytes` into the
  // buffer; throws when it would not fit or is misaligned for the dtype.
  Tensor view(DType dtype, Shape shape, size_t offset_bytes = 0) const;
  // The whole buffer as one view of this dtype and shape (a shorthand).
  static Buffer for_tensor(Device device, DType dtype, Shape shape);
  Tensor tensor(DType dtype, Shape shape) const { return view(dtype, shape, 0); }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

// Copies `bytes` between any two devices (host<->device, device<->device).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Sets `bytes` bytes at dst on `device` to zero.
void zero_bytes(void* dst, Device device, size_t bytes);
// Copies src into dst; dtype and element count must agree.
void copy_tensor(const Tensor& src, const Tensor& dst);

}  // namespace octet
