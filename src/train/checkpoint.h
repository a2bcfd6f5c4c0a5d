// train/checkpoint.h: checkpoints a resumed run continues from exactly, readable by
// other tools: <dir>/step_NNNNNNNN/{model.safetensors (HF LLaMA names, f32), config.json
// (HF LlamaConfig), trainer_state.safetensors (AdamW moments, FP8 scaling state),
// trainer_state.json (step, data position, run settings)} and <dir>/latest naming the newest.
// defines: TrainerState, save_checkpoint, load_checkpoint, latest_checkpoint, load_model_weights,
//          trainer_state_from_json
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "data/loader.h"
#include "io/json_fwd.h"
#include "model/llama.h"

namespace octet::train {

struct TrainerState {
  int64_t step = 0;  // optimizer steps done
  data::LoaderPosition data_position;
  std::string precision, recipe;  // what the run was, to refuse resuming into another
};

// Writes a checkpoint of `model` (master weights), the AdamW moments m and v (f32 [P])
// and `state`. The step directory is written under a temporary name and renamed, then
// `latest` is replaced atomically: a failure at any point leaves the previous
// checkpoint and `latest` as they were. Returns the step directory.
std::string save_checkpoint(const std::string& dir, const model::Llama& model, const Tensor& m,
                            const Tensor& v, const TrainerState& state);

// The step directory `latest` names in `dir`; throws naming the file when there is none.
std::string latest_checkpoint(const std::string& dir);

// Reads the model weights of a step directory (model.safetensors) into model.master()
// and syncs the working weights. Every parameter must be present with its shape.
void load_model_weights(const std::string& step_dir, model::Llama& model);

// The trainer_state.json of a checkpoint (`where` names it in errors): every field present,
// no unknown ones, and `parameters` equal to `parameter_count`.
TrainerState trainer_state_from_json(const Json& js, const std::string& where,
                                     int64_t parameter_count);

// Reads everything save_checkpoint wrote back into model, m, v; returns the state.
TrainerState load_checkpoint(const std::string& step_dir, model::Llama& model, const Tensor& m,
                             const Tensor& v);

}  // namespace octet::train
