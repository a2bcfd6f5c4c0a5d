// tests/train/test_skip.cpp: a step with a non-finite gradient changes nothing (weights,
// AdamW moments, FP8 scaling state), is counted and reported, and too many in a row stop
// the run with its last checkpoint intact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {

std::vector<float> host(const Tensor& t) {
  const float* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.numel());
}

// Everything a step may change: master weights, moments, the FP8 scaling state.
std::vector<std::vector<float>> state_of(Trainer& t) {
  std::vector<std::vector<float>> out{host(t.model().master()), host(t.optimizer().m()),
                                      host(t.optimizer().v())};
  for (const auto& [name, tensor] : t.model().scaling_state_tensors()) out.push_back(host(tensor));
  return out;
}

void poison_gradients(Trainer& t) {
  static_cast<float*>(t.model().grads().data)[7] = std::numeric_limits<float>::quiet_NaN();
}

TEST(SkipNonFinite, ANanGradientLeavesWeightsMomentsAndScalingUntouched) {
  testing::TempDir dir;
  // fp8 with delayed scaling: the run with the most state a step changes.
  TrainConfig c = tiny_run(write_tiny64(dir), nn::Precision::fp8, 8);
  c.recipe = fp8::Recipe::parse("tensor-delayed");
  Trainer trainer(c);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(trainer.train_step().skipped);
  const auto before = state_of(trainer);
  ASSERT_EQ(before.size(), 5u);  // master, m, v, amax history, scales
  trainer.after_backward = [](Trainer& t) { poison_gradients(t); };
  std::vector<StepRecord> r{trainer.train_step()};
  trainer.read_back(r);
  EXPECT_TRUE(r[0].skipped);
  EXPECT_EQ(r[0].skipped_steps, 1);
  EXPECT_TRUE(std::isnan(r[0].grad_norm));
  // Bitwise: the skipped step is as if its update never ran.
  const auto after = state_of(trainer);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(before[i] == after[i]) << "state " << i;
  // The next step updates again, from those weights.
  trainer.after_backward = nullptr;
  r = {trainer.train_step()};
  trainer.read_back(r);
  EXPECT_FALSE(r[0].skipped);
  EXPECT_EQ(r[0].skipped_steps, 1);
  EXPECT_TRUE(std::isfinite(r[0].loss) && std::isfinite(r[0].grad_norm));
  EXPECT_FALSE(host(trainer.model().master()) == before[0]);
  EXPECT_EQ(trainer.skipped_steps(), 1);
}

TEST(SkipNonFinite, TooManyInARowStopTheRunAndKeepTheLastCheckpoint) {
  testing::TempDir dir;
  TrainConfig c = tiny_run(write_tiny64(dir), nn::Precision::bf16, 30);
  c.out_dir = dir.file("ckpt");
  c.checkpoint_every = 4;
  c.max_skipped_steps = 5;
  Trainer trainer(c);
  std::vector<float> good;  // the weights after step 5, the last update
  std::vector<int64_t> skipped_at;
  trainer.on_step = [&](const StepRecord& r) {
    if (r.step == 5) good = host(trainer.model().master());
    if (r.skipped) skipped_at.push_back(r.step);
  };
  trainer.after_backward = [](Trainer& t) {
    if (t.step() >= 5) poison_gradients(t);  // steps 6, 7, ...
  };
  try {
    trainer.run();
    ADD_FAILURE() << "the run did not stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 steps in a row"), std::string::npos) << e.what();
  }
  EXPECT_EQ(skipped_at, (std::vector<int64_t>{6, 7, 8, 9, 10}));
  EXPECT_EQ(trainer.step(), 10);
  // The checkpoint of step 8 (written mid-streak) holds the weights of step 5: the skipped
  // steps changed nothing, and no checkpoint was written on the way out.
  const std::string latest = latest_checkpoint(c.out_dir);
  EXPECT_EQ(read_trainer_state(latest).step, 8);
  EXPECT_EQ(read_trainer_state(latest).skipped_steps, 3);
  const SafetensorsFile file = SafetensorsFile::open(latest + "/model.safetensors");
  const model::ParamInfo& p = trainer.model().params().front();
  std::vector<float> stored(static_cast<size_t>(p.shape.numel()));
  file.read(p.name, Tensor(stored.data(), DType::f32, p.shape, Device::cpu()));
  ASSERT_FALSE(good.empty());
  EXPECT_TRUE(std::equal(stored.begin(), stored.end(), good.begin() + p.offset));
}

}  // namespace
}  // namespace octet::train
