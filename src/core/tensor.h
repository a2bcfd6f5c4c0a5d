// core/tensor.h: Tensor, a typed non-owning view of dense row-major memory on a device.
// defines: Tensor
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace octet {

// A view: a data pointer, an element type, a shape and the device the memory
// lives on. It owns nothing (Buffer owns memory) and is cheap to copy.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device;

  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device device = Device::cpu())
      : data(data), dtype(dtype), shape(shape), device(device) {}

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t rows() const { return shape.rows(); }
  int64_t cols() const { return shape.cols(); }
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // The same memory seen with another shape of the same element count.
  Tensor reshaped(Shape new_shape) const;
  // Elements [begin, end) of the contiguous tensor, as a 1-D tensor of the same dtype.
  Tensor elements(int64_t begin, int64_t end) const {
    return Tensor(static_cast<char*>(data) + begin * static_cast<int64_t>(dtype_size(dtype)), dtype,
                  {end - begin}, device);
  }
  // "bf16[3, 4]@cpu", for error messages.
  std::string str() const;
};

}  // namespace octet
