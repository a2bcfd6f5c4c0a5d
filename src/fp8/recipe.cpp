// fp8/recipe.cpp: recipe names and the scale grid of each operand.
#include "fp8/recipe.h"

#include "core/error.h"

namespace octet::fp8 {
namespace {

struct ModeName {
  ScalingMode mode;
  const char* name;
};
constexpr ModeName kModes[] = {{ScalingMode::tensor_current, "tensor-current"},
                               {ScalingMode::tensor_delayed, "tensor-delayed"},
                               {ScalingMode::row, "row"},
                               {ScalingMode::block, "block"},
                               {ScalingMode::mx, "mx"}};

constexpr int64_t kTile =
    128;  // DeepSeek-V3: 1x128 activation/gradient tiles, 128x128 weight blocks
constexpr int64_t kMxBlock = 32;  // OCP MX v1.0 block size

}  // namespace

kernels::ScaleGrid Recipe::grid(Role role) const {
  switch (mode) {
    case ScalingMode::tensor_current:
    case ScalingMode::tensor_delayed:
      return {0, 0, false};
    case ScalingMode::row:
      return {1, 0, false};
    case ScalingMode::block:
      return role == Role::weight ? kernels::ScaleGrid{kTile, kTile, false}
                                  : kernels::ScaleGrid{1, kTile, false};
    case ScalingMode::mx:
      return {1, kMxBlock, true};
  }
  OCTET_FAIL("recipe", "unknown scaling mode ", static_cast<int>(mode));
}

std::string Recipe::str() const {
  return std::string(scaling_mode_name(mode)) +
         (formats == FormatPolicy::hybrid ? "/hybrid" : "/e4m3") +
         (power_of_two_scales ? "/pow2" : "");
}

const char* scaling_mode_name(ScalingMode mode) {
  for (const ModeName& m : kModes) {
    if (m.mode == mode) return m.name;
  }
  OCTET_FAIL("recipe", "unknown scaling mode ", static_cast<int>(mode));
}

ScalingMode scaling_mode_from_name(std::string_view name) {
  for (const ModeName& m : kModes) {
    if (name == m.name) return m.mode;
  }
  OCTET_FAIL("recipe", "unknown scaling mode '", std::string(name),
             "'; expected tensor-current, tensor-delayed, row, block or mx");
}

Recipe recipe_from_name(std::string_view name) {
  Recipe recipe;
  const size_t colon = name.find(':');
  recipe.mode = scaling_mode_from_name(name.substr(0, colon));
  if (colon != std::string_view::npos) {
    const std::string_view formats = name.substr(colon + 1);
    if (formats == "e4m3") {
      recipe.formats = FormatPolicy::e4m3;
    } else if (formats != "hybrid") {
      OCTET_FAIL("recipe", "unknown format policy '", std::string(formats), "' in '",
                 std::string(name), "'; expected hybrid or e4m3");
    }
  }
  return recipe;
}

}  // namespace octet::fp8
