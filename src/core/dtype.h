// core/dtype.h: the element types octet knows, one row each in a traits table.
// defines: DType, DTypeInfo, dtype_info, dtype_size, dtype_name, dtype_from_name, is_fp8
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace octet {

enum class DType : uint8_t {
  f32,   // IEEE binary32
  bf16,  // bfloat16: 8-bit exponent, 7-bit mantissa
  f16,   // IEEE binary16
  e4m3,  // OCP OFP8 E4M3 (the "fn" variant: no inf, one NaN per sign, max 448)
  e5m2,  // OCP OFP8 E5M2 (IEEE-like: inf and NaN, max 57344)
  e8m0,  // OCP MX scale: 8-bit biased exponent, value 2^(e-127), 0xFF is NaN
  i32,   // token ids, indices
  u8,    // raw bytes (workspaces)
};

inline constexpr int kNumDTypes = 8;

// One row of the traits table. Float formats fill the numeric fields; the
// others leave them zero.
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size_bytes;
  bool is_float;
  int exponent_bits;
  int mantissa_bits;
  int exponent_bias;
  double max_finite;     // largest finite value
  double min_normal;     // smallest positive normal value
  double min_subnormal;  // smallest positive value (subnormal where the format has them)
  bool has_inf;
};

const DTypeInfo& dtype_info(DType dtype);
inline size_t dtype_size(DType dtype) {
  return dtype_info(dtype).size_bytes;
}
inline const char* dtype_name(DType dtype) {
  return dtype_info(dtype).name;
}
// Parses "f32", "bf16", ...; throws octet::Error naming the accepted names otherwise.
DType dtype_from_name(std::string_view name);
inline bool is_fp8(DType dtype) {
  return dtype == DType::e4m3 || dtype == DType::e5m2;
}

}  // namespace octet
