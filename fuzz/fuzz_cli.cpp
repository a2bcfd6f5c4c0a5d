// fuzz/fuzz_cli.cpp: the command line's numbers and names: `octet train` and `octet sample`
// flags as octet declares them (sizes, ids, devices, precisions, recipe strings), parsed but
// never run, from NUL-separated arguments; and the recipe text form, which must round-trip.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/device.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "nn/precision.h"

namespace octet::cli {
void add_train_commands(Commands& commands, CLI::App& octet);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet;
  if (size == 0 || size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i <= text.size() && args.size() < 24; ++i) {
    if (i == text.size() || text[i] == '\0') {
      args.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  // Each argument alone as a recipe, device and precision.
  for (const std::string& a : args) {
    try {
      const fp8::Recipe r = fp8::Recipe::parse(a);
      if (fp8::Recipe::parse(r.str()) != r) std::abort();  // printed as it parses
    } catch (const Error&) {
    }
    try {
      (void)device_from_name(a);
    } catch (const Error&) {
    }
    try {
      (void)nn::precision_from_name(a);
    } catch (const Error&) {
    }
  }
  cli::Commands commands;
  CLI::App app("octet");
  cli::add_train_commands(commands, app);
  args.insert(args.begin(), data[0] & 1 ? "sample" : "train");
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError&) {
  } catch (const Error&) {
  }
  return 0;
}
