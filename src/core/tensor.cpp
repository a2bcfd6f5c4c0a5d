// core/tensor.cpp
#include "core/tensor.h"

#include "core/error.h"

namespace octet {

Tensor Tensor::reshaped(Shape new_shape) const {
  OCTET_CHECK(new_shape.numel() == numel(), "reshape", "cannot view ", str(), " as ",
              new_shape.str(), ": element counts differ");
  return Tensor(data, dtype, new_shape, device);
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype)) + shape.str() + "@" + device_name(device);
}

}  // namespace octet
