// fp8/recipe.h: an FP8 recipe says which format each GEMM operand uses and how it is
// scaled (DESIGN.md, FP8 recipes). Recipe is the one owner of every knob: parsed once
// from its text form, printed in the same form.
// defines: ScalingMode, FormatPolicy, Role, AmaxCompute, DelayedScaling, Recipe,
//          Gemm, ScalingModeInfo, scaling_modes, scaling_mode_info, scaling_mode_name,
//          scaling_mode_from_name, scaling_mode_list, recipe_syntax
#pragma once

#include <span>
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

// One row of the table of scaling modes: what the usage text, the benches and the
// tests list. A new mode is one row here, its grid, its kernels and its tests.
struct ScalingModeInfo {
  ScalingMode mode;
  const char* name;         // as typed: "tensor-current"
  bool stateful;            // keeps state across steps (fp8::ScalingState slots)
  FormatPolicy formats;     // the formats a recipe naming no format gets (docs/numerics.md)
  const char* description;  // one line for the usage text
};

// Every mode, in the order the usage text lists them.
std::span<const ScalingModeInfo> scaling_modes();
const ScalingModeInfo& scaling_mode_info(ScalingMode mode);
const char* scaling_mode_name(ScalingMode mode);  // "tensor-current", ...
// Throws octet::Error listing the names that exist.
ScalingMode scaling_mode_from_name(std::string_view name);
// The names joined: ("|") gives "tensor-current|tensor-delayed|row|block|mx".
std::string scaling_mode_list(std::string_view separator);

// What a GEMM operand is; decides its format and, under block scaling, its grid.
enum class Role : unsigned char { activation, weight, gradient };

// The three GEMMs of a linear layer, a bit each in Recipe::bf16_gemms.
enum class Gemm : unsigned char { forward = 1, dgrad = 2, wgrad = 4 };

enum class AmaxCompute : unsigned char { max, most_recent };

struct DelayedScaling {
  int history_len = 1024;  // Transformer Engine's default amax_history_len
  AmaxCompute compute = AmaxCompute::max;
  int margin = 0;  // scale = fp8_max / amax / 2^margin
  bool operator==(const DelayedScaling&) const = default;
};

struct Recipe {
  ScalingMode mode = ScalingMode::tensor_current;
  FormatPolicy formats = FormatPolicy::hybrid;  // tensor-current's default; see defaults()
  bool power_of_two_scales = false;             // round f32 scales down to powers of two
  DelayedScaling delayed;                       // tensor-delayed only
  // Attribution (docs/numerics.md): the GEMMs (Gemm bits) that run in bf16 from the operands'
  // bf16 values while the others stay FP8; every operand is still quantized and reported in
  // the FP8 health. 0 (the default): every GEMM in FP8.
  unsigned char bf16_gemms = 0;

  // The text form: the mode, then ':'-separated options, each at most once, in any order:
  //   hybrid | e4m3          formats (default: the mode's, ScalingModeInfo::formats)
  //   pow2                   power-of-two scales
  //   history=N              tensor-delayed: amax history length (default 1024)
  //   margin=N               tensor-delayed: scale = fp8_max / amax / 2^N (default 0)
  //   amax=max|most-recent   tensor-delayed: how the history is reduced (default max)
  //   bf16=G[+G...]          G forward|dgrad|wgrad: these GEMMs in bf16 (attribution)
  // e.g. "block:e4m3", "tensor-delayed:history=16:amax=most-recent:pow2". Throws
  // octet::Error naming what was expected.
  static Recipe parse(std::string_view text);
  // The recipe of `mode` with every option at its default (what parse("MODE") gives).
  static Recipe defaults(ScalingMode mode);
  // The text form parse() reads back to this recipe; defaults are left out.
  std::string str() const;

  bool in_bf16(Gemm gemm) const { return (bf16_gemms & static_cast<unsigned char>(gemm)) != 0; }
  bool stateful() const { return scaling_mode_info(mode).stateful; }
  DType format(Role role) const {
    return formats == FormatPolicy::hybrid && role == Role::gradient ? DType::e5m2 : DType::e4m3;
  }
  // The scale grid of an operand of this role, for its stored (K-major) layout.
  kernels::ScaleGrid grid(Role role) const;
  bool operator==(const Recipe&) const = default;
};

// The grammar and the modes, for usage texts (several lines, each indented by `indent`).
std::string recipe_syntax(std::string_view indent);

}  // namespace octet::fp8
