// nn/precision.cpp
#include "nn/precision.h"

#include <string>

#include "core/error.h"

namespace octet::nn {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32:
      return "fp32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp8:
      return "fp8";
  }
  return "?";
}

Precision precision_from_name(std::string_view name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp8") return Precision::fp8;
  OCTET_FAIL("precision", "unknown precision '", std::string(name),
             "'; expected fp32, bf16 or fp8");
}

}  // namespace octet::nn
