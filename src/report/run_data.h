// report/run_data.h: one training run as the report reads it: its run.json (config, commit,
// machine) and its metrics file (JSON lines), with every field the trainer may or may not
// have written (older files lack precision, wall_s, guard and per-operand FP8 health): what
// is missing is NaN or empty, never an error.
// defines: RunRecord, GuardPoint, HealthGrid, RunData, load_run, run_wall_times
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/json.h"

namespace octet::report {

// One metrics line. NaN where the file has null or nothing.
struct RunRecord {
  int64_t step = 0;
  double loss = 0, val_loss = 0, tokens_per_s = 0, wall_s = 0, grad_norm = 0;
  std::string precision;  // "" when the record does not say
  bool skipped = false;
};

// One check of the convergence guard.
struct GuardPoint {
  int64_t step = 0;
  size_t record = 0;  // index of its metrics line in RunData::records (steps repeat after a
                      // rollback; the line does not)
  double fp8_loss = 0, bf16_loss = 0, gap = 0;
  bool passed = true;
  int64_t strikes = 0;
  std::string action = "none";
  std::optional<int64_t> rollback_step;
};

// FP8 health as rows (a layer's operand: "layers.0.qkv x") by columns (the steps that
// reported it): the saturated and flushed shares, NaN where a row has no value at a step.
struct HealthGrid {
  std::vector<std::string> rows;
  std::vector<int64_t> steps;
  std::vector<double> saturated, flushed;  // rows.size() x steps.size(), row-major
  double at(const std::vector<double>& v, size_t row, size_t col) const {
    return v[row * steps.size() + col];
  }
};

struct RunData {
  std::string name;  // the directory's (or file's) name
  std::string path;
  Json info;  // run.json, or null when the run has none
  std::vector<RunRecord> records;
  std::vector<GuardPoint> guard;
  std::vector<std::pair<int64_t, std::string>> warnings;  // step, text
  HealthGrid health;
  // The run's precision: run.json's config, else the first record's, else "".
  std::string precision() const;
};

// Reads a run: a directory (run.json, and the metrics file run.json's config names or
// metrics.jsonl), or a metrics file itself. Throws octet::Error ("[report] ...") when there
// are no metrics or a line is not JSON (naming the file and line).
RunData load_run(const std::string& path);

// Seconds of training at each record: wall_s where the records have it, else the sum of
// tokens_per_step / tokens_per_s (tokens_per_step from run.json); empty when neither is known.
std::vector<double> run_wall_times(const RunData& run);

}  // namespace octet::report
