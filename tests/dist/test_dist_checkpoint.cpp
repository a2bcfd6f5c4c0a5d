// tests/dist/test_dist_checkpoint.cpp: a checkpoint written by 2 ranks under ZeRO 1 (one
// model.safetensors from rank 0, the optimizer state one file per rank) resumes at 2 ranks
// bit for bit and at 1 rank within the reduction-order bound; a one-process checkpoint
// (the moments in trainer_state.safetensors) resumes at 2 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "dist/comm.h"
#include "dist_testing.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace octet::dist {
namespace {

namespace fs = std::filesystem;
using testing::world;

train::TrainConfig delayed_fp8_run(int64_t ranks, const std::string& out) {
  train::TrainConfig c;
  c.model = "tiny";
  c.precision = nn::Precision::fp8;
  c.recipe = fp8::Recipe::parse("tensor-delayed");  // the most state to carry over
  c.seq_len = 32;
  c.batch = 8 / ranks;
  c.steps = 6;
  c.warmup = 2;
  c.lr = 1e-2;
  c.grad_clip = 0.5;
  c.eval_every = 0;
  c.eval_batches = 1;
  c.checkpoint_every = 3;
  c.out_dir = out;
  c.quiet = true;
  c.data.markov_vocab = 64;
  c.data.train_tokens = 1 << 15;
  c.data.val_tokens = 1 << 12;
  return c;
}

std::vector<double> losses(train::Trainer& t) {
  std::vector<double> out;
  for (const train::StepRecord& r : t.run()) out.push_back(r.loss);
  return out;
}

void point_latest_at(const std::string& dir, const std::string& step) {
  std::ofstream(dir + "/latest") << step << "\n";
}

TEST(DistCheckpoint, SavedAtTwoRanksResumesAtTwoAndAtOne) {
  testing::SharedTempDir dir;
  Comm& c = *world();
  const std::string out = dir.path() + "/run";
  std::vector<double> straight;
  {
    train::Trainer t(delayed_fp8_run(c.size(), out), world());
    straight = losses(t);  // writes step 3 (checkpoint_every) and step 6 (the end)
  }
  ASSERT_EQ(straight.size(), 6u);
  ASSERT_TRUE(fs::exists(out + "/step_00000003/model.safetensors"));
  // One model file with the Hugging Face names; the optimizer state (fp32 master, m, v) in
  // one file per rank, their layout in trainer_state.json, none in trainer_state.safetensors.
  ASSERT_TRUE(fs::exists(out + "/step_00000003/trainer_state.safetensors"));
  {
    const train::TrainerState s = train::read_trainer_state(out + "/step_00000003");
    ASSERT_TRUE(s.optimizer_shards.has_value());
    const train::ShardLayout& layout = *s.optimizer_shards;
    EXPECT_EQ(layout.ranks(), c.size());
    for (int r = 0; r < c.size(); ++r) {
      const std::string shard = out + "/step_00000003/" + train::optimizer_shard_file(r, c.size());
      ASSERT_TRUE(fs::exists(shard)) << shard;
      const SafetensorsFile f = SafetensorsFile::open(shard);
      EXPECT_EQ(f.info("adamw.m").dims,
                std::vector<int64_t>{layout.offsets[r + 1] - layout.offsets[r]});
    }
    EXPECT_FALSE(SafetensorsFile::open(out + "/step_00000003/trainer_state.safetensors")
                     .contains("adamw.m"));
    for (const fs::directory_entry& e : fs::directory_iterator(out))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }

  // Resume at 2 ranks from step 3: the same losses, bit for bit.
  c.barrier();
  if (c.rank() == 0) point_latest_at(out, "step_00000003");
  c.barrier();
  std::vector<double> resumed;
  {
    train::TrainConfig rc = delayed_fp8_run(c.size(), out);
    rc.resume = true;
    train::Trainer t(rc, world());
    ASSERT_EQ(t.step(), 3);
    resumed = losses(t);
  }
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], straight[3 + i]) << "step " << 4 + i;

  // Resume at 2 ranks under ZeRO 0: every rank reads all the shards' moments and master.
  // ZeRO 0 quantizes the block linears from the f32 master (ZeRO 1: from the gathered bf16
  // working weights), so within the fp8 tolerance of test_data_parallel.cpp (2^-7).
  c.barrier();
  if (c.rank() == 0) point_latest_at(out, "step_00000003");
  c.barrier();
  {
    train::TrainConfig rc = delayed_fp8_run(c.size(), out);
    rc.resume = true;
    rc.zero = 0;
    rc.checkpoint_every = 0;
    train::Trainer t(rc, world());
    ASSERT_EQ(t.step(), 3);
    const std::vector<double> z0 = losses(t);
    ASSERT_EQ(z0.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(z0[i], straight[3 + i], 0x1p-7 * straight[3 + i]) << "step " << 4 + i;
  }

  // Resume the same checkpoint in one process (each rank its own copy of the directory):
  // batch 8 on one rank reads the same sequences; the moments, sharded at 2 ranks, are
  // read whole. Within the fp8 tolerance of test_data_parallel.cpp (2^-7 relative).
  const std::string own = dir.path() + "/rank" + std::to_string(c.rank());
  fs::create_directories(own);
  fs::copy(out + "/step_00000003", own + "/step_00000003", fs::copy_options::recursive);
  point_latest_at(own, "step_00000003");
  train::TrainConfig one = delayed_fp8_run(1, own);
  one.resume = true;
  train::Trainer t(one, single_process());
  ASSERT_EQ(t.step(), 3);
  const std::vector<double> single = losses(t);
  ASSERT_EQ(single.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(single[i], straight[3 + i], 0x1p-7 * straight[3 + i]) << "step " << 4 + i;
    if (c.rank() == 0)
      std::printf("[ measured ] step %zu: 2 ranks %.7f, resumed at 1 rank %.7f\n", 4 + i,
                  straight[3 + i], single[i]);
  }
}

