// train/trainer_guard_ranks.cpp: the guard's switch to bf16 under data parallelism. Every
// rank judged the same global validation losses, so every rank switches at the same step:
// the bf16 twin gets the whole fp32 master (fallback: gathered from the shards; rollback:
// read from the checkpoint's shard files) and a DataParallel of its own, with the moments
// of the rank's shard carried over (fallback) or read back (rollback).
#include <filesystem>

#include "core/buffer.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "io/atomic_file.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace octet::train {

void Trainer::switch_ranks_to_bf16(const std::string& checkpoint_dir) {
  const dist::AdamWConfig adamw{config_.beta1, config_.beta2, config_.eps, config_.weight_decay,
                                config_.grad_clip};
  const int zero = dp_->zero();
  if (checkpoint_dir.empty()) {
    // Fallback: the current weights and moments.
    dp_->gather_master(shadow_->master());
    shadow_->sync_working_weights();
    auto dp = std::make_unique<dist::DataParallel>(comm_, *shadow_, zero, adamw);
    if (zero == 0) {
      const auto [m, v] = dp_->full_moments();  // ZeRO 0: the buffers themselves
      const auto [to_m, to_v] = dp->full_moments();
      copy_bytes(to_m.data, to_m.device, m.data, m.device, static_cast<size_t>(m.numel()) * 4);
      copy_bytes(to_v.data, to_v.device, v.data, v.device, static_cast<size_t>(v.numel()) * 4);
    } else if (dp->partition() != dp_->partition()) {
      // --fp8-comm weights aligned the fp8 run's partition: the moments move whole.
      const auto [m, v] = dp_->full_moments();
      const auto [to_m, to_v] = dp->full_moments();
      copy_bytes(to_m.data, to_m.device, m.data, m.device, static_cast<size_t>(m.numel()) * 4);
      copy_bytes(to_v.data, to_v.device, v.data, v.device, static_cast<size_t>(v.numel()) * 4);
      dp->moments_loaded();
      dp_->drop_full_moments();
    } else {
      const dist::DataParallel::Shard from = dp_->optimizer_shard(), to = dp->optimizer_shard();
      const size_t bytes = static_cast<size_t>(from.m.numel()) * 4;
      copy_bytes(to.m.data, to.m.device, from.m.data, from.m.device, bytes);
      copy_bytes(to.v.data, to.v.device, from.v.data, from.v.device, bytes);
    }
    dp_ = std::move(dp);
    model_ = std::move(shadow_);
  } else {
    // Rollback: the checkpoint's weights and moments, each rank its ranges of them.
    dp_ = std::make_unique<dist::DataParallel>(comm_, *shadow_, zero, adamw);
    model_ = std::move(shadow_);
    const TrainerState s = load_sharded(checkpoint_dir);
    step_ = s.step;
    train_loader_->seek(s.data_position);
    // As one process does: a resume starts from this checkpoint.
    if (comm_->rank() == 0) {
      const std::string name = std::filesystem::path(checkpoint_dir).filename().string();
      write_file_atomic(config_.out_dir + "/latest", name + "\n");
    }
    comm_->barrier();
  }
  config_.precision = nn::Precision::bf16;
  guard_.reset();
  fp8_stats_.clear();
  counted_step_ = -1;
}

}  // namespace octet::train
