// train/checkpoint.h: checkpoints a resumed run continues from exactly, readable by
// other tools: <dir>/step_NNNNNNNN/{model.safetensors (HF LLaMA names, f32), config.json
// (HF LlamaConfig), trainer_state.safetensors (AdamW moments, FP8 scaling state),
// trainer_state.json (step, data position, run settings), tokenizer.model when the run
// trained on shards that carry one} and <dir>/latest naming the newest, with links to its
// HF files beside it (train/run_links.h). A data-parallel run keeps the optimizer state in
// optimizer-RRRRR-of-NNNNN.safetensors, one per rank (train/shard_checkpoint.h).
// defines: TrainerState, read_trainer_state, save_checkpoint, load_checkpoint, latest_checkpoint,
//          checkpoint_step_dir, checkpoint_temp_dir, check_checkpoint_model,
//          load_model_weights, trainer_state_from_json
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "data/loader.h"
#include "io/json_fwd.h"
#include "model/llama.h"
#include "train/shard_checkpoint.h"

namespace octet::train {

struct TrainerState {
  int64_t step = 0;  // optimizer steps done
  data::LoaderPosition data_position;
  std::string precision, recipe;  // what the run was, to refuse resuming into another
  int64_t schedule_steps = 0;     // the steps its lr cosine is planned over (0: not recorded)
  std::string tokenizer;          // save: a tokenizer file copied into the checkpoint (or "")
  // precision is the policy in force; the guard may have switched an fp8 run to bf16, then
  // requested_precision is "fp8" (empty: the same as precision).
  std::string requested_precision;
  double wall_s = 0.0;        // training wall time so far
  int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient norm
  bool guard_passed = false;  // the guard's last check before this checkpoint passed
  // Data parallel: the master and AdamW moments saved per shard (train/shard_checkpoint.h),
  // not in trainer_state.safetensors. On save, shard_staging is the directory holding every
  // rank's file: moved into the step directory, unless it is checkpoint_temp_dir() itself.
  std::optional<ShardLayout> optimizer_shards;
  std::string shard_staging;
};

// The trainer_state.json of a step directory alone (no tensors read).
TrainerState read_trainer_state(const std::string& step_dir);

// Writes a checkpoint of `model` (master weights), the AdamW moments m and v (f32 [P]; not
// used, may be empty, with state.optimizer_shards) and `state`. The step directory is written under
// a temporary name and renamed, then `latest` is replaced atomically: a failure at any point leaves
// the previous checkpoint and `latest` as they were. Returns the step directory.
std::string save_checkpoint(const std::string& dir, const model::Llama& model, const Tensor& m,
                            const Tensor& v, const TrainerState& state);

// The step directory save_checkpoint(dir, ...) of `step` makes: <dir>/step_NNNNNNNN.
std::string checkpoint_dir(const std::string& dir, int64_t step);

// Where save_checkpoint(dir, ...) of `step` in process `pid` writes before the rename:
// <dir>/step_NNNNNNNN.tmp-PID (a stale one is removed at the next start).
std::string checkpoint_temp_dir(const std::string& dir, int64_t step, int64_t pid);

// The step directory `latest` names in `dir`; throws naming the file when there is none.
std::string latest_checkpoint(const std::string& dir);

// The step directory a command's `--checkpoint DIR` names: the one DIR's `latest` names (a run
// directory: its HF links make it look like a step directory, but the trainer state is only in
// the step directory), else DIR itself when it holds model.safetensors. Throws
// "[op] --checkpoint DIR holds no checkpoint to <purpose> ..." when it is neither.
std::string checkpoint_step_dir(const std::string& dir, const char* op, const char* purpose);

// Throws naming the file when the step directory's config.json has another model shape.
void check_checkpoint_model(const std::string& step_dir, const model::Llama& model);

// Reads the model weights of a step directory (model.safetensors) into model.master()
// and syncs the working weights. Every parameter must be present with its shape.
void load_model_weights(const std::string& step_dir, model::Llama& model);

// The trainer_state.json of a checkpoint (`where` names it in errors): every field present,
// no unknown ones, and `parameters` equal to `parameter_count` (not checked when it is < 0).
TrainerState trainer_state_from_json(const Json& js, const std::string& where,
                                     int64_t parameter_count);

// Reads everything save_checkpoint wrote back into model, m, v; returns the state. m and v
// come from trainer_state.safetensors or, for a checkpoint saved per shard, from the shard
// files whatever their number.
TrainerState load_checkpoint(const std::string& step_dir, model::Llama& model, const Tensor& m,
                             const Tensor& v);

}  // namespace octet::train
