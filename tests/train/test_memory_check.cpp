// tests/train/test_memory_check.cpp: the run's memory estimate and the refusal of a run
// that cannot fit, before anything is allocated.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/memory_info.h"
#include "model/config.h"
#include "train/memory_check.h"
#include "train/trainer.h"
#include "training_testing.h"

namespace octet::train {
namespace {

TEST(MemoryCheck, EstimateCountsEveryParameterAndTheLogits) {
  model::LlamaConfig c;  // tiny's defaults: V 256, d 64, f 176, 2 layers, 4 heads, 2 kv
  const MemoryEstimate e = estimate_run_memory(c, nn::Precision::bf16, 8, 0);
  EXPECT_EQ(e.parameters, static_cast<double>(c.parameter_count()));
  EXPECT_EQ(e.parameter_bytes, 18.0 * static_cast<double>(c.parameter_count()));
  EXPECT_EQ(estimate_run_memory(c, nn::Precision::fp32, 8, 0).parameter_bytes,
            16.0 * static_cast<double>(c.parameter_count()));
  // T = 8 x 64 tokens; qkv = (4 + 2 x 2) x 16 = 128; bf16 logits and activations.
  EXPECT_EQ(e.activation_bytes, 8.0 * 64 * 2 * (256 + 2 * (128 + 2 * 176)));
  // --seq-len overrides max_position_embeddings.
  EXPECT_EQ(estimate_run_memory(c, nn::Precision::bf16, 8, 32).activation_bytes,
            e.activation_bytes / 2);
}

TEST(MemoryCheck, HostMemoryIsKnownAndPlausible) {
  const auto info = memory_info(Device::cpu());
  ASSERT_TRUE(info.has_value());
  EXPECT_GT(info->total, uint64_t{1} << 26);  // any machine that runs the tests has 64 MiB
  EXPECT_GT(info->available, 0u);
}

TEST(MemoryCheck, ARunThatCannotFitIsRefusedWithItsEstimateBeforeAllocating) {
  testing::TempDir dir;
  const std::string model = dir.file("huge_vocab.json");
  // The issue's case: a vocabulary of 10^11 (51 TB of embeddings and LM head at d 64).
  std::ofstream(model) << R"({"vocab_size": 100000000000, "hidden_size": 64,
    "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 64})";
  TrainConfig c = tiny_run(model, nn::Precision::bf16, 1);
  c.data.train_tokens = 4096;
  c.data.val_tokens = 1024;
  try {
    Trainer t(c);
    FAIL() << "a run needing about 1.3e14 bytes was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[train] this run does not fit: it needs at least"), std::string::npos)
        << what;
    EXPECT_NE(what.find("1.28e+13 parameters x 18 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("available of"), std::string::npos) << what;
    EXPECT_EQ(what.find("out of host memory"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace octet::train
