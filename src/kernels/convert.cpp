// kernels/convert.cpp: validation of array conversions and dispatch by device.
#include "kernels/convert.h"

#include "core/error.h"
#include "kernels/backends.h"

namespace octet::kernels {

bool convert_supported(DType from, DType to) {
  if (from == to) return true;
  const bool wide_from = from == DType::f32 || from == DType::bf16 || from == DType::f16;
  const bool wide_to = to == DType::f32 || to == DType::bf16 || to == DType::f16;
  if (wide_from && is_fp8(to)) return true;
  if (is_fp8(from) && wide_to) return true;
  return (from == DType::f32 && wide_to) || (to == DType::f32 && wide_from);
}

void convert(const Tensor& src, const Tensor& dst, Overflow overflow) {
  OCTET_CHECK(convert_supported(src.dtype, dst.dtype), "convert", "cannot convert ",
              dtype_name(src.dtype), " to ", dtype_name(dst.dtype),
              "; supported: f32/bf16/f16 <-> e4m3/e5m2, f32 <-> bf16/f16");
  OCTET_CHECK(src.numel() == dst.numel(), "convert", "element counts differ: ", src.str(), " vs ",
              dst.str());
  OCTET_CHECK(src.device == dst.device, "convert", "src and dst must be on one device: ", src.str(),
              " vs ", dst.str());
  if (src.numel() == 0) return;
  OCTET_CHECK(!src.empty() && !dst.empty(), "convert", "an operand has no data");
  if (src.device.is_cpu()) return cpu::convert(src, dst, overflow);
  OCTET_CUDA_RETURN("convert", src, convert, src, dst, overflow);
}

}  // namespace octet::kernels
