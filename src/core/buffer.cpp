// core/buffer.cpp
#include "core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/device_backend.h"
#include "core/error.h"

namespace octet {

namespace {
constexpr size_t kCpuAlignment = 64;  // one cache line; the widest vector load
}

Buffer::Buffer(Device device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    const size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    data_ = std::aligned_alloc(kCpuAlignment, rounded);
    OCTET_CHECK(data_ != nullptr, "buffer", "out of host memory allocating ", bytes, " bytes");
  } else {
    data_ = detail::cuda_alloc(device.index, bytes);
  }
  detail::count_allocation(device, bytes);
}

Buffer::~Buffer() {
  release();
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void Buffer::release() {
  if (data_ == nullptr) return;
  detail::count_release(device_, bytes_);
  if (device_.is_cpu()) {
    std::free(data_);
  } else {
    detail::cuda_free(device_.index, data_);
  }
  data_ = nullptr;
}

Tensor Buffer::view(DType dtype, Shape shape, size_t offset_bytes) const {
  const size_t need = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  OCTET_CHECK(offset_bytes + need <= bytes_, "buffer", "a view of ", dtype_name(dtype), shape.str(),
              " at byte ", offset_bytes, " needs ", offset_bytes + need,
              " bytes but the buffer holds ", bytes_);
  OCTET_CHECK(offset_bytes % dtype_size(dtype) == 0, "buffer", "offset ", offset_bytes,
              " is not a multiple of the ", dtype_name(dtype), " element size");
  return Tensor(static_cast<char*>(data_) + offset_bytes, dtype, shape, device_);
}

Buffer Buffer::for_tensor(Device device, DType dtype, Shape shape) {
  return Buffer(device, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  detail::cuda_copy(device, dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes);
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return;
  }
  detail::cuda_zero(device.index, dst, bytes);
}

void copy_tensor(const Tensor& src, const Tensor& dst) {
  OCTET_CHECK(src.dtype == dst.dtype && src.numel() == dst.numel(), "copy", "cannot copy ",
              src.str(), " into ", dst.str(), ": dtype and element count must agree");
  copy_bytes(dst.data, dst.device, src.data, src.device, src.nbytes());
}

}  // namespace octet
