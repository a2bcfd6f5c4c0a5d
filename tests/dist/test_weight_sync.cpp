// tests/dist/test_weight_sync.cpp: the weight path of the data-parallel step over 2 MPI
// ranks: under ZeRO 1 each rank's fp32 master holds only its shard (the memory it takes),
// the working weights gathered equal on every rank and equal to the rounded master.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/convert.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "dist_testing.h"
#include "train/trainer.h"

namespace octet::dist {
namespace {

using testing::world;

train::TrainConfig tiny_run(nn::Precision precision, int zero) {
  train::TrainConfig c;
  c.model = "tiny";
  c.precision = precision;
  c.seq_len = 32;
  c.batch = 4;
  c.steps = 2;
  c.warmup = 1;
  c.lr = 1e-2;
  c.eval_every = 0;
  c.eval_batches = 1;
  c.quiet = true;
  c.zero = zero;
  c.guard.enabled = false;
  c.data.markov_vocab = 64;
  c.data.train_tokens = 1 << 14;
  c.data.val_tokens = 1 << 12;
  return c;
}

TEST(WeightSync, ZeroOneMasterHoldsOnlyTheShard) {
  for (nn::Precision precision : {nn::Precision::bf16, nn::Precision::fp8, nn::Precision::fp32}) {
    const char* what = nn::precision_name(precision);
    train::Trainer t(tiny_run(precision, 1), world());
    t.run();
    DataParallel& dp = *t.data_parallel();
    const model::Llama& m = t.model();
    const int64_t p = m.parameter_count();
    const int r = world()->rank();
    const Partition& part = dp.partition();
    if (precision == nn::Precision::fp32) {
      // The master is the working weights: whole on every rank.
      EXPECT_TRUE(m.master_whole()) << what;
      EXPECT_EQ(m.master_bytes(), static_cast<size_t>(p) * 4) << what;
    } else {
      // The fp32 master bytes of this rank: its shard's, not all P parameters'.
      EXPECT_EQ(m.master_begin(), part.begin(r)) << what;
      EXPECT_EQ(m.master_end(), part.end(r)) << what;
      EXPECT_EQ(m.master_bytes(), static_cast<size_t>(part.count(r)) * 4) << what;
      EXPECT_LT(m.master_bytes(), static_cast<size_t>(p) * 4 * 3 / 4) << what;
    }
    // After the last update every rank holds the same working weights, and they are the
    // bf16 rounding of the (gathered) fp32 master.
    const Tensor w = m.working();
    const size_t bytes = static_cast<size_t>(p) * dtype_size(w.dtype);
    std::vector<uint8_t> mine(static_cast<const uint8_t*>(w.data),
                              static_cast<const uint8_t*>(w.data) + bytes),
        root = mine;
    world()->broadcast(Tensor(root.data(), DType::u8, {static_cast<int64_t>(bytes)}), 0);
    EXPECT_TRUE(mine == root) << what << ": the working weights differ between ranks";
    std::vector<float> master(static_cast<size_t>(p));
    dp.gather_master(Tensor(master.data(), DType::f32, {p}));
    int64_t wrong = 0;
    for (int64_t i = 0; i < p; ++i) {
      if (w.dtype == DType::f32) {
        wrong += w.as<float>()[i] != master[i];
      } else {
        wrong += w.as<uint16_t>()[i] != f32_to_bf16(master[i]);
      }
    }
    EXPECT_EQ(wrong, 0) << what << ": working weights that are not the rounded master";
  }
}

// A checkpoint's model.safetensors needs the whole fp32 master on rank 0 only: the other ranks
// keep (and allocate) their shard alone, and rank 0's equals every shard gathered.
TEST(WeightSync, MasterGatheredOnRankZeroOnly) {
  train::Trainer t(tiny_run(nn::Precision::bf16, 1), world());
  t.run();
  DataParallel& dp = *t.data_parallel();
  const model::Llama& m = t.model();
  const int64_t p = m.parameter_count();
  const int r = world()->rank();
  std::vector<float> want(static_cast<size_t>(p));
  dp.gather_master(Tensor(want.data(), DType::f32, {p}));
  dp.gather_master_on_root();
  if (r == 0) {
    ASSERT_TRUE(m.master_whole());
    const Tensor master = m.master();
    EXPECT_EQ(std::memcmp(master.data, want.data(), want.size() * 4), 0);
  } else {
    EXPECT_EQ(m.master_bytes(), static_cast<size_t>(dp.partition().count(r)) * 4);
  }
  dp.reshard_master();
  EXPECT_EQ(m.master_bytes(), static_cast<size_t>(dp.partition().count(r)) * 4);
}

}  // namespace
}  // namespace octet::dist
