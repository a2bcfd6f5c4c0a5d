// tests/train/test_compare.cpp: time to a target loss (`octet compare`) on tiny with a
// 64-token vocabulary and short sequences: both precisions reach a reachable target and stop
// at the first evaluation at or below it, the JSON has every field, an unreachable target is
// reported as not reached, and each run's directory is one `octet report` reads.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "io/json.h"
#include "report/run_data.h"
#include "train/compare.h"
#include "training_testing.h"

namespace octet::train {
namespace {

CompareOptions tiny_compare(const std::string& model, double target, int64_t max_steps) {
  CompareOptions o;
  o.base = tiny_run(model, nn::Precision::bf16, max_steps);
  o.base.batch = 4;
  o.base.seq_len = 32;
  o.base.eval_batches = 2;
  o.base.data.train_tokens = 1 << 16;
  o.base.data.val_tokens = 1 << 12;
  o.target_loss = target;
  o.eval_every = 5;
  o.quiet = true;
  return o;
}

TEST(Compare, Bf16AndFp8ReachAReachableTargetAndTheJsonHasEveryField) {
  testing::TempDir dir;
  // ln 64 = 4.16 nats at the start; the corpus' floor is about 1.2. 2.5 takes about 20 steps.
  CompareOptions o = tiny_compare(write_tiny64(dir), 2.5, 100);
  o.out_dir = dir.file("cmp");
  const CompareResult result = compare_precisions(o);
  ASSERT_EQ(result.runs.size(), 2u);
  EXPECT_EQ(result.runs[result.baseline].precision, "bf16");
  ASSERT_TRUE(result.loss_floor.has_value());
  for (const TargetRun& r : result.runs) {
    SCOPED_TRACE(r.precision);
    EXPECT_TRUE(r.reached);
    EXPECT_LT(r.steps, 100);
    EXPECT_EQ(r.steps % 5, 0);
    EXPECT_EQ(r.tokens, r.steps * 4 * 32);
    EXPECT_GT(r.train_s, 0.0);
    EXPECT_NEAR(r.tokens_per_s, static_cast<double>(r.tokens) / r.train_s, 1e-9 * r.tokens_per_s);
    // Stopped at the first evaluation at or below the target.
    ASSERT_FALSE(r.val_curve.empty());
    EXPECT_EQ(r.val_curve.back().first, r.steps);
    EXPECT_LE(r.val_curve.back().second, 2.5);
    EXPECT_EQ(r.val_loss, r.val_curve.back().second);
    for (size_t i = 0; i + 1 < r.val_curve.size(); ++i) EXPECT_GT(r.val_curve[i].second, 2.5);
  }

  const Json j = compare_json(result);
  EXPECT_EQ(j.at("model"), o.base.model);
  EXPECT_EQ(j.at("target_loss").get<double>(), 2.5);
  EXPECT_EQ(j.at("baseline"), "bf16");
  ASSERT_EQ(j.at("runs").size(), 2u);
  for (const Json& r : j.at("runs")) {
    for (const char* key : {"precision", "reached", "steps", "tokens", "wall_s", "steps_run",
                            "tokens_run", "wall_s_run", "eval_s", "tokens_per_s", "val_loss",
                            "val_curve", "speedup_time_to_target", "speedup_tokens_per_s"}) {
      EXPECT_TRUE(r.contains(key)) << key;
    }
    EXPECT_TRUE(r.at("reached").get<bool>());
    EXPECT_TRUE(r.at("steps").is_number_integer());
    EXPECT_GT(r.at("wall_s").get<double>(), 0.0);
  }
  const TargetRun &bf16 = result.runs[0], &fp8 = result.runs[1];
  EXPECT_EQ(j.at("runs")[0].at("speedup_time_to_target").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("fp8_speedup").at("time_to_target").get<double>(),
                   bf16.train_s / fp8.train_s);
  EXPECT_DOUBLE_EQ(j.at("fp8_speedup").at("tokens_per_s").get<double>(),
                   fp8.tokens_per_s / bf16.tokens_per_s);
  EXPECT_NE(compare_table(result).find("fp8"), std::string::npos);

  // Each run is a run directory: run.json and one metrics record per step.
  for (const TargetRun& r : result.runs) {
    const report::RunData run = report::load_run(o.out_dir + "/" + r.precision);
    EXPECT_EQ(run.precision(), r.precision);
    EXPECT_EQ(run.records.size(), static_cast<size_t>(r.steps));
  }
}

TEST(Compare, AnUnreachableTargetIsReportedAsNotReachedAfterTheStepLimit) {
  testing::TempDir dir;
  CompareOptions o = tiny_compare(write_tiny64(dir), 0.5, 7);  // below the floor
  o.precisions = {nn::Precision::fp8};
  const CompareResult result = compare_precisions(o);
  ASSERT_EQ(result.runs.size(), 1u);
  const TargetRun& r = result.runs[0];
  EXPECT_FALSE(r.reached);
  EXPECT_EQ(r.steps, 7);  // evaluated at 5 and at the last step
  ASSERT_EQ(r.val_curve.size(), 2u);
  const Json j = compare_json(result).at("runs")[0];
  EXPECT_TRUE(j.at("steps").is_null());
  EXPECT_TRUE(j.at("tokens").is_null());
  EXPECT_TRUE(j.at("wall_s").is_null());
  EXPECT_EQ(j.at("steps_run"), 7);
  EXPECT_NE(compare_table(result).find("not reached"), std::string::npos);
  EXPECT_FALSE(compare_json(result).contains("fp8_speedup"));  // no bf16 to compare with
}

TEST(Compare, RefusesOptionsThatCannotWork) {
  CompareOptions o;
  o.target_loss = 1.0;
  o.precisions.clear();
  EXPECT_THROW(compare_precisions(o), Error);
  o.precisions = {nn::Precision::bf16};
  o.target_loss = -1;
  EXPECT_THROW(compare_precisions(o), Error);
}

}  // namespace
}  // namespace octet::train
