// nn/precision.h: the precision policy, octet's one switch (DESIGN.md): what the
// working weights and activations are stored in and how the linear GEMMs run.
// defines: Precision, precision_name, precision_from_name, activation_dtype
#pragma once

#include <string_view>

#include "core/dtype.h"

namespace octet::nn {

enum class Precision : unsigned char {
  fp32,  // everything fp32
  bf16,  // fp32 master weights; bf16 weights/activations; bf16 GEMMs with fp32 accumulation
  fp8,   // as bf16, but the transformer-block linear GEMMs run in FP8 under a recipe
};

const char* precision_name(Precision p);
Precision precision_from_name(std::string_view name);  // "fp32" | "bf16" | "fp8"
// The dtype of working weights and activations: f32 under fp32, bf16 otherwise.
inline DType activation_dtype(Precision p) {
  return p == Precision::fp32 ? DType::f32 : DType::bf16;
}

}  // namespace octet::nn
