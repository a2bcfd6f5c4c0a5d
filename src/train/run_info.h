// train/run_info.h: what a run was, written once into its directory as run.json when it
// starts, so that a report can say which config, which build and which machine produced
// its curves: {"config": {...}, "commit": "<git describe>", "octet_version": "..",
// "parameters": .., "tokens_per_step": .., "machine": {"cpu": .., "cores": .., "device": ..,
// "gpus": [..]}}.
// defines: train_config_json, machine_json, build_commit, run_info_json, write_run_info
#pragma once

#include <string>

#include "io/json_fwd.h"
#include "model/llama.h"
#include "train/config.h"

namespace octet::train {

// Every field of `config`, under the names of `octet train`'s flags (without the dashes,
// '-' as '_'): {"model": "tiny", "precision": "fp8", "fp8_recipe": "tensor-current", ...}.
Json train_config_json(const TrainConfig& config);

// The machine a run on `device` ("cpu", "cuda:0") uses: the CPU model (/proc/cpuinfo), its
// logical cores, the device, and the GPU models the NVIDIA driver lists (empty without one).
Json machine_json(const std::string& device);

// `git describe --always --dirty` of the source tree this binary was built from, taken at
// build time; "unknown" when the sources were not a git checkout.
std::string build_commit();

// The run.json document of a run with `config` that trains `model`.
Json run_info_json(const TrainConfig& config, const model::Llama& model);

// Writes run_info_json(config, model) to <config.out_dir>/run.json (atomically, creating the
// directory). Does nothing when out_dir is empty; a resumed run keeps the run.json its
// first start wrote.
void write_run_info(const TrainConfig& config, const model::Llama& model);

}  // namespace octet::train
