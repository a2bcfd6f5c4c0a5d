// train/trainer_shards.cpp: the trainer's data-parallel checkpoint: each rank writes its
// shard of the optimizer state (fp32 master, AdamW m and v) into the step's temporary
// directory, the master is gathered for model.safetensors, and rank 0 writes the rest and
// renames it, recording the shards' layout (train/shard_checkpoint.h).
#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
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
  dp_->gather_whole_master();
  comm.barrier();  // every shard file is complete
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

}  // namespace octet::train
