// kernels/convert.h: element-wise conversion of whole arrays between the float
// dtypes (the vectorized counterpart of core/convert.h, bit-identical to it).
// defines: convert, convert_supported
#pragma once

#include "core/convert.h"
#include "core/tensor.h"

namespace octet::kernels {

// dst = src converted to dst.dtype, element by element. Supported pairs:
//   f32 | bf16 | f16 -> e4m3 | e5m2   (round to nearest even, `overflow` as given)
//   e4m3 | e5m2      -> f32 | bf16 | f16 (exact)
//   f32 <-> bf16, f32 <-> f16         (round to nearest even)
// and any dtype to itself (a copy). Same device, same element count.
void convert(const Tensor& src, const Tensor& dst, Overflow overflow = Overflow::saturate);
bool convert_supported(DType from, DType to);

}  // namespace octet::kernels
