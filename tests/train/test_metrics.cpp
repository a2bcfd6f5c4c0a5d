// tests/train/test_metrics.cpp: the metrics records (JSON lines): their fields, null for a
// diverged number, FP8 health at evaluations, and the file a resumed run appends to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
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
  const Json j = metrics_record(r);
  EXPECT_EQ(keys_of(j),
            (std::vector<std::string>{"step", "loss", "lr", "tokens_per_s", "grad_norm"}));
  EXPECT_EQ(j.at("step").get<int64_t>(), 12);
  EXPECT_EQ(j.at("loss").get<double>(), 2.5);
  EXPECT_EQ(j.at("lr").get<double>(), 3e-4);
  EXPECT_EQ(j.at("grad_norm").get<double>(), 0.75);
  EXPECT_EQ(j.at("tokens_per_s").get<double>(), 1234.5);
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

TEST(Metrics, EvaluatedStepsCarryValLossAndEachLayersFp8Stats) {
  StepRecord r;
  r.step = 50;
  r.val_loss = 1.25;
  fp8::Fp8Stats qkv, down;
  qkv.add({.amax = 3.0f, .min_scale = 10.0f, .max_scale = 20.0f, .numel = 100, .saturated = 1});
  down.add({.amax = 5.0f, .min_scale = 1.0f, .max_scale = 2.0f, .numel = 10, .flushed = 2});
  const Json j = metrics_record(r, {{"layers.0.qkv", qkv}, {"layers.0.down", down}});
  EXPECT_EQ(j.at("val_loss").get<double>(), 1.25);
  ASSERT_TRUE(j.contains("fp8"));
  EXPECT_EQ(keys_of(j.at("fp8")), (std::vector<std::string>{"layers.0.qkv", "layers.0.down"}));
  EXPECT_EQ(j.at("fp8").at("layers.0.qkv"), qkv.json());
  EXPECT_EQ(j.at("fp8").at("layers.0.down").at("flushed").get<double>(), 0.2);
  // Without an evaluation there is neither val_loss nor fp8, even when stats are given.
  r.val_loss.reset();
  EXPECT_FALSE(metrics_record(r, {{"layers.0.qkv", qkv}}).contains("fp8"));
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
  // A missing folder is made (`--metrics runs/x.jsonl` before runs/ exists); a path under a
  // regular file cannot be, and is refused.
  EXPECT_NO_THROW(MetricsFile(dir.file("missing/dir/run.jsonl"), false));
  std::ofstream(dir.file("a_file")) << "x";
  EXPECT_THROW(MetricsFile(dir.file("a_file/run.jsonl"), false), Error);
}

}  // namespace
}  // namespace octet::train
