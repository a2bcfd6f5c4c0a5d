// train/trainer_guard.cpp: the trainer's side of the FP8 convergence guard: a check
// evaluates the same validation batches with the same master weights under the fp8 policy
// (the run's model) and under the bf16 policy (its bf16 twin); the actions switch the run
// to bf16, from the current weights (fallback) or from the last checkpoint whose check
// passed (rollback).
#include <chrono>
#include <filesystem>

#include "core/clock.h"
#include "core/error.h"
#include "dist/data_parallel.h"
#include "io/atomic_file.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace octet::train {
namespace {

// The master weights and, when given, the AdamW moments from one model to another of the
// same layout (on the same device).
void copy_f32(const Tensor& from, const Tensor& to) {
  OCTET_CHECK(from.numel() == to.numel(), "guard", "cannot copy ", from.numel(), " values into ",
              to.numel());
  copy_bytes(to.data, to.device, from.data, from.device, static_cast<size_t>(from.numel()) * 4);
}

}  // namespace

void Trainer::guard_check(StepRecord& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const double fp8_loss = r.val_loss ? *r.val_loss : evaluate(*model_);
  // "Load the FP8 checkpoint into BF16": the same master weights, no FP8 GEMMs.
  if (dp_) {
    dp_->gather_master(shadow_->master());  // under ZeRO 1 each rank holds one shard
  } else {
    copy_f32(model_->master(), shadow_->master());
  }
  shadow_->sync_working_weights();
  const double bf16_loss = evaluate(*shadow_);
  GuardRecord g = guard_->judge(fp8_loss, bf16_loss);
  if (g.action == "rollback") {
    const std::optional<PassedCheckpoint> cp = rollback_checkpoint();
    if (cp) {
      switch_to_bf16(cp->dir);
      g.rollback_step = cp->step;
    } else {
      r.warnings.push_back(
          config_.out_dir.empty()
              ? "guard: no --out directory, so no checkpoint to roll back to; falling back to "
                "bf16 from the current weights"
              : "guard: no checkpoint in " + config_.out_dir +
                    " passed a check; falling back to bf16 from the current weights");
      g.action = "fallback";
    }
  }
  if (g.action == "fallback") switch_to_bf16("");
  if (g.action == "warn") {
    r.warnings.push_back("guard: fp8 validation loss above bf16's by more than the tolerance at " +
                         std::to_string(guard_->config().patience) + " checks in a row");
  }
  r.guard = g;
  guard_seconds_ += seconds_since(t0);
}

std::optional<PassedCheckpoint> Trainer::rollback_checkpoint() {
  if (!dp_) return last_passed_checkpoint(config_.out_dir, step_);
  // Rank 0 reads the folder and tells the others, so that every rank returns to the same
  // step however its view of the folder lags (a network file system's cache) and whatever
  // it would have read of a checkpoint being deleted.
  int64_t step = -1;
  if (comm_->rank() == 0) {
    if (const auto cp = last_passed_checkpoint(config_.out_dir, step_)) step = cp->step;
  }
  comm_->broadcast(Tensor(&step, DType::u8, {sizeof step}), 0);
  if (step < 0) return std::nullopt;
  return PassedCheckpoint{step, checkpoint_dir(config_.out_dir, step)};
}

void Trainer::switch_to_bf16(const std::string& checkpoint_dir) {
  if (dp_) {
    switch_ranks_to_bf16(checkpoint_dir);
    return;
  }
  TrainConfig bf16 = config_;
  bf16.precision = nn::Precision::bf16;
  auto optimizer = std::make_unique<Optimizer>(*shadow_, bf16);
  if (checkpoint_dir.empty()) {
    copy_f32(model_->master(), shadow_->master());
    shadow_->sync_working_weights();
    copy_f32(optimizer_->m(), optimizer->m());
    copy_f32(optimizer_->v(), optimizer->v());
  } else {
    // The fp8 checkpoint's FP8 scaling state has no place in a bf16 model: it is not read.
    const TrainerState s =
        load_checkpoint(checkpoint_dir, *shadow_, optimizer->m(), optimizer->v());
    step_ = s.step;
    train_loader_->seek(s.data_position);
    // The checkpoints after it are of the failed fp8 stretch: a resume starts from this one
    // (they are replaced as the bf16 run reaches their steps).
    const std::string name = std::filesystem::path(checkpoint_dir).filename().string();
    write_file_atomic(config_.out_dir + "/latest", name + "\n");
  }
  model_ = std::move(shadow_);
  optimizer_ = std::move(optimizer);
  config_.precision = nn::Precision::bf16;
  guard_.reset();
  fp8_stats_.clear();
  counted_step_ = -1;
}

}  // namespace octet::train
