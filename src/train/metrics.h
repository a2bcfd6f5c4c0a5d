// train/metrics.h: what a run reports per optimizer step, and the metrics file: JSON lines,
// one record per step, with the validation loss and each layer's FP8 health at evaluations.
// defines: StepRecord, LayerFp8Stats, metrics_record, MetricsFile
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

// What one optimizer step reports (the metrics line of that step).
struct StepRecord {
  int64_t step = 0;
  double loss = 0.0;  // mean over the step's micro-batches
  double lr = 0.0;
  double grad_norm = 0.0;  // before clipping
  double tokens_per_s = 0.0;
  std::optional<double> val_loss;
};

// A layer's FP8 statistics by its name ("layers.0.qkv").
using LayerFp8Stats = std::pair<std::string, fp8::Fp8Stats>;

// {"step":..,"loss":..,"lr":..,"tokens_per_s":..,"grad_norm":..} plus, when the step was
// evaluated, "val_loss" and (when `fp8` is not empty) "fp8": {layer name: Fp8Stats::json()}.
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
