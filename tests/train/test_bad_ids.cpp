// tests/train/test_bad_ids.cpp: token ids at or above the vocabulary are refused with an error
// naming the file or flag before any kernel sees them, on every device (the loader checks on
// the host, before a batch is copied to the device). The cuda instances skip without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/shard.h"
#include "testing.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {

class BadIdsOnDevice : public ::testing::TestWithParam<Device> {};

TrainConfig small_run(const std::string& data, Device device) {
  TrainConfig c = tiny_run("tiny", nn::Precision::bf16, 2);
  c.batch = 2;
  c.seq_len = 16;
  c.eval_batches = 1;
  c.data.source = data;
  c.device = device_name(device);
  return c;
}

void write_shards(const testing::TempDir& dir, uint32_t vocab, int32_t bad_at, int32_t bad) {
  std::vector<int32_t> tokens(200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 50);
  std::filesystem::create_directories(dir.file("shards"));
  data::shard_write(dir.file("shards/val_0.bin"), tokens, vocab);
  if (bad_at >= 0) tokens[static_cast<size_t>(bad_at)] = bad;
  // Written with a vocabulary that admits `bad`, then the header's vocab_size (offset 24,
  // u32 little-endian) is set to `vocab`: a shard from a writer that got it wrong.
  const std::string path = dir.file("shards/train_0.bin");
  data::shard_write(path, tokens, std::max<uint32_t>(vocab, static_cast<uint32_t>(bad) + 1), 2);
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  const unsigned char v[4] = {
      static_cast<unsigned char>(vocab), static_cast<unsigned char>(vocab >> 8),
      static_cast<unsigned char>(vocab >> 16), static_cast<unsigned char>(vocab >> 24)};
  std::fseek(f, 24, SEEK_SET);
  std::fwrite(v, 1, 4, f);
  std::fclose(f);
}

using testing::error_of;

TEST_P(BadIdsOnDevice, ShardsWithALargerVocabularyThanTheModelAreRefusedAtStart) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::TempDir dir;
  write_shards(dir, 300, -1, 0);  // tiny's vocab_size is 256
  const std::string what = error_of([&] { Trainer t(small_run(dir.file("shards"), device)); });
  EXPECT_NE(what.find("[train] " + dir.file("shards") +
                      ": the shards' vocabulary (300) exceeds the model's vocab_size (256)"),
            std::string::npos)
      << what;
}

TEST_P(BadIdsOnDevice, ATokenBeyondTheShardsVocabularyStopsTheStepThatReadsItBeforeItsKernels) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  testing::TempDir dir;
  write_shards(dir, 64, 5, 70);  // token 5 is in sequence 0 (tokens 0..16)
  TrainConfig c = small_run(dir.file("shards"), device);
  c.steps = 100;  // an epoch is 12 sequences: the bad one is read within 6 steps
  Trainer trainer(c);
  const std::string what = error_of([&] { trainer.run(); });
  EXPECT_NE(what.find("[shard] " + dir.file("shards/train_0.bin") +
                      ": token 70 at index 5 is beyond the vocabulary (64)"),
            std::string::npos)
      << what;
  EXPECT_LT(trainer.step(), 6);  // the step that read it did not complete
}

TEST_P(BadIdsOnDevice, MarkovVocabularyAboveTheModelsNamesTheFlag) {
  const Device device = GetParam();
  OCTET_SKIP_WITHOUT(device);
  TrainConfig c = small_run("synthetic", device);
  c.data.markov_vocab = 257;
  const std::string what = error_of([&] { Trainer t(c); });
  EXPECT_NE(what.find("--markov-vocab 257 exceeds the model's vocab_size 256"), std::string::npos)
      << what;
}

INSTANTIATE_TEST_SUITE_P(Devices, BadIdsOnDevice, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

}  // namespace
}  // namespace octet::train
