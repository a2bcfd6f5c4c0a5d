// train/trainer.h: the training loop: micro-batches with gradient accumulation, global
// gradient clipping, AdamW on fp32 master weights, the cosine schedule, evaluation on
// the held-out split, metrics, checkpoints, a clean stop on Ctrl-C, skipped updates on a
// non-finite loss or gradient norm, and the FP8 convergence guard (train/guard.h).
// defines: Trainer, request_stop
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/buffer.h"
#include "data/loader.h"
#include "model/llama.h"
#include "train/config.h"
#include "train/guard.h"
#include "train/metrics.h"
#include "train/optimizer.h"

namespace octet::dist {
class Comm;
class DataParallel;
}  // namespace octet::dist

namespace octet::train {

struct TrainerState;

class Trainer {
 public:
  explicit Trainer(const TrainConfig& config);
  // Data parallel over comm's ranks when it has more than one (dist/data_parallel.h): each
  // rank reads its slice of every global batch of config.batch x comm->size() sequences;
  // metrics, progress lines and checkpoint files come from rank 0.
  Trainer(const TrainConfig& config, std::shared_ptr<dist::Comm> comm);
  ~Trainer();

  // Runs from the current step to config.steps (or until request_stop()), evaluating,
  // writing metrics and checkpoints as configured. Returns the records of the steps run.
  std::vector<StepRecord> run();
  // Called after every step with its record (progress hooks, tests).
  std::function<void(const StepRecord&)> on_step;
  // Mean loss over config.eval_batches batches of the validation split (the same
  // batches every time).
  double evaluate();

  int64_t step() const { return step_; }
  model::Llama& model() { return *model_; }
  dist::DataParallel* data_parallel() { return dp_.get(); }  // nullptr on one rank
  // The synthetic corpus' best possible loss (nats per token), or nullopt for shards.
  std::optional<double> loss_floor() const { return loss_floor_; }
  // Writes a checkpoint now (out_dir must be set); returns its directory.
  std::string save();
  // One optimizer step over config.grad_accum micro-batches (what run() repeats). It
  // only queues work on a GPU: the returned record's loss and grad_norm are filled in
  // by read_back() (run() does so every log_every steps on a GPU, every step on the CPU).
  StepRecord train_step();
  // Waits for the queued steps and fills in the loss and grad_norm of `records`, the
  // last records.size() steps (at most stats_window() of them).
  void read_back(std::vector<StepRecord>& records);
  int64_t stats_window() const { return window_; }

  // The precision in force (the guard may have switched an fp8 run to bf16).
  nn::Precision precision() const { return config_.precision; }
  int64_t skipped_steps() const { return skipped_steps_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  // Seconds the guard's checks took so far (both evaluations and the weight copy).
  double guard_seconds() const { return guard_seconds_; }
  // Test-only fault injection: called in each step after the backward passes, before the
  // optimizer (a test writes NaN into the gradients here).
  std::function<void(Trainer&)> after_backward;

 private:
  void write_metrics(const StepRecord& r, bool with_fp8);
  double evaluate(model::Llama& m);
  // train/trainer_guard.cpp: one guard check at the current step, recorded in r, and the
  // action it calls for.
  void guard_check(StepRecord& r);
  // The last checkpoint whose guard check passed (up to this step), the same on every rank.
  std::optional<PassedCheckpoint> rollback_checkpoint();
  // Continues under bf16: from the current weights and moments, or from a checkpoint.
  void switch_to_bf16(const std::string& checkpoint_dir);
  // The same on every rank of a data-parallel run, together (trainer_guard_ranks.cpp).
  void switch_ranks_to_bf16(const std::string& checkpoint_dir);
  // Data parallel: every rank writes its optimizer shard, rank 0 the rest (trainer_shards.cpp).
  void save_sharded(const TrainerState& state);
  // Data parallel: a resume, each rank reading only the ranges it holds of a checkpoint
  // saved per shard (or its shard of a one-process checkpoint).
  TrainerState load_sharded(const std::string& step_dir);

  TrainConfig config_;
  std::unique_ptr<model::Llama> model_;
  std::unique_ptr<data::TokenLoader> train_loader_, val_loader_;
  std::optional<double> loss_floor_;
  std::unique_ptr<Optimizer> optimizer_;
  std::shared_ptr<dist::Comm> comm_;
  std::unique_ptr<dist::DataParallel> dp_;  // with more than one rank, instead of optimizer_
  Buffer batch_, host_batch_;
  // Per step, on the device: the mean loss and the gradients' sum of squares, for the
  // last window_ steps (slot (step - 1) % window_), read back together.
  Arena stats_;
  Arena::Region step_loss_ = -1, step_grad_sum_sq_ = -1, eval_loss_ = -1;
  Arena::Region stop_flag_ = -1;  // data parallel: the stop request, max-reduced over ranks
  // Whether the run stops now: this process's request (Ctrl-C), or under data parallelism
  // any rank's, agreed by every rank at the same step boundary (trainer_stop.cpp).
  bool agreed_stop();
  int64_t window_ = 1;
  Tensor inputs_, targets_, host_inputs_, host_targets_;
  int64_t step_ = 0;
  MetricsFile metrics_;

  // The guard: a bf16 twin of an fp8 model (it evaluates the fp8 model's master weights
  // under bf16, and is the model a fallback continues with).
  std::unique_ptr<Guard> guard_;
  std::unique_ptr<model::Llama> shadow_;
  std::string requested_precision_;  // the --precision asked for
  double guard_seconds_ = 0.0;
  // FP8 health of the last counted step, and that step.
  std::vector<LayerFp8Stats> fp8_stats_;
  int64_t counted_step_ = -1;
  int64_t skipped_steps_ = 0, skipped_in_a_row_ = 0;
  double wall_s_ = 0.0;  // training wall time at the last read-back
};

// Asks a running Trainer::run() to stop after the current step (what Ctrl-C does); it
// then writes a checkpoint when out_dir is set and returns.
void request_stop();
bool stop_requested();
void clear_stop_request();

}  // namespace octet::train
