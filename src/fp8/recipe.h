// fp8/recipe.h: an FP8 recipe says which format each GEMM operand uses and how it
// is scaled (DESIGN.md, FP8 recipes).
// defines: ScalingMode, FormatPolicy, Role, AmaxCompute, DelayedScaling, Recipe,
//          scaling_mode_name, scaling_mode_from_name, recipe_from_name
#pragma once

#include <string>
#include <string_view>

#include "core/dtype.h"
#include "kernels/quantize.h"

namespace octet::fp8 {

enum class ScalingMode : unsigned char {
  tensor_current,  // per tensor, from this tensor's amax now (the default)
  tensor_delayed,  // per tensor, from an amax history (Transformer Engine's DelayedScaling)
  row,             // one scale per row of each operand (outer-vector scaling)
  block,           // 1x128 tiles for activations and gradients, 128x128 blocks for weights
  mx,              // 1x32 blocks with E8M0 power-of-two scales (OCP MX)
};

enum class FormatPolicy : unsigned char {
  hybrid,  // E4M3 for activations and weights, E5M2 for gradients
  e4m3,    // E4M3 everywhere
};

// What a GEMM operand is; decides its format and, under block scaling, its grid.
enum class Role : unsigned char { activation, weight, gradient };

enum class AmaxCompute : unsigned char { max, most_recent };

struct DelayedScaling {
  int history_len = 1024;  // Transformer Engine's default amax_history_len
  AmaxCompute compute = AmaxCompute::max;
  int margin = 0;  // scale = fp8_max / amax / 2^margin
};

struct Recipe {
  ScalingMode mode = ScalingMode::tensor_current;
  FormatPolicy formats = FormatPolicy::hybrid;
  bool power_of_two_scales = false;  // round f32 scales down to powers of two
  DelayedScaling delayed;

  DType format(Role role) const {
    return formats == FormatPolicy::hybrid && role == Role::gradient ? DType::e5m2 : DType::e4m3;
  }
  // The scale grid of an operand of this role, for its stored (K-major) layout.
  kernels::ScaleGrid grid(Role role) const;
  std::string str() const;  // "block/hybrid", for logs and metrics
};

const char* scaling_mode_name(ScalingMode mode);  // "tensor-current", ...
ScalingMode scaling_mode_from_name(std::string_view name);
// "tensor-current", "tensor-delayed", "row", "block" or "mx", optionally followed by
// ":e4m3" (all-E4M3 formats) or ":hybrid"; throws octet::Error listing the names otherwise.
Recipe recipe_from_name(std::string_view name);

}  // namespace octet::fp8
