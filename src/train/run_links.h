// train/run_links.h: a run's --out directory loads as a Hugging Face model: beside `latest`,
// config.json, model.safetensors and tokenizer.model are links into the newest step
// directory, so from_pretrained("runs/x") (and LlamaTokenizer) read the latest checkpoint.
// defines: kRunLinkedFiles, link_latest_files
#pragma once

#include <array>
#include <string>

namespace octet::train {

// The files of a step directory linked from the run directory (those present are linked).
inline constexpr std::array<const char*, 3> kRunLinkedFiles = {"config.json", "model.safetensors",
                                                               "tokenizer.model"};

// Points <dir>/<file> at <step_name>/<file> (a relative symlink, replaced atomically) for
// each file of kRunLinkedFiles the step directory holds; removes a link whose file the step
// lacks. Never replaces a regular file of that name (the user's): that link is skipped.
void link_latest_files(const std::string& dir, const std::string& step_name);

}  // namespace octet::train
