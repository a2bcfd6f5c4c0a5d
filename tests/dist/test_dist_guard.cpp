// tests/dist/test_dist_guard.cpp: the FP8 convergence guard under 2 MPI ranks: a faulty
// fp8 run (every delayed scale broken after step 12, as in tests/train/test_guard.cpp) makes
// every rank act at the same step, roll back to (or fall back from) the same weights and
// finish under bf16 with equal weights everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <vector>

#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "dist_testing.h"
#include "train/trainer.h"

namespace octet::dist {
namespace {

using testing::world;

TEST(DistGuard, AFaultyFp8RunSwitchesEveryRankTogether) {
  Comm& c = *world();
  for (const train::GuardAction action :
       {train::GuardAction::rollback, train::GuardAction::fallback}) {
    const char* what = train::guard_action_name(action);
    testing::SharedTempDir dir;
    const std::string model = dir.path() + "/tiny64.json";
    if (c.rank() == 0) {
      std::ofstream(model) << R"({"vocab_size": 64, "hidden_size": 64, "intermediate_size": 176,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64})";
    }
    c.barrier();
    train::TrainConfig cfg;
    cfg.model = model;
    cfg.precision = nn::Precision::fp8;
    cfg.recipe = fp8::Recipe::parse("tensor-delayed");
    cfg.steps = 20;
    cfg.batch = 8 / c.size();
    cfg.lr = 1e-2;
    cfg.warmup = 20;
    cfg.eval_every = 10;
    cfg.eval_batches = 4;
    cfg.quiet = true;
    cfg.data.markov_vocab = 64;
    cfg.data.train_tokens = 1 << 18;
    cfg.data.val_tokens = 1 << 14;
    cfg.out_dir = dir.path() + "/run";
    cfg.checkpoint_every = 2;
    cfg.guard.every = 2;
    cfg.guard.action = action;
    train::Trainer t(cfg, world());
    std::vector<train::StepRecord> actions;
    t.on_step = [&](const train::StepRecord& r) {
      if (r.guard && r.guard->action != "none") actions.push_back(r);
      if (r.step < 12) return;
      // The fault (a no-op once the model is bf16: no scaling state).
      for (const auto& [name, tensor] : t.model().scaling_state_tensors()) {
        float* p = static_cast<float*>(tensor.data);
        const float value = name == "fp8.scale" ? std::ldexp(1.0f, -100) : std::ldexp(448.0f, 100);
        for (int64_t i = 0; i < tensor.numel(); ++i) p[i] = value;
      }
      t.model().scaling_state_loaded();
    };
    t.run();
    // Checks at 14 and 16 fail (patience 2): the guard acts at 16 on every rank.
    ASSERT_EQ(actions.size(), 1u) << what;
    EXPECT_EQ(actions[0].step, 16) << what;
    EXPECT_EQ(actions[0].guard->action, what);
    if (action == train::GuardAction::rollback) {
      ASSERT_TRUE(actions[0].guard->rollback_step.has_value());
      EXPECT_EQ(*actions[0].guard->rollback_step, 12);
    }
    EXPECT_EQ(t.precision(), nn::Precision::bf16) << what;
    EXPECT_EQ(t.step(), 20) << what;
    // Every rank ends with the same fp32 master, and finite.
    const int64_t p = t.model().parameter_count();
    std::vector<float> mine(static_cast<size_t>(p));
    t.data_parallel()->gather_master(Tensor(mine.data(), DType::f32, {p}));
    std::vector<float> root = mine;
    c.broadcast(Tensor(root.data(), DType::f32, {p}), 0);
    EXPECT_TRUE(mine == root) << what << ": the ranks' weights differ";
    for (float x : mine) ASSERT_TRUE(std::isfinite(x)) << what;
  }
}

}  // namespace
}  // namespace octet::dist
