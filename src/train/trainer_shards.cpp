// train/trainer_shards.cpp: the trainer's data-parallel checkpoint: each rank writes its
// shard of the optimizer state (fp32 master, AdamW m and v) into the step's temporary
// directory, the master is gathered on rank 0 only for model.safetensors, and rank 0 writes
// the rest and renames it, recording the shards' layout (train/shard_checkpoint.h); a resume
// reads back only the ranges each rank holds.
#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace octet::train {

void Trainer::save_sharded(const TrainerState& state) {
  namespace fs = std::filesystem;
  dist::Comm& comm = *comm_;
  const int ranks = comm.size();
  // Straight into the directory rank 0's save_checkpoint writes before renaming it (its
  // pid in the name: a crash leaves it to the next start's cleanup of stale ones).
  int32_t pid = static_cast<int32_t>(::getpid());
  comm.broadcast(Tensor(&pid, DType::i32, {1}), 0);
  const std::string staging = checkpoint_temp_dir(config_.out_dir, state.step, pid);
  std::error_code ec;
  fs::create_directories(staging, ec);
  OCTET_CHECK(!ec, "checkpoint", staging, ": cannot create the directory: ", ec.message());
  const dist::DataParallel::Shard shard = dp_->optimizer_shard();
  write_optimizer_shard(staging + "/" + optimizer_shard_file(comm.rank(), ranks), shard.begin,
                        shard.master, shard.m, shard.v);
  dp_->gather_master_on_root();  // rank 0's model.safetensors; the others keep their shard
  comm.barrier();                // every shard file is complete
  if (comm.rank() == 0) {
    TrainerState s = state;
    ShardLayout layout;
    for (int r = 0; r <= ranks; ++r)
      layout.offsets.push_back(r < ranks ? dp_->partition().begin(r) : dp_->partition().total());
    layout.parameters = dp_->partition().total();
    s.optimizer_shards = layout;
    s.shard_staging = staging;
    save_checkpoint(config_.out_dir, *model_, Tensor(), Tensor(), s);
  }
  dp_->reshard_master();
  comm.barrier();  // the step directory and `latest` are complete
}

TrainerState Trainer::load_sharded(const std::string& step_dir) {
  const std::string json_path = step_dir + "/trainer_state.json";
  const TrainerState s =
      trainer_state_from_json(read_json_file(json_path), json_path, model_->parameter_count());
  if (!s.optimizer_shards) {
    // One file (a one-process checkpoint): the moments read whole, this rank's shard kept.
    const auto [m, v] = dp_->full_moments();
    const TrainerState loaded = load_checkpoint(step_dir, *model_, m, v);
    dp_->moments_loaded();
    return loaded;
  }
  check_checkpoint_model(step_dir, *model_);
  const ShardLayout& layout = *s.optimizer_shards;
  model::Llama& model = *model_;
  // The fp32 master this rank holds (its shard under ZeRO 1, all of it otherwise), from the
  // shard files that overlap it, then the working weights rounded and gathered.
  read_optimizer_range(step_dir, layout, model.master_begin(), model.master_end(),
                       model.master_shard(), Tensor(), Tensor());
  dp_->master_loaded();
  // The moments: this rank's shard (ZeRO 1) or all of them (ZeRO 0).
  if (dp_->zero() == 0) {
    const auto [m, v] = dp_->full_moments();
    read_optimizer_range(step_dir, layout, 0, layout.parameters, Tensor(), m, v);
  } else {
    const dist::DataParallel::Shard shard = dp_->optimizer_shard();
    read_optimizer_range(step_dir, layout, shard.begin, shard.begin + shard.m.numel(), Tensor(),
                         shard.m, shard.v);
  }
  const SafetensorsFile file = SafetensorsFile::open(step_dir + "/trainer_state.safetensors");
  for (const auto& [name, tensor] : model.scaling_state_tensors()) file.read(name, tensor);
  model.scaling_state_loaded();
  return s;
}

}  // namespace octet::train
