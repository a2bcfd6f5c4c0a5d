// core/dtype.cpp: the DType traits table.
#include "core/dtype.h"

#include <string>

#include "core/error.h"

namespace octet {
namespace {

// clang-format off
constexpr DTypeInfo kTable[kNumDTypes] = {
  // dtype        name    bytes float  e  m   bias  max_finite             min_normal       min_subnormal    inf
  {DType::f32,  "f32",  4, true,   8, 23, 127, 3.4028234663852886e38, 0x1p-126,        0x1p-149,        true},
  {DType::bf16, "bf16", 2, true,   8,  7, 127, 3.3895313892515355e38, 0x1p-126,        0x1p-133,        true},
  {DType::f16,  "f16",  2, true,   5, 10,  15, 65504.0,               0x1p-14,         0x1p-24,         true},
  {DType::e4m3, "e4m3", 1, true,   4,  3,   7, 448.0,                 0x1p-6,          0x1p-9,          false},
  {DType::e5m2, "e5m2", 1, true,   5,  2,  15, 57344.0,               0x1p-14,         0x1p-16,         true},
  {DType::e8m0, "e8m0", 1, true,   8,  0, 127, 0x1p127,               0x1p-127,        0x1p-127,        false},
  {DType::i32,  "i32",  4, false,  0,  0,   0, 0.0,                   0.0,             0.0,             false},
  {DType::u8,   "u8",   1, false,  0,  0,   0, 0.0,                   0.0,             0.0,             false},
};
// clang-format on

}  // namespace

const DTypeInfo& dtype_info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  OCTET_CHECK(index < kNumDTypes, "dtype", "unknown dtype code ", index);
  return kTable[index];
}

DType dtype_from_name(std::string_view name) {
  for (const DTypeInfo& info : kTable) {
    if (name == info.name) return info.dtype;
  }
  OCTET_FAIL("dtype", "unknown dtype '", std::string(name),
             "'; expected one of f32, bf16, f16, e4m3, e5m2, e8m0, i32, u8");
}

}  // namespace octet
