// fp8/recipe.cpp: the table of scaling modes, the recipe's text form and the scale grid
// of each operand.
#include "fp8/recipe.h"

#include <charconv>
#include <utility>

#include "core/error.h"

namespace octet::fp8 {
namespace {

constexpr ScalingModeInfo kModes[] = {
    {.mode = ScalingMode::tensor_current,
     .name = "tensor-current",
     .stateful = false,
     .formats = FormatPolicy::hybrid,
     .description = "one scale per tensor from its amax now (default)"},
    {.mode = ScalingMode::tensor_delayed,
     .name = "tensor-delayed",
     .stateful = true,
     .formats = FormatPolicy::hybrid,
     .description = "one scale per tensor from an amax history, updated after each step"},
    {.mode = ScalingMode::row,
     .name = "row",
     .stateful = false,
     .formats = FormatPolicy::e4m3,
     .description = "one scale per row of each operand"},
    {.mode = ScalingMode::block,
     .name = "block",
     .stateful = false,
     .formats = FormatPolicy::e4m3,
     .description = "1x128 tiles for activations and gradients, 128x128 blocks for weights"},
    {.mode = ScalingMode::mx,
     .name = "mx",
     .stateful = false,
     .formats = FormatPolicy::e4m3,
     .description = "1x32 blocks with power-of-two (E8M0) scales"},
};

constexpr int64_t kTile =
    128;  // DeepSeek-V3: 1x128 activation/gradient tiles, 128x128 weight blocks
constexpr int64_t kMxBlock = 32;  // OCP MX v1.0 block size

constexpr const char* kOptions =
    "hybrid, e4m3, pow2, history=N, margin=N, amax=max|most-recent or bf16=G[+G...] (G "
    "forward|dgrad|wgrad)";

constexpr std::pair<Gemm, const char*> kGemms[] = {
    {Gemm::forward, "forward"}, {Gemm::dgrad, "dgrad"}, {Gemm::wgrad, "wgrad"}};

// "dgrad+wgrad" -> Gemm bits; empty, unknown or repeated names are refused.
unsigned char parse_gemms(std::string_view value, std::string_view text) {
  unsigned char bits = 0;
  size_t begin = 0;
  while (true) {
    const size_t plus = value.find('+', begin);
    const std::string_view name = value.substr(begin, plus - begin);
    unsigned char bit = 0;
    for (const auto& [gemm, gemm_name] : kGemms) {
      if (name == gemm_name) bit = static_cast<unsigned char>(gemm);
    }
    OCTET_CHECK(bit != 0 && (bits & bit) == 0, "recipe", "bf16=", std::string(value), " in '",
                std::string(text), "': expected forward, dgrad and wgrad joined by '+', each once");
    bits |= bit;
    if (plus == std::string_view::npos) return bits;
    begin = plus + 1;
  }
}

int parse_int(std::string_view value, std::string_view option, std::string_view text, int min) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  OCTET_CHECK(ec == std::errc() && end == value.data() + value.size() && v >= min, "recipe",
              std::string(option), "=", std::string(value), " in '", std::string(text),
              "': expected an integer >= ", min);
  return v;
}

// "hybrid for tensor-current and tensor-delayed, e4m3 for row, block and mx".
std::string default_formats_text() {
  std::string out;
  for (const FormatPolicy f : {FormatPolicy::hybrid, FormatPolicy::e4m3}) {
    std::string modes;
    for (const ScalingModeInfo& m : kModes) {
      if (m.formats != f) continue;
      modes += (modes.empty() ? "" : ", ") + std::string(m.name);
    }
    if (modes.empty()) continue;
    out += (out.empty() ? "" : "; ") + std::string(f == FormatPolicy::hybrid ? "hybrid" : "e4m3") +
           " for " + modes;
  }
  return out;
}

}  // namespace

std::span<const ScalingModeInfo> scaling_modes() {
  return kModes;
}

const ScalingModeInfo& scaling_mode_info(ScalingMode mode) {
  for (const ScalingModeInfo& m : kModes) {
    if (m.mode == mode) return m;
  }
  OCTET_FAIL("recipe", "unknown scaling mode ", static_cast<int>(mode));
}

const char* scaling_mode_name(ScalingMode mode) {
  return scaling_mode_info(mode).name;
}

std::string scaling_mode_list(std::string_view separator) {
  std::string out;
  for (const ScalingModeInfo& m : kModes) {
    if (!out.empty()) out += separator;
    out += m.name;
  }
  return out;
}

ScalingMode scaling_mode_from_name(std::string_view name) {
  std::string expected;
  const size_t n = std::size(kModes);
  for (size_t i = 0; i < n; ++i) {
    if (name == kModes[i].name) return kModes[i].mode;
    expected += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string(kModes[i].name);
  }
  OCTET_FAIL("recipe", "unknown scaling mode '", std::string(name), "'; expected ", expected);
}