// Ctrl-C reaching one rank only (request_stop() on rank 1 after step 2): every rank stops
// after the same step, and the checkpoint of that step is written.
TEST(DistCheckpoint, StopOnOneRankStopsEveryRankWithACheckpoint) {
  testing::SharedTempDir dir;
  Comm& c = *world();
  const std::string out = dir.path() + "/run";
  train::TrainConfig rc = delayed_fp8_run(c.size(), out);
  rc.checkpoint_every = 0;
  train::clear_stop_request();
  int64_t ran = 0;
  {
    train::Trainer t(rc, world());
    t.on_step = [&](const train::StepRecord& r) {
      if (r.step == 2 && c.rank() == 1) train::request_stop();
    };
    ran = static_cast<int64_t>(t.run().size());
    EXPECT_EQ(t.step(), 2);
    EXPECT_TRUE(train::stop_requested()) << "rank " << c.rank() << " was not told to stop";
  }
  train::clear_stop_request();
  EXPECT_EQ(ran, 2);
  c.barrier();
  EXPECT_EQ(train::latest_checkpoint(out), out + "/step_00000002");
  EXPECT_EQ(train::read_trainer_state(out + "/step_00000002").step, 2);
}

// The single-file optimizer format one process writes, resumed at 2 ranks: each takes its
// shard of the moments. Within the fp8 tolerance of test_data_parallel.cpp (2^-7 relative)
// of the one process continuing.
TEST(DistCheckpoint, OneProcessCheckpointResumesAtTwoRanks) {
  testing::SharedTempDir dir;
  Comm& c = *world();
  const std::string own = dir.path() + "/rank" + std::to_string(c.rank());
  std::vector<double> straight;
  {
    train::Trainer t(delayed_fp8_run(1, own), single_process());
    straight = losses(t);
  }
  ASSERT_EQ(straight.size(), 6u);
  ASSERT_FALSE(train::read_trainer_state(own + "/step_00000003").optimizer_shards.has_value());
  // Both ranks resume from rank 0's directory.
  const std::string root = dir.path() + "/rank0";
  c.barrier();
  if (c.rank() == 0) point_latest_at(root, "step_00000003");
  c.barrier();
  train::TrainConfig rc = delayed_fp8_run(c.size(), root);
  rc.resume = true;
  rc.checkpoint_every = 0;
  rc.out_dir = root;
  std::vector<double> resumed;
  {
    train::Trainer t(rc, world());
    ASSERT_EQ(t.step(), 3);
    resumed = losses(t);
  }
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(resumed[i], straight[3 + i], 0x1p-7 * straight[3 + i]) << "step " << 4 + i;
  }
}

}  // namespace
}  // namespace octet::dist
