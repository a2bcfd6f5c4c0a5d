// tests/data/test_loader.cpp: the batch loader: shifted targets, every sequence once per
// epoch, exact replay after a resume, data-parallel ranks, and shards on disk.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "temp_dir.h"
#include "testing.h"

namespace octet::data {
namespace {

// 0, 1, 2, ...: a token's value is its position, so a row's first input is its start.
std::vector<int32_t> positions(int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = i;
  return t;
}

// One batch from the loader into fresh vectors (the loader writes into tensors over them).
struct Batch {
  std::vector<int32_t> inputs, targets;
  friend bool operator==(const Batch&, const Batch&) = default;
};
Batch next_batch(TokenLoader& loader) {
  const auto& c = loader.config();
  Batch b{std::vector<int32_t>(static_cast<size_t>(c.batch * c.seq_len)),
          std::vector<int32_t>(static_cast<size_t>(c.batch * c.seq_len))};
  loader.next(Tensor(b.inputs.data(), DType::i32, {c.batch, c.seq_len}),
              Tensor(b.targets.data(), DType::i32, {c.batch, c.seq_len}));
  return b;
}

TEST(Loader, TargetsAreInputsShiftedByOne) {
  const int32_t n = 5000;
  TokenLoader loader(positions(n), static_cast<uint32_t>(n), {4, 32, testing::fresh_seed()});
  for (int step = 0; step < 50; ++step) {
    const Batch b = next_batch(loader);
    for (int64_t r = 0; r < 4; ++r) {
      const int32_t* in = b.inputs.data() + r * 32;
      const int32_t* tg = b.targets.data() + r * 32;
      ASSERT_EQ(in[0] % 32, 0) << "a sequence starts at a multiple of seq_len";
      for (int t = 0; t < 32; ++t) {
        ASSERT_EQ(in[t], in[0] + t) << "inputs are consecutive tokens";
        ASSERT_EQ(tg[t], in[0] + t + 1) << "targets are the inputs shifted by one";
      }
    }
  }
}

// 16 x 20 + 5 tokens hold 20 sequences of 17 tokens (the 5 left over start none); with
// batch 3 the epoch ends inside a batch, which continues into the next epoch.
TEST(Loader, EachEpochVisitsEverySequenceOnce) {
  const int64_t s = 16, n_seq = 20;
  TokenLoader loader(positions(static_cast<int32_t>(s * n_seq + 5)), 1000,
                     {3, s, testing::fresh_seed()});
  ASSERT_EQ(loader.sequences_per_epoch(), static_cast<uint64_t>(n_seq));
  std::vector<int32_t> starts;
  for (int step = 0; step < 20; ++step) {  // 60 sequences: three epochs
    const Batch b = next_batch(loader);
    for (int r = 0; r < 3; ++r) starts.push_back(b.inputs[static_cast<size_t>(r * s)]);
  }
  std::vector<std::vector<int32_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int32_t> order(starts.begin() + e * n_seq, starts.begin() + (e + 1) * n_seq);
    std::vector<int32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n_seq; ++i)
      ASSERT_EQ(sorted[static_cast<size_t>(i)], i * s) << "epoch " << e;
    epochs.push_back(order);
  }
  // Shuffled, differently each epoch (two equal orders of 20: chance 1/20!).
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_EQ(loader.position(), (LoaderPosition{3, 0}));

  // Without shuffling, sequences come in order.
  TokenLoader ordered(positions(static_cast<int32_t>(s * n_seq + 5)), 1000, {5, s, 0, false});
  const Batch b = next_batch(ordered);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(b.inputs[static_cast<size_t>(r * s)], r * s);
}

// Save the position mid-epoch; a new loader seeking to it must hand out the same batches
// as the original does from there, across an epoch boundary.
TEST(Loader, ResumedLoaderRepeatsTheSameBatches) {
  const LoaderConfig config{4, 8, testing::fresh_seed()};
  TokenLoader original(positions(8 * 30 + 1), 1000, config);  // 30 sequences
  for (int i = 0; i < 5; ++i) next_batch(original);
  const LoaderPosition saved = original.position();
  EXPECT_EQ(saved, (LoaderPosition{0, 20}));
  std::vector<Batch> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(next_batch(original));

  TokenLoader resumed(positions(8 * 30 + 1), 1000, config);
  next_batch(resumed);  // wherever it was, seek decides
  resumed.seek(saved);
  for (int i = 0; i < 12; ++i)
    ASSERT_EQ(next_batch(resumed), expected[static_cast<size_t>(i)]) << "batch " << i;
  EXPECT_EQ(resumed.position(), original.position());

  try {
    resumed.seek({0, 30});
    ADD_FAILURE() << "seek past the epoch's end accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position index 30 is beyond the 30 sequences"),
              std::string::npos)
        << e.what();
  }
}

