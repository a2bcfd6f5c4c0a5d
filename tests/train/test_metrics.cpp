// tests/train/test_metrics.cpp: the metrics records (JSON lines): their fields, null for a
// diverged number, the guard's checks, FP8 health per layer and operand, and the file a
// resumed run appends to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "temp_dir.h"
#include "train/metrics.h"

namespace octet::train {
namespace {

std::vector<std::string> keys_of(const Json& j) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  return keys;
}

TEST(Metrics, StepRecordHasItsFieldsInOrder) {
  StepRecord r;
  r.step = 12;
  r.loss = 2.5;
  r.lr = 3e-4;
  r.grad_norm = 0.75;
  r.tokens_per_s = 1234.5;
  r.precision = "fp8";
  r.wall_s = 7.25;
  r.skipped_steps = 3;
  const Json j = metrics_record(r);
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"step", "loss", "lr", "tokens_per_s", "grad_norm",
                                                  "precision", "wall_s", "skipped_steps"}));
  EXPECT_EQ(j.at("step").get<int64_t>(), 12);
  EXPECT_EQ(j.at("loss").get<double>(), 2.5);
  EXPECT_EQ(j.at("lr").get<double>(), 3e-4);
  EXPECT_EQ(j.at("grad_norm").get<double>(), 0.75);
  EXPECT_EQ(j.at("tokens_per_s").get<double>(), 1234.5);
  EXPECT_EQ(j.at("precision").get<std::string>(), "fp8");
  EXPECT_EQ(j.at("wall_s").get<double>(), 7.25);
  EXPECT_EQ(j.at("skipped_steps").get<int64_t>(), 3);
  EXPECT_FALSE(j.contains("skipped"));
  r.skipped = true;
  EXPECT_TRUE(metrics_record(r).at("skipped").get<bool>());
}

TEST(Metrics, GuardChecksAndWarningsFollowTheContract) {
  StepRecord r;
  r.step = 40;
  GuardRecord g;
  g.fp8_loss = 2.2;
  g.bf16_loss = 2.0;
  g.gap = 0.1;
  g.passed = false;
  g.strikes = 2;
  g.action = "rollback";
  g.rollback_step = 20;
  r.guard = g;
  r.warnings = {"layers.0.qkv dy: 2% flushed to zero (threshold 1%)"};
  const Json j = parse_json(json_dump(metrics_record(r)));
  const Json& gj = j.at("guard");
  EXPECT_EQ(keys_of(gj), (std::vector<std::string>{"fp8_loss", "bf16_loss", "gap", "passed",
                                                   "strikes", "action", "rollback_step"}));
  EXPECT_EQ(gj.at("gap").get<double>(), 0.1);
  EXPECT_FALSE(gj.at("passed").get<bool>());
  EXPECT_EQ(gj.at("strikes").get<int64_t>(), 2);
  EXPECT_EQ(gj.at("action").get<std::string>(), "rollback");
  EXPECT_EQ(gj.at("rollback_step").get<int64_t>(), 20);
  EXPECT_EQ(j.at("warnings").size(), 1u);
  // A check without a rollback has no rollback_step; a step without a check no guard.
  r.guard->rollback_step.reset();
  EXPECT_FALSE(metrics_record(r).at("guard").contains("rollback_step"));
  r.guard.reset();
  r.warnings.clear();
  EXPECT_FALSE(metrics_record(r).contains("guard"));
  EXPECT_FALSE(metrics_record(r).contains("warnings"));
}

TEST(Metrics, DivergedNumbersAreNullNotInvalidJson) {
  StepRecord r;
  r.step = 3;
  r.loss = std::nan("");
  r.grad_norm = HUGE_VAL;
  r.val_loss = std::nan("");
  const Json j = parse_json(json_dump(metrics_record(r)));
  EXPECT_TRUE(j.at("loss").is_null());
  EXPECT_TRUE(j.at("grad_norm").is_null());
  EXPECT_TRUE(j.at("val_loss").is_null());
}

TEST(Metrics, Fp8StatsArePerLayerAndOperand) {
  StepRecord r;
  r.step = 50;
  r.val_loss = 1.25;
  Fp8OperandStats qkv, down;
  qkv.x.add({.amax = 3.0f, .min_scale = 10.0f, .max_scale = 20.0f, .numel = 100, .saturated = 1});
  qkv.dy.add({.amax = NAN, .min_scale = 1.0f, .max_scale = 1.0f, .numel = 4});
  down.w.add({.amax = 5.0f, .min_scale = 1.0f, .max_scale = 2.0f, .numel = 10, .flushed = 2});
  const Json j =
      parse_json(json_dump(metrics_record(r, {{"layers.0.qkv", qkv}, {"layers.0.down", down}})));
  EXPECT_EQ(j.at("val_loss").get<double>(), 1.25);
  ASSERT_TRUE(j.contains("fp8"));
  EXPECT_EQ(keys_of(j.at("fp8")), (std::vector<std::string>{"layers.0.qkv", "layers.0.down"}));
  const Json& q = j.at("fp8").at("layers.0.qkv");
  EXPECT_EQ(keys_of(q), (std::vector<std::string>{"x", "w", "dy"}));
  EXPECT_EQ(keys_of(q.at("x")),
            (std::vector<std::string>{"amax", "min_scale", "max_scale", "saturated", "flushed",
                                      "nonfinite_amax"}));
  EXPECT_EQ(q.at("x").at("saturated").get<double>(), 0.01);
  EXPECT_TRUE(q.at("dy").at("amax").is_null());
  EXPECT_EQ(q.at("dy").at("nonfinite_amax").get<int64_t>(), 1);
  EXPECT_EQ(j.at("fp8").at("layers.0.down").at("w").at("flushed").get<double>(), 0.2);
  // Log steps carry fp8 without an evaluation; without stats there is no fp8.
  r.val_loss.reset();
  EXPECT_TRUE(metrics_record(r, {{"layers.0.qkv", qkv}}).contains("fp8"));
  EXPECT_FALSE(metrics_record(r).contains("fp8"));
  EXPECT_FALSE(metrics_record(r).contains("val_loss"));
}

TEST(Metrics, FileHoldsOneRecordPerLineAndAResumedRunAppends) {
  const testing::TempDir dir;
  const std::string path = dir.file("run.jsonl");
  StepRecord r;
  {
    MetricsFile file(path, false);
    for (r.step = 1; r.step <= 2; ++r.step) file.write(r);
  }
  {
    MetricsFile file(path, true);
    file.write(r);
  }
  std::istringstream lines(read_text_file(path));
  std::vector<int64_t> steps;
  for (std::string line; std::getline(lines, line);) {
    steps.push_back(parse_json(line, path).at("step").get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));
  {
    MetricsFile file(path, false);  // a new run starts the file afresh
    file.write(r);
  }
  const std::string fresh = read_text_file(path);
  EXPECT_EQ(std::count(fresh.begin(), fresh.end(), '\n'), 1);
  EXPECT_THROW(MetricsFile(dir.file("missing/dir/run.jsonl"), false), Error);
}

}  // namespace
}  // namespace octet::train
