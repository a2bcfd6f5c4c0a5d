// tests/train/test_guard.cpp: the FP8 convergence guard: its judgement (tolerance,
// patience, actions), healthy runs under every recipe that never make it act, and a
// fault-injected fp8 run that it rolls back, bitwise to the checkpoint it names, and that
// ends on the bf16 curve and resumes under bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/guard.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {

TEST(Guard, ActsAfterPatienceConsecutiveFailuresBeyondTheTolerance) {
  GuardConfig c;  // tolerance 0.5%, patience 2, rollback
  Guard g(c);
  EXPECT_FALSE(g.last_passed());
  GuardRecord r = g.judge(2.009, 2.0);  // +0.45%: inside
  EXPECT_TRUE(r.passed);
  EXPECT_NEAR(r.gap, 0.0045, 1e-12);
  EXPECT_EQ(r.action, "none");
  EXPECT_TRUE(g.last_passed());
  r = g.judge(2.011, 2.0);  // +0.55%: a strike
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.strikes, 1);
  EXPECT_EQ(r.action, "none");
  r = g.judge(1.9, 2.0);  // fp8 better: passes, the strikes restart
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.strikes, 0);
  EXPECT_EQ(g.judge(2.5, 2.0).action, "none");
  r = g.judge(std::numeric_limits<double>::quiet_NaN(), 2.0);  // NaN fails
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.strikes, 2);
  EXPECT_EQ(r.action, "rollback");
  EXPECT_FALSE(g.last_passed());
  // warn acts every `patience` failures; a NaN bf16 loss fails too.
  c.action = GuardAction::warn;
  c.patience = 1;
  Guard w(c);
  EXPECT_EQ(w.judge(1.0, std::numeric_limits<double>::quiet_NaN()).action, "warn");
  EXPECT_EQ(w.judge(3.0, 1.0).action, "warn");
  EXPECT_TRUE(w.due(50, true));
  EXPECT_FALSE(w.due(49, false));
  c.every = 7;
  EXPECT_TRUE(Guard(c).due(14, false));
  EXPECT_FALSE(Guard(c).due(10, true));
  EXPECT_EQ(guard_action_from_name("fallback"), GuardAction::fallback);
  EXPECT_THROW(guard_action_from_name("panic"), Error);
}

TrainConfig guarded_run(const std::string& model, const char* recipe, int64_t steps) {
  TrainConfig c = tiny_run(model, nn::Precision::fp8, steps);
  c.recipe = fp8::Recipe::parse(recipe);
  c.eval_every = 10;
  c.eval_batches = 4;
  return c;
}

TEST(Guard, HealthyRunsUnderEveryRecipeNeverAct) {
  testing::TempDir dir;
  const std::string model = write_tiny64(dir);
  for (const char* recipe : {"tensor-current", "tensor-delayed", "row", "block", "mx"}) {
    Trainer trainer(guarded_run(model, recipe, 30));
    int checks = 0;
    double worst = -1.0;
    for (const StepRecord& r : trainer.run()) {
      EXPECT_EQ(r.precision, "fp8") << recipe;
      if (!r.guard) continue;
      ++checks;
      worst = std::max(worst, r.guard->gap);
      EXPECT_TRUE(r.guard->passed) << recipe << " step " << r.step << " gap " << r.guard->gap;
      EXPECT_EQ(r.guard->action, "none") << recipe;
    }
    EXPECT_EQ(checks, 3) << recipe;
    EXPECT_EQ(trainer.precision(), nn::Precision::fp8) << recipe;
    std::printf("[ result   ] %s: %d checks, worst gap %+.3f%%, guard %.2fs\n", recipe, checks,
                100.0 * worst, trainer.guard_seconds());
  }
}

// The fault: from step `from` on, every delayed-scaling scale is 2^-100 (the history holds
// an amax of 448 * 2^100, so the update keeps it): every FP8 operand flushes to zero and
// a training step's gradients become NaN (the two scale_inv, 2^100 each, meet zeros), so
// every fp8 step is skipped, and every check fails: the evaluation's forward returns zeros
// from the block linears, far worse than bf16 on the untouched master weights.
std::function<void(const StepRecord&)> break_fp8_from(Trainer& trainer, int64_t from) {
  return [&trainer, from](const StepRecord& r) {
    if (r.step < from) return;
    for (const auto& [name, t] : trainer.model().scaling_state_tensors()) {
      float* p = static_cast<float*>(t.data);
      const float value = name == "fp8.scale" ? std::ldexp(1.0f, -100) : std::ldexp(448.0f, 100);
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
    }
    trainer.model().scaling_state_loaded();
  };
}

