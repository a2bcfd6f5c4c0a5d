// cli/run_checks.h: what `octet train`, `sample` and `eval` check before they start: a
// --device that is there, an --out that holds no earlier run unless --resume or --overwrite
// says what to do with it.
// defines: check_device_present, holds_checkpoints, check_out_dir
#pragma once

#include <string>

#include "train/config.h"

namespace octet::cli {

// Throws "[train] --device cuda: ..." (op = the command) when `device` names a GPU this build
// or this machine does not have, saying to use --device cpu.
void check_device_present(const std::string& command, const std::string& device);

// True when `dir` holds a `latest` file or a step_* directory.
bool holds_checkpoints(const std::string& dir);

// Before `octet train`: an --out that already holds checkpoints is refused without --resume
// (continue it) or --overwrite (delete its checkpoints and start over, done here).
void check_out_dir(const train::TrainConfig& config, bool overwrite);

}  // namespace octet::cli