Recipe Recipe::defaults(ScalingMode mode) {
  Recipe r;
  r.mode = mode;
  r.formats = scaling_mode_info(mode).formats;
  return r;
}

Recipe Recipe::parse(std::string_view text) {
  size_t colon = text.find(':');
  Recipe r = defaults(scaling_mode_from_name(text.substr(0, colon)));
  bool seen_format = false, seen_pow2 = false, seen_history = false, seen_margin = false,
       seen_amax = false, seen_bf16 = false;
  while (colon != std::string_view::npos) {
    const size_t begin = colon + 1;
    colon = text.find(':', begin);
    const std::string_view option = text.substr(begin, colon - begin);
    const size_t eq = option.find('=');
    const std::string_view key = option.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : option.substr(eq + 1);
    auto once = [&](bool& seen) {
      OCTET_CHECK(!seen, "recipe", "'", std::string(key), "' is given twice in '",
                  std::string(text), "'");
      seen = true;
    };
    auto delayed_only = [&] {
      OCTET_CHECK(r.mode == ScalingMode::tensor_delayed, "recipe", "'", std::string(key), "' in '",
                  std::string(text), "' applies only to tensor-delayed scaling");
    };
    if (option == "hybrid" || option == "e4m3") {
      once(seen_format);
      r.formats = option == "e4m3" ? FormatPolicy::e4m3 : FormatPolicy::hybrid;
    } else if (option == "pow2") {
      once(seen_pow2);
      r.power_of_two_scales = true;
    } else if (key == "history" && eq != std::string_view::npos) {
      once(seen_history);
      delayed_only();
      r.delayed.history_len = parse_int(value, key, text, 1);
    } else if (key == "margin" && eq != std::string_view::npos) {
      once(seen_margin);
      delayed_only();
      r.delayed.margin = parse_int(value, key, text, 0);
    } else if (key == "amax" && (value == "max" || value == "most-recent")) {
      once(seen_amax);
      delayed_only();
      r.delayed.compute = value == "max" ? AmaxCompute::max : AmaxCompute::most_recent;
    } else if (key == "bf16" && eq != std::string_view::npos) {
      once(seen_bf16);
      r.bf16_gemms = parse_gemms(value, text);
    } else {
      OCTET_FAIL("recipe", "unknown option '", std::string(option), "' in '", std::string(text),
                 "'; expected ", kOptions);
    }
  }
  return r;
}

std::string Recipe::str() const {
  std::string s = scaling_mode_name(mode);
  if (formats != scaling_mode_info(mode).formats) {
    s += formats == FormatPolicy::e4m3 ? ":e4m3" : ":hybrid";
  }
  const DelayedScaling defaults;
  if (delayed.history_len != defaults.history_len) {
    s += ":history=" + std::to_string(delayed.history_len);
  }
  if (delayed.margin != defaults.margin) s += ":margin=" + std::to_string(delayed.margin);
  if (delayed.compute != defaults.compute) {
    s += delayed.compute == AmaxCompute::max ? ":amax=max" : ":amax=most-recent";
  }
  if (power_of_two_scales) s += ":pow2";
  if (bf16_gemms != 0) {
    std::string gemms;
    for (const auto& [gemm, name] : kGemms) {
      if (in_bf16(gemm)) gemms += (gemms.empty() ? "" : "+") + std::string(name);
    }
    s += ":bf16=" + gemms;
  }
  return s;
}

std::string recipe_syntax(std::string_view indent) {
  const std::string in(indent);
  std::string s = in + "MODE[:OPTION...], MODE one of:\n";
  for (const ScalingModeInfo& m : kModes) {
    std::string name = m.name;
    name.resize(16, ' ');
    s += in + "  " + name + m.description + "\n";
  }
  s += in + "OPTION: hybrid (E4M3, E5M2 for gradients) | e4m3 (E4M3 everywhere); default: " +
       default_formats_text() + "\n";
  s += in + "        pow2 (power-of-two scales)\n";
  s += in + "        tensor-delayed only: history=N (1024) margin=N (0) amax=max|most-recent\n";
  s += in + "        bf16=G[+G...], G forward|dgrad|wgrad: these GEMMs in bf16 (attribution)\n";
  return s;
}

kernels::ScaleGrid Recipe::grid(Role role) const {
  switch (mode) {
    case ScalingMode::tensor_current:
    case ScalingMode::tensor_delayed:
      return {};  // one scale for the whole tensor
    case ScalingMode::row:
      return {.block_rows = 1, .block_cols = 0};
    case ScalingMode::block:
      return role == Role::weight ? kernels::ScaleGrid{.block_rows = kTile, .block_cols = kTile}
                                  : kernels::ScaleGrid{.block_rows = 1, .block_cols = kTile};
    case ScalingMode::mx:
      return {.block_rows = 1, .block_cols = kMxBlock, .e8m0 = true};
  }
  OCTET_FAIL("recipe", "unknown scaling mode ", static_cast<int>(mode));
}

}  // namespace octet::fp8
