// train/config.h: everything a training run is made of, with the defaults `octet train`
// uses, and the learning-rate schedule.
// defines: TrainConfig, DataConfig, GuardAction, GuardConfig, lr_at
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dist/fp8_comm.h"
#include "fp8/recipe.h"
#include "nn/precision.h"
#include "train/retention.h"

namespace octet::train {

struct DataConfig {
  // "synthetic" (the built-in Markov corpus) or a directory of token shards
  // (train_*.bin and val_*.bin, as `octet tokenize` writes them).
  std::string source = "synthetic";
  int markov_vocab = 0;        // synthetic: tokens the source uses (0: the model's vocab_size)
  int markov_order = 1;        // synthetic: context length of the source
  int markov_support_min = 2;  // synthetic: next-token choices per context
  int markov_support_max = 8;
  uint64_t markov_seed = 0;
  int64_t train_tokens = 1 << 20;  // synthetic: stream lengths
  int64_t val_tokens = 1 << 16;
};

// What the convergence guard does after `patience` failed checks (train/guard.h).
enum class GuardAction : unsigned char {
  warn,      // only report it
  fallback,  // continue from the current weights under bf16
  rollback,  // reload the last checkpoint whose check passed, continue under bf16
};

struct GuardConfig {
  std::optional<bool> enabled;  // nullopt: on under fp8, off otherwise
  int64_t every = 0;            // steps between checks; 0: at each evaluation
  double tolerance = 0.005;     // fp8 loss may exceed the bf16 loss by this (relative)
  int64_t patience = 2;         // consecutive failed checks before acting
  GuardAction action = GuardAction::rollback;
};

struct TrainConfig {
  std::string model = "tiny";  // a name (tiny, small, 1b, 7b) or a config.json path
  nn::Precision precision = nn::Precision::bf16;
  fp8::Recipe recipe;  // under fp8 (default tensor-current); parsed by fp8::Recipe::parse
  std::string device = "cpu";
  DataConfig data;

  int64_t batch = 8;       // sequences per micro-batch
  int64_t seq_len = 0;     // 0: the model's max_position_embeddings
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  int64_t steps = 200;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;  // the cosine ends at lr * min_lr_ratio
  int64_t warmup = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;  // max global gradient norm; 0 disables clipping
  uint64_t seed = 1;       // weights and data order

  int64_t eval_every = 50;  // steps; 0: only at the end
  int64_t eval_batches = 8;
  int64_t checkpoint_every = 0;  // steps; 0: only at the end (and on Ctrl-C)
  int64_t log_every = 1;         // progress lines
  std::string out_dir;           // checkpoints; empty: none
  RetentionPolicy retention;     // which checkpoints stay (--keep-last, --keep-every)
  std::string metrics;           // JSON lines file; empty: none
  bool resume = false;           // continue from out_dir's latest checkpoint
  // The number of steps the cosine is planned over; 0: steps. A resumed run keeps the
  // checkpoint's plan (a larger --steps continues at the final lr) unless extend_schedule.
  int64_t schedule_steps = 0;
  bool extend_schedule = false;  // resume: re-plan the cosine over `steps`
  bool quiet = false;            // no progress lines

  GuardConfig guard;              // the FP8 convergence guard (only under fp8)
  int64_t max_skipped_steps = 5;  // consecutive non-finite steps before the run stops
  int zero = -1;  // data parallel: 0 (all-reduce), 1 (sharded AdamW), 2 (and grads); -1: 1
  dist::Fp8Comm fp8_comm = dist::Fp8Comm::none;  // data parallel under fp8: FP8 collectives
  // ZeRO 2: the gradient buckets' size in MiB (DDP's default)
  double bucket_mb = 25;
};

// Linear warmup to lr over `warmup` steps, then a cosine to lr * min_lr_ratio at
// `schedule_steps` (0: `steps`), and lr * min_lr_ratio after it. step counts from 1.
double lr_at(const TrainConfig& config, int64_t step);

}  // namespace octet::train
