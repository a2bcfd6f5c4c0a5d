// tests/bench/test_step_flops.cpp: the model FLOPs `octet bench step` reports (TFLOP/s, MFU)
// against a hand count of the named tiny model, and the sweep's LLaMA shapes.
#include <gtest/gtest.h>

// The header belongs to the octet command (cli/bench/) and is self-contained (header-only).
#include "cli/bench/step_model.h"

namespace octet::bench {
namespace {

TEST(StepFlops, TinyMatchesAHandCountOfEveryMatmul) {
  const model::LlamaConfig c = model::llama_config_by_name("tiny");
  // tiny: d 64, FFN 176, 2 layers, 4 query heads and 2 K/V heads of dim 16, vocab 256, S 64.
  ASSERT_EQ(c.hidden_size, 64);
  ASSERT_EQ(c.intermediate_size, 176);
  ASSERT_EQ(c.num_hidden_layers, 2);
  ASSERT_EQ(c.num_attention_heads, 4);
  ASSERT_EQ(c.num_key_value_heads, 2);
  ASSERT_EQ(c.vocab_size, 256);
  ASSERT_EQ(c.max_position_embeddings, 64);
  const int64_t q = 64 * 64, k = 64 * 32, v = 64 * 32, o = 64 * 64;  // [out, in] products
  const int64_t gate = 64 * 176, up = 64 * 176, down = 176 * 64, lm_head = 256 * 64;
  const int64_t per_layer = q + k + v + o + gate + up + down;  // 46080
  EXPECT_EQ(step_matmul_params(c), 2 * per_layer + lm_head);   // 108544
  EXPECT_EQ(step_matmul_params(c), 108544);
  // Per layer and query head: 2 causal matmuls (scores, P V) of 2 * 16 * 64/2 FLOPs per token
  // forward, x3 with backward; 4 heads, 2 layers: 49152.
  const int64_t attention = 3 * 2 * (2 * 16 * 64 / 2) * 4 * 2;
  EXPECT_EQ(attention, 49152);
  EXPECT_EQ(step_flops_per_token(c, 64), 6 * 108544 + attention);  // 700416
  // One step of batch 8 x 64 tokens.
  EXPECT_DOUBLE_EQ(step_model_flops(c, 8, 64), 700416.0 * 512.0);
}

TEST(StepFlops, MatmulParamsAreTheModelsParametersLessEmbeddingAndNorms) {
  for (const char* name : {"tiny", "small", "1b", "7b"}) {
    const model::LlamaConfig c = model::llama_config_by_name(name);
    ASSERT_FALSE(c.tie_word_embeddings) << name;
    const int64_t norms = (2 * c.num_hidden_layers + 1) * c.hidden_size;
    EXPECT_EQ(step_matmul_params(c), c.parameter_count() - c.vocab_size * c.hidden_size - norms)
        << name;
  }
}

TEST(StepFlops, AttentionTermGrowsLinearlyWithSequenceAndIgnoresKvHeads) {
  model::LlamaConfig c = model::llama_config_by_name("1b");
  const int64_t linear = 6 * step_matmul_params(c);
  // 6 L S d per token: 6 * 22 * 2048 * 2048.
  EXPECT_EQ(step_flops_per_token(c, 2048) - linear, int64_t{6} * 22 * 2048 * 2048);
  EXPECT_EQ(step_flops_per_token(c, 4096) - linear, 2 * (step_flops_per_token(c, 2048) - linear));
  const int64_t gqa = step_flops_per_token(c, 2048) - linear;
  c.num_key_value_heads = c.num_attention_heads;
  EXPECT_EQ(step_flops_per_token(c, 2048) - 6 * step_matmul_params(c), gqa);
}

TEST(StepFlops, TiedEmbeddingsStillCountTheLmHeadGemm) {
  model::LlamaConfig c = model::llama_config_by_name("small");
  const int64_t untied = step_matmul_params(c);
  c.tie_word_embeddings = true;
  EXPECT_EQ(step_matmul_params(c), untied);
}

TEST(StepSweep, FfnRuleGivesLlamaWidthsAndHeadsOf128) {
  EXPECT_EQ(llama_ffn_size(2048), model::llama_config_by_name("1b").intermediate_size);
  EXPECT_EQ(llama_ffn_size(4096), model::llama_config_by_name("7b").intermediate_size);
  EXPECT_EQ(llama_ffn_size(1024), 2816);
  EXPECT_EQ(llama_ffn_size(8192), 22016);
  for (int64_t hidden : {1024, 2048, 4096, 8192}) {
    const model::LlamaConfig c = sweep_config(hidden, 2, 4096);
    EXPECT_NO_THROW(c.validate("sweep"));
    EXPECT_EQ(c.head_dim(), 128);
    EXPECT_EQ(c.intermediate_size % 256, 0);
    EXPECT_EQ(c.max_position_embeddings, 4096);
  }
}

}  // namespace
}  // namespace octet::bench
