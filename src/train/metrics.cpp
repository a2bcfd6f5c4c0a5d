// train/metrics.cpp
#include "train/metrics.h"

#include <utility>

#include "core/error.h"
#include "io/json.h"

namespace octet::train {

Json metrics_record(const StepRecord& r, const std::vector<LayerFp8Stats>& fp8) {
  Json j = Json::object();
  j["step"] = r.step;
  j["loss"] = json_finite_or_null(r.loss);
  j["lr"] = json_finite_or_null(r.lr);
  j["tokens_per_s"] = json_finite_or_null(r.tokens_per_s);
  j["grad_norm"] = json_finite_or_null(r.grad_norm);
  j["precision"] = r.precision;
  j["wall_s"] = json_finite_or_null(r.wall_s);
  j["skipped_steps"] = r.skipped_steps;
  if (r.skipped) j["skipped"] = true;
  if (r.val_loss) j["val_loss"] = json_finite_or_null(*r.val_loss);
  if (r.guard) {
    const GuardRecord& g = *r.guard;
    Json gj = Json::object();
    gj["fp8_loss"] = json_finite_or_null(g.fp8_loss);
    gj["bf16_loss"] = json_finite_or_null(g.bf16_loss);
    gj["gap"] = json_finite_or_null(g.gap);
    gj["passed"] = g.passed;
    gj["strikes"] = g.strikes;
    gj["action"] = g.action;
    if (g.rollback_step) gj["rollback_step"] = *g.rollback_step;
    j["guard"] = std::move(gj);
  }
  if (!fp8.empty()) {
    Json layers = Json::object();
    for (const auto& [name, stats] : fp8) {
      Json operands = Json::object();
      operands["x"] = stats.x.json();
      operands["w"] = stats.w.json();
      operands["dy"] = stats.dy.json();
      layers[name] = std::move(operands);
    }
    j["fp8"] = std::move(layers);
  }
  if (!r.warnings.empty()) j["warnings"] = r.warnings;
  return j;
}

MetricsFile::MetricsFile(const std::string& path, bool append)
    : file_(std::fopen(path.c_str(), append ? "a" : "w")) {
  OCTET_CHECK(file_ != nullptr, "train", path, ": cannot open the metrics file");
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

MetricsFile::MetricsFile(MetricsFile&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)) {}

MetricsFile& MetricsFile::operator=(MetricsFile&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

void MetricsFile::write(const StepRecord& r, const std::vector<LayerFp8Stats>& fp8) {
  if (!file_) return;
  const std::string line = json_dump(metrics_record(r, fp8)) + "\n";
  OCTET_CHECK(
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
      "train", "cannot write the metrics file (disk full?)");
}

}  // namespace octet::train
