// fuzz/fuzz_trainer_state.cpp: what a resume reads besides safetensors: trainer_state.json
// (trainer_state_from_json, the stored recipe through fp8::Recipe::parse as Trainer does) and
// the `latest` file naming the step directory, on any bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "fp8/recipe.h"
#include "fuzz_util.h"
#include "io/json.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const train::TrainerState s =
        train::trainer_state_from_json(parse_json(text, "fuzz"), "trainer_state.json", 125248);
    std::string recipe = s.recipe;
    std::replace(recipe.begin(), recipe.end(), '/', ':');
    (void)fp8::Recipe::parse(recipe);
  } catch (const Error&) {
  }
  // The same bytes as a run folder's `latest`.
  static const std::string dir = fuzz::fuzz_file_path("run");
  std::filesystem::create_directories(dir + "/step_00000002");
  const fuzz::FuzzFile latest("run/latest", data, size);
  try {
    (void)train::latest_checkpoint(dir);
  } catch (const Error&) {
  }
  return 0;
}
