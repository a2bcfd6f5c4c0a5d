// train/config.h: everything a training run is made of, with the defaults `octet train`
// uses, and the learning-rate schedule.
// defines: TrainConfig, DataConfig, lr_at
#pragma once

#include <cstdint>
#include <string>

#include "fp8/recipe.h"
#include "nn/precision.h"

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
  std::string metrics;           // JSON lines file; empty: none
  bool resume = false;           // continue from out_dir's latest checkpoint
  bool quiet = false;            // no progress lines
  int zero = -1;  // data parallel: 0 (all-reduce) or 1 (sharded AdamW state); -1: 1 on > 1 rank
};

// Linear warmup to lr over `warmup` steps, then a cosine to lr * min_lr_ratio at `steps`.
// step counts from 1.
double lr_at(const TrainConfig& config, int64_t step);

}  // namespace octet::train
