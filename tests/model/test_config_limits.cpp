// tests/model/test_config_limits.cpp: configs whose sizes would overflow int64 products (found
// by fuzz/fuzz_config.cpp under UBSan) are refused by validation with a clear error.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/json.h"
#include "model/config.h"

namespace octet::model {
namespace {

void expect_too_large(const char* json) {
  try {
    const LlamaConfig c = llama_config_from_json(parse_json(json), "big.json");
    FAIL() << "accepted, parameter_count would be " << c.parameter_count();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("big.json: the model is too large"), std::string::npos)
        << e.what();
  }
}

TEST(ConfigLimits, SizesWhoseProductsOverflowAreRefused) {
  expect_too_large(R"({"vocab_size": 4611686018427387904, "hidden_size": 4611686018427387904,
    "intermediate_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2})");
  expect_too_large(R"({"vocab_size": 1, "hidden_size": 9223372036854775806,
    "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 4611686018427387903,
    "num_key_value_heads": 4611686018427387903})");
  expect_too_large(R"({"vocab_size": 64, "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 4294967296})");
}

TEST(ConfigLimits, ALargeButRepresentableModelIsAccepted) {
  // A 10^11 vocabulary (qkv = (4 + 2 x 4) x 16 = 192; the memory check, not validation,
  // refuses training it)
  const LlamaConfig c = llama_config_from_json(
      parse_json(R"({"vocab_size": 100000000000, "hidden_size": 64, "intermediate_size": 176,
        "num_hidden_layers": 2, "num_attention_heads": 4})"),
      "ok.json");
  EXPECT_EQ(c.parameter_count(),
            100000000000LL * 64 * 2 + 2 * (64 * 192 + 64 * 64 + 3 * 64 * 176 + 128) + 64);
}

}  // namespace
}  // namespace octet::model
