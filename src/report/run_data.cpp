// report/run_data.cpp
#include "report/run_data.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"

namespace octet::report {
namespace fs = std::filesystem;
namespace {

double number_or_nan(const Json& obj, const char* key) {
  if (!obj.is_object()) return std::nan("");
  const auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : std::nan("");
}

std::string string_or(const Json& obj, const char* key, const std::string& fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// The metrics file of a run directory: run.json's config names it (as given to the run,
// relative to where it ran, or beside run.json), else metrics.jsonl.
std::string metrics_path(const fs::path& dir, const Json& info) {
  std::vector<fs::path> candidates;
  if (info.is_object() && info.contains("config")) {
    const std::string named = string_or(info["config"], "metrics", "");
    if (!named.empty()) {
      candidates.push_back(dir / fs::path(named).filename());
      candidates.push_back(fs::path(named));
    }
  }
  candidates.push_back(dir / "metrics.jsonl");
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p)) return p.string();
  }
  OCTET_FAIL("report", dir.string(), ": no metrics file (looked for ", candidates.front().string(),
             "); run `octet train --out DIR` (which writes DIR/metrics.jsonl) or pass the "
             "--metrics file itself");
}

// A record's "fp8" object as (row, saturated, flushed) triples: per operand ("layers.0.qkv x")
// in the current format, per layer in the older one.
void health_cells(const Json& fp8, std::vector<std::tuple<std::string, double, double>>& out) {
  for (const auto& [layer, stats] : fp8.items()) {
    if (!stats.is_object()) continue;
    if (stats.contains("saturated") || stats.contains("flushed")) {
      out.emplace_back(layer, number_or_nan(stats, "saturated"), number_or_nan(stats, "flushed"));
      continue;
    }
    for (const auto& [operand, s] : stats.items()) {
      out.emplace_back(layer + " " + operand, number_or_nan(s, "saturated"),
                       number_or_nan(s, "flushed"));
    }
  }
}

}  // namespace

std::string RunData::precision() const {
  if (info.is_object() && info.contains("config")) {
    const std::string p = string_or(info["config"], "precision", "");
    if (!p.empty()) return p;
  }
  return records.empty() ? std::string() : records.front().precision;
}

RunData load_run(const std::string& path) {
  RunData run;
  run.path = path;
  fs::path p(path);
  std::string metrics = path;
  if (fs::is_directory(p)) {
    const fs::path info = p / "run.json";
    if (fs::is_regular_file(info)) run.info = read_json_file(info.string());
    metrics = metrics_path(p, run.info);
    run.name = fs::absolute(p).lexically_normal().filename().string();
    if (run.name.empty())
      run.name = fs::absolute(p).lexically_normal().parent_path().filename().string();
  } else {
    OCTET_CHECK(fs::is_regular_file(p), "report", path, ": not a run directory or a metrics file");
    run.name = p.stem().string();
  }
  std::ifstream in(metrics);
  OCTET_CHECK(in.good(), "report", metrics, ": cannot read the metrics file");

  std::map<std::string, size_t> row_index;
  std::vector<std::vector<std::tuple<size_t, double, double>>> columns;  // per step: cells
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = parse_json(line, metrics + ":" + std::to_string(line_number));
    OCTET_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer(), "report",
                metrics, ":", line_number, ": a metrics record needs an integer \"step\"");
    RunRecord r;
    r.step = j["step"].get<int64_t>();
    r.loss = number_or_nan(j, "loss");
    r.val_loss = number_or_nan(j, "val_loss");
    r.tokens_per_s = number_or_nan(j, "tokens_per_s");
    r.wall_s = number_or_nan(j, "wall_s");
    r.grad_norm = number_or_nan(j, "grad_norm");
    r.precision = string_or(j, "precision", "");
    r.skipped = j.contains("skipped") && j["skipped"].is_boolean() && j["skipped"].get<bool>();
    run.records.push_back(r);

    if (j.contains("guard") && j["guard"].is_object()) {
      const Json& g = j["guard"];
      GuardPoint gp;
      gp.step = r.step;
      gp.record = run.records.size() - 1;
      gp.fp8_loss = number_or_nan(g, "fp8_loss");
      gp.bf16_loss = number_or_nan(g, "bf16_loss");
      gp.gap = number_or_nan(g, "gap");
      gp.passed = !g.contains("passed") || !g["passed"].is_boolean() || g["passed"].get<bool>();
      gp.strikes = g.contains("strikes") && g["strikes"].is_number_integer()
                       ? g["strikes"].get<int64_t>()
                       : 0;
      gp.action = string_or(g, "action", "none");
      if (g.contains("rollback_step") && g["rollback_step"].is_number_integer()) {
        gp.rollback_step = g["rollback_step"].get<int64_t>();
      }
      run.guard.push_back(gp);
    }
    if (j.contains("warnings") && j["warnings"].is_array()) {
      for (const Json& w : j["warnings"]) {
        if (w.is_string()) run.warnings.emplace_back(r.step, w.get<std::string>());
      }
    }
    if (j.contains("fp8") && j["fp8"].is_object() && !j["fp8"].empty()) {
      std::vector<std::tuple<std::string, double, double>> cells;
      health_cells(j["fp8"], cells);
      auto& column = columns.emplace_back();
      run.health.steps.push_back(r.step);
      for (const auto& [row, sat, flush] : cells) {
        const auto [it, added] = row_index.emplace(row, run.health.rows.size());
        if (added) run.health.rows.push_back(row);
        column.emplace_back(it->second, sat, flush);
      }
    }
  }
  OCTET_CHECK(!run.records.empty(), "report", metrics, ": the metrics file has no records");
  const size_t rows = run.health.rows.size(), cols = run.health.steps.size();
  run.health.saturated.assign(rows * cols, std::nan(""));
  run.health.flushed.assign(rows * cols, std::nan(""));
  for (size_t c = 0; c < cols; ++c) {
    for (const auto& [row, sat, flush] : columns[c]) {
      run.health.saturated[row * cols + c] = sat;
      run.health.flushed[row * cols + c] = flush;
    }
  }
  return run;
}

std::vector<double> run_wall_times(const RunData& run) {
  std::vector<double> wall;
  bool all = true;
  for (const RunRecord& r : run.records) all = all && std::isfinite(r.wall_s);
  if (all) {
    for (const RunRecord& r : run.records) wall.push_back(r.wall_s);
    return wall;
  }
  const double per_step =
      run.info.is_object() ? number_or_nan(run.info, "tokens_per_step") : std::nan("");
  if (!std::isfinite(per_step)) return wall;
  double t = 0;
  for (const RunRecord& r : run.records) {
    if (std::isfinite(r.tokens_per_s) && r.tokens_per_s > 0) t += per_step / r.tokens_per_s;
    wall.push_back(t);
  }
  return wall;
}

}  // namespace octet::report