// With world 2, one step hands rank 0 and rank 1 the two halves of what one rank with
// twice the batch would get.
TEST(Loader, RanksSplitEachStepWithoutOverlap) {
  const uint64_t seed = testing::fresh_seed();
  const auto tokens = positions(16 * 25 + 1);  // 25 sequences: steps of 6 cross epochs
  TokenLoader whole(tokens, 1000, {6, 16, seed, true, 0, 1});
  TokenLoader rank0(tokens, 1000, {3, 16, seed, true, 0, 2});
  TokenLoader rank1(tokens, 1000, {3, 16, seed, true, 1, 2});
  for (int step = 0; step < 10; ++step) {
    const Batch w = next_batch(whole), a = next_batch(rank0), b = next_batch(rank1);
    ASSERT_TRUE(std::equal(a.inputs.begin(), a.inputs.end(), w.inputs.begin())) << "step " << step;
    ASSERT_TRUE(std::equal(b.inputs.begin(), b.inputs.end(), w.inputs.begin() + 3 * 16))
        << "step " << step;
    ASSERT_EQ(rank0.position(), whole.position());
    ASSERT_EQ(rank1.position(), whole.position());
  }
}

// Shards of unequal sizes: sequences never cross a shard boundary, every one is visited
// once per epoch, and find_shards orders the files numerically.
TEST(Loader, ReadsShardsWithoutCrossingTheirBoundaries) {
  testing::TempDir dir;
  const int64_t s = 10;
  const std::vector<int32_t> sizes = {101, 35, 9, 250};  // 10, 3, 0 and 24 sequences
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int32_t> t(static_cast<size_t>(sizes[i]));
    for (int32_t j = 0; j < sizes[i]; ++j)
      t[static_cast<size_t>(j)] = static_cast<int32_t>(i) * 1000 + j;
    shard_write(dir.file("train_00" + std::to_string(i) + ".bin"), t, 100000);
  }
  shard_write(dir.file("val_000.bin"), std::vector<int32_t>{1, 2},
              100000);  // another split: ignored
  const auto paths = find_shards(dir.path().string(), "train");
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_TRUE(paths[3].ends_with("train_003.bin"));

  TokenLoader loader(paths, {2, s, testing::fresh_seed()});
  EXPECT_EQ(loader.sequences_per_epoch(), 37u);
  EXPECT_EQ(loader.vocab_size(), 100000u);
  std::set<int32_t> seen;
  for (int step = 0; step < 18; ++step) {  // 36 of the 37 sequences
    const Batch b = next_batch(loader);
    for (int r = 0; r < 2; ++r) {
      const int32_t* in = b.inputs.data() + r * s;
      ASSERT_EQ(in[0] % 1000 % s, 0);
      for (int t = 0; t < s; ++t)
        ASSERT_EQ(b.targets[static_cast<size_t>(r * s + t)], in[0] + t + 1);
      ASSERT_TRUE(seen.insert(in[0]).second) << "sequence at " << in[0] << " visited twice";
    }
  }
  EXPECT_EQ(seen.size(), 36u);
}

TEST(Loader, RejectsWrongBuffersAndMismatchedShards) {
  TokenLoader loader(positions(1000), 1000, {2, 16});
  std::vector<float> f(32);
  std::vector<int32_t> i(32), small(16);
  try {
    loader.next(Tensor(f.data(), DType::f32, {2, 16}), Tensor(i.data(), DType::i32, {2, 16}));
    ADD_FAILURE() << "f32 inputs accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[loader] inputs must be i32[2, 16] on the cpu"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      loader.next(Tensor(i.data(), DType::i32, {2, 16}), Tensor(small.data(), DType::i32, {1, 16})),
      Error);
  EXPECT_EQ(loader.position(), (LoaderPosition{0, 0}));  // a refused call does not advance

  EXPECT_THROW(TokenLoader(positions(1000), 999, {2, 16}), Error);  // token 999 beyond 999
  EXPECT_THROW(TokenLoader(positions(16), 1000, {2, 16}), Error);   // no sequence of 17 tokens

  testing::TempDir dir;
  shard_write(dir.file("train_000.bin"), positions(100), 100);
  shard_write(dir.file("train_001.bin"), positions(100), 200);
  try {
    TokenLoader l(find_shards(dir.path().string(), "train"), {2, 16});
    ADD_FAILURE() << "shards of two vocabularies accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size 200 differs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(find_shards(dir.path().string(), "val"), Error);
}

TEST(Loader, FeedsTheSyntheticSplit) {
  const MarkovSource source({64, 2, 2, 8, 11});
  auto split = synthetic_split(source, 20000, 4000);
  TokenLoader train(std::move(split.train), 64, {8, 64, 1});
  TokenLoader val(std::move(split.val), 64, {8, 64, 0, false});
  EXPECT_EQ(train.sequences_per_epoch(), (20000u - 1) / 64);
  EXPECT_EQ(val.sequences_per_epoch(), (4000u - 1) / 64);
  const Batch b = next_batch(train);
  for (size_t t = 0; t < b.inputs.size(); ++t) {
    // Each target follows its input in the source (order 2: check the pairs' support
    // via the row's previous token where there is one).
    if (t % 64 == 0) continue;
    const int64_t ctx = b.inputs[t - 1] * 64 + b.inputs[t];
    ASSERT_GT(source.probability(ctx, b.targets[t]), 0.0) << "at " << t;
  }
}

}  // namespace
}  // namespace octet::data
