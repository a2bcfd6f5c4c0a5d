// train/compare.h: time to a target loss, per precision: `octet compare` trains the same model
// from the same seed on the same data under each precision, evaluates every eval_every steps,
// and stops each run when its validation loss reaches the target (or at the step limit). It
// reports the steps, tokens and training seconds to the target (evaluation time excluded) and
// the throughput, and for each precision its speedup over the baseline (bf16 when compared)
// in time to target next to its speedup in tokens/s: FP8's faster steps are worth something
// only when it needs no more of them.
// defines: CompareOptions, TargetRun, CompareResult, compare_precisions, compare_json,
//          compare_table
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/json_fwd.h"
#include "train/config.h"

namespace octet::train {

struct CompareOptions {
  TrainConfig base;  // everything but the precision; base.steps is the step limit
  std::vector<nn::Precision> precisions = {nn::Precision::bf16, nn::Precision::fp8};
  double target_loss = 0;
  int64_t eval_every = 10;  // steps between validation losses (base.eval_batches batches)
  // Each run's directory (run.json, metrics.jsonl, its last checkpoint) is out_dir/<precision>;
  // empty: nothing is written.
  std::string out_dir;
  bool quiet = false;  // no progress lines
};

// One precision's run.
struct TargetRun {
  std::string precision;
  bool reached = false;
  int64_t steps = 0;        // to the target when reached, else the steps run
  int64_t tokens = 0;       // trained on in those steps
  double train_s = 0;       // training seconds in those steps (no evaluation)
  double eval_s = 0;        // seconds spent evaluating
  double val_loss = 0;      // at the stop
  double tokens_per_s = 0;  // tokens / train_s
  std::vector<std::pair<int64_t, double>> val_curve;  // (step, val loss) of each evaluation
};

struct CompareResult {
  std::string model;
  double target_loss = 0;
  std::optional<double> loss_floor;  // the synthetic corpus' floor
  size_t baseline = 0;               // index in runs: bf16 when compared, else the first
  std::vector<TargetRun> runs;
};

// Runs each precision in turn. Throws octet::Error for bad options (an empty list, a
// non-positive eval_every or target).
CompareResult compare_precisions(const CompareOptions& options);

// {"model", "target_loss", "loss_floor", "baseline", "runs": [{"precision", "reached",
// "steps", "tokens", "wall_s" (null when not reached), "steps_run", "tokens_run", "wall_s_run",
// "eval_s", "tokens_per_s", "val_loss", "val_curve", "speedup_time_to_target" (null unless
// both reached), "speedup_tokens_per_s"}], "fp8_speedup": {"time_to_target", "tokens_per_s"}
// (when bf16 and fp8 were compared)}.
Json compare_json(const CompareResult& result);

// The table `octet compare` prints.
std::string compare_table(const CompareResult& result);

}  // namespace octet::train
