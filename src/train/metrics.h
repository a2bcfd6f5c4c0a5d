// train/metrics.h: what a run reports per optimizer step, and the metrics file: JSON lines,
// one record per step, with the validation loss at evaluations, the convergence guard's
// checks and actions, and each layer's FP8 health (per operand) at log steps.
// defines: GuardRecord, StepRecord, Fp8OperandStats, LayerFp8Stats, metrics_record, MetricsFile
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp8/stats.h"
#include "io/json_fwd.h"

namespace octet::train {

// One check of the convergence guard (train/guard.h): the validation loss under the fp8
// policy and under the bf16 policy with the same master weights, and what it did.
struct GuardRecord {
  double fp8_loss = 0.0, bf16_loss = 0.0;
  double gap = 0.0;  // (fp8_loss - bf16_loss) / bf16_loss
  bool passed = true;
  int64_t strikes = 0;                   // consecutive failed checks, this one included
  std::string action = "none";           // none | warn | fallback | rollback
  std::optional<int64_t> rollback_step;  // the checkpoint a rollback reloaded
};

// What one optimizer step reports (the metrics line of that step).
struct StepRecord {
  int64_t step = 0;
  double loss = 0.0;  // mean over the step's micro-batches
  double lr = 0.0;
  double grad_norm = 0.0;  // before clipping
  double tokens_per_s = 0.0;
  std::optional<double> val_loss;
  std::string precision = "bf16";     // the policy in force at this step (the guard may switch)
  double wall_s = 0.0;                // training wall time since the run began (across resumes)
  bool skipped = false;               // the update was skipped (non-finite loss or gradient norm)
  int64_t skipped_steps = 0;          // skipped updates so far in the run
  std::optional<GuardRecord> guard;   // on steps where the guard checked
  std::vector<std::string> warnings;  // FP8 health and guard warnings raised at this step
};

// A layer's FP8 statistics per GEMM operand: its input x, its weight W and the output
// gradient dY (each of the last counted quantization).
struct Fp8OperandStats {
  fp8::Fp8Stats x, w, dy;
};
// A layer's FP8 statistics by its name ("layers.0.qkv").
using LayerFp8Stats = std::pair<std::string, Fp8OperandStats>;

// {"step":..,"loss":..,"lr":..,"tokens_per_s":..,"grad_norm":..,"precision":..,"wall_s":..,
// "skipped_steps":..} plus "skipped": true on a skipped step, "val_loss" when the step was
// evaluated, "guard": {...} when the guard checked, "fp8": {layer name: {"x": Fp8Stats::json(),
// "w": .., "dy": ..}} when `fp8` is not empty, and "warnings": [..] when there are any.
// A non-finite number (a diverged loss) is written as null: JSON has no NaN.
Json metrics_record(const StepRecord& r, const std::vector<LayerFp8Stats>& fp8 = {});

// A metrics file (JSON lines) open for writing, or none.
class MetricsFile {
 public:
  MetricsFile() = default;
  // Creates `path`, or appends to it (a resumed run); throws octet::Error when it cannot.
  MetricsFile(const std::string& path, bool append);
  ~MetricsFile();
  MetricsFile(MetricsFile&& other) noexcept;
  MetricsFile& operator=(MetricsFile&& other) noexcept;

  bool is_open() const { return file_ != nullptr; }
  // Writes metrics_record(r, fp8) as one line and flushes it, so that a crashed run keeps
  // its records. Does nothing when no file is open.
  void write(const StepRecord& r, const std::vector<LayerFp8Stats>& fp8 = {});

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace octet::train
