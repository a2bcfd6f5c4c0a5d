// tests/train/training_testing.h: what the trainer tests on each device share: the
// tiny run on the synthetic corpus and tiny with a 64-token vocabulary.
// defines: write_tiny64, tiny_run
#pragma once

#include <fstream>
#include <string>

#include "temp_dir.h"
#include "train/config.h"

namespace octet::train {

// tiny with a 64-token vocabulary, as a config file (the JSON path of --model).
inline std::string write_tiny64(const testing::TempDir& dir) {
  const std::string path = dir.file("tiny64.json");
  std::ofstream(path) << R"({"vocab_size": 64, "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64})";
  return path;
}

inline TrainConfig tiny_run(const std::string& model, nn::Precision precision, int64_t steps) {
  TrainConfig c;
  c.model = model;
  c.precision = precision;
  c.steps = steps;
  c.lr = 1e-2;
  c.warmup = 20;
  c.eval_every = 0;
  c.quiet = true;
  c.data.markov_vocab = 64;  // tiny learns a 64-token order-1 source in a few hundred steps
  c.data.train_tokens = 1 << 18;
  c.data.val_tokens = 1 << 14;
  return c;
}

}  // namespace octet::train