TEST(Guard, AFaultyFp8RunIsRolledBackExactlyAndEndsOnTheBf16Curve) {
  testing::TempDir dir;
  const std::string model = write_tiny64(dir);
  const int64_t steps = 50;
  TrainConfig c = guarded_run(model, "tensor-delayed", steps);
  c.out_dir = dir.file("ckpt");
  c.checkpoint_every = 2;
  c.guard.every = 2;

  Trainer trainer(c);
  auto fault = break_fp8_from(trainer, 12);
  std::vector<StepRecord> actions;
  bool restored_checked = false;
  int passed = 0;
  trainer.on_step = [&](const StepRecord& r) {
    fault(r);  // a no-op once the model is bf16 (no scaling state)
    if (r.guard && r.guard->passed) ++passed;
    if (r.guard && r.guard->action != "none") {
      actions.push_back(r);
      ASSERT_TRUE(r.guard->rollback_step.has_value());
      // The weights now are the named checkpoint's, bitwise.
      char name[32];
      std::snprintf(name, sizeof name, "/step_%08lld",
                    static_cast<long long>(*r.guard->rollback_step));
      const SafetensorsFile file = SafetensorsFile::open(c.out_dir + name + "/model.safetensors");
      const model::Llama& m = trainer.model();
      for (const model::ParamInfo& p : m.params()) {
        std::vector<float> stored(static_cast<size_t>(p.shape.numel()));
        file.read(p.name, Tensor(stored.data(), DType::f32, p.shape, Device::cpu()));
        EXPECT_EQ(std::memcmp(stored.data(), m.master_view(p).data, stored.size() * 4), 0)
            << p.name;
      }
      EXPECT_EQ(trainer.step(), *r.guard->rollback_step);
      EXPECT_EQ(trainer.precision(), nn::Precision::bf16);
      restored_checked = true;
    }
  };
  const auto records = trainer.run();
  // The checks at 2, ..., 12 pass; the fault (after step 12) fails those at 14 and 16; at
  // 16 the guard rolls back to step 12, the last checkpoint whose check passed.
  EXPECT_EQ(passed, 6);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].step, 16);
  EXPECT_EQ(actions[0].guard->action, "rollback");
  EXPECT_EQ(*actions[0].guard->rollback_step, 12);
  EXPECT_EQ(actions[0].guard->strikes, 2);
  // The evaluation's forward stays finite (zeros from the flushed GEMMs), far above bf16.
  EXPECT_GT(actions[0].guard->gap, 0.05);
  EXPECT_EQ(actions[0].skipped_steps, 4);  // 13..16
  EXPECT_TRUE(restored_checked);
  EXPECT_EQ(trainer.step(), steps);
  EXPECT_EQ(records.back().precision, "bf16");
  EXPECT_EQ(records.back().step, steps);
  // Steps 13..50 after the rollback ran (again), under bf16.
  EXPECT_EQ(records.size(), static_cast<size_t>(16 + steps - 12));
  const double guarded_final = *records.back().val_loss;

  TrainConfig b = c;
  b.precision = nn::Precision::bf16;
  b.out_dir.clear();
  const double bf16_final = *Trainer(b).run().back().val_loss;
  std::printf("[ result   ] final val_loss: bf16 %.4f, fp8 guarded %.4f\n", bf16_final,
              guarded_final);
  // On the bf16 curve: within 1% of the bf16 run (12 of its 50 steps ran under fp8; a
  // healthy fp8 run stays within 1% of bf16: Training.Fp32Bf16AndFp8...).
  EXPECT_LE(std::abs(guarded_final - bf16_final), 0.01 * bf16_final);
  // Without the guard, the same fault stops the run (5 skipped steps in a row).
  TrainConfig u = c;
  u.guard.enabled = false;
  u.out_dir.clear();
  Trainer unguarded(u);
  unguarded.on_step = break_fp8_from(unguarded, 12);
  EXPECT_THROW(unguarded.run(), Error);
  EXPECT_EQ(unguarded.step(), 17);

  // The state says bf16 (asked fp8): a resumed run continues under bf16.
  const TrainerState s = read_trainer_state(latest_checkpoint(c.out_dir));
  EXPECT_EQ(s.precision, "bf16");
  EXPECT_EQ(s.requested_precision, "fp8");
  c.resume = true;
  c.steps = steps + 4;
  Trainer resumed(c);
  EXPECT_EQ(resumed.precision(), nn::Precision::bf16);
  EXPECT_EQ(resumed.run().back().precision, "bf16");
}

TEST(Guard, WithoutAPassedCheckpointRollbackFallsBackFromTheCurrentWeights) {
  testing::TempDir dir;
  TrainConfig c = guarded_run(write_tiny64(dir), "tensor-delayed", 24);
  c.eval_every = 4;
  c.guard.patience = 1;
  Trainer trainer(c);
  trainer.on_step = break_fp8_from(trainer, 1);
  const auto records = trainer.run();
  const StepRecord& at4 = records.at(3);
  ASSERT_TRUE(at4.guard.has_value());
  EXPECT_EQ(at4.guard->action, "fallback");
  ASSERT_FALSE(at4.warnings.empty());
  EXPECT_NE(at4.warnings.back().find("no --out"), std::string::npos) << at4.warnings.back();
  EXPECT_EQ(records.at(4).precision, "bf16");
  EXPECT_EQ(records.size(), 24u);
  EXPECT_TRUE(std::isfinite(records.back().loss));
}

}  // namespace
}  // namespace octet::train
