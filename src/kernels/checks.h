// kernels/checks.h: the argument checks the LLaMA layer kernels' dispatchers share, and
// the error for a device whose implementation has not arrived yet. Internal to kernels/.
// defines: is_activation, check_activation, check_tensor, check_no_overlap
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace octet::kernels {

inline bool is_activation(DType d) {
  return d == DType::f32 || d == DType::bf16;
}

// `t` must be f32 or bf16 rows of `cols` (leading dimensions flattened: [rows, cols] or
// [B, S, cols]) on `device`, with data unless it is empty.
inline void check_activation(const char* op, const char* name, const Tensor& t, int64_t rows,
                             int64_t cols, Device device) {
  OCTET_CHECK(is_activation(t.dtype) && t.rows() == rows && t.cols() == cols && t.device == device,
              op, name, " must be f32 or bf16 [", rows, ", ", cols, "] on ", device_name(device),
              ", got ", t.str());
  OCTET_CHECK(t.numel() == 0 || t.data != nullptr, op, name, " ", t.str(), " has no data");
}

// `t` must hold `numel` elements of `dtype` on `device` (any shape).
inline void check_tensor(const char* op, const char* name, const Tensor& t, DType dtype,
                         int64_t numel, Device device) {
  OCTET_CHECK(t.dtype == dtype && t.numel() == numel && t.device == device, op, name, " must be ",
              dtype_name(dtype), " with ", numel, " elements on ", device_name(device), ", got ",
              t.str());
  OCTET_CHECK(numel == 0 || t.data != nullptr, op, name, " ", t.str(), " has no data");
}

// Outputs that are written while inputs are still being read must not share memory with them.
inline void check_no_overlap(const char* op, const char* a_name, const Tensor& a,
                             const char* b_name, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data);
  const auto* pb = static_cast<const char*>(b.data);
  OCTET_CHECK(pa + a.nbytes() <= pb || pb + b.nbytes() <= pa, op, a_name, " and ", b_name,
              " overlap; pass separate memory");
}

}  // namespace octet::kernels
