// tests/model/test_sample.cpp: generation from a model: greedy picks the argmax of the
// logits at the last prompt token, sampling is reproducible by seed, and bad prompts fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/sample.h"

namespace octet::model {
namespace {

std::unique_ptr<Llama> tiny_fp32() {
  ModelOptions o;
  o.precision = nn::Precision::fp32;
  o.batch = 1;
  auto m = std::make_unique<Llama>(llama_config_by_name("tiny"), o);
  m->init_weights(7);
  return m;
}

TEST(Sample, GreedyExtendsThePromptWithTheArgmaxOfTheLastLogits) {
  const std::unique_ptr<Llama> model = tiny_fp32();
  Llama& m = *model;
  const std::vector<int32_t> prompt = {3, 1, 4};
  const std::vector<int32_t> out = sample(m, prompt, {.tokens = 4, .temperature = 0.0});
  ASSERT_EQ(out.size(), 7u);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), out.begin()));
  // The first generated token is the argmax of a forward over the prompt alone.
  const int64_t s = m.options().seq_len, vocab = m.config().vocab_size;
  std::vector<int32_t> window(static_cast<size_t>(s), 0), none(static_cast<size_t>(s), 0);
  std::copy(prompt.begin(), prompt.end(), window.begin());
  m.forward(Tensor(window.data(), DType::i32, {1, s}), Tensor(none.data(), DType::i32, {1, s}),
            0.0f);
  const float* logits = m.logits().as<const float>() + (prompt.size() - 1) * vocab;
  EXPECT_EQ(out[3], std::max_element(logits, logits + vocab) - logits);
  EXPECT_EQ(sample(m, prompt, {.tokens = 4, .temperature = 0.0}), out);  // deterministic
}

TEST(Sample, TemperatureSamplingIsReproducibleBySeed) {
  const std::unique_ptr<Llama> model = tiny_fp32();
  Llama& m = *model;
  const SampleOptions a{.tokens = 6, .temperature = 1.0, .seed = 1};
  const std::vector<int32_t> first = sample(m, {0}, a);
  EXPECT_EQ(sample(m, {0}, a), first);
  EXPECT_EQ(first.size(), 7u);
  for (int32_t t : first) EXPECT_TRUE(t >= 0 && t < m.config().vocab_size) << t;
}

TEST(Sample, RefusesTokensOutsideTheVocabulary) {
  const std::unique_ptr<Llama> model = tiny_fp32();
  Llama& m = *model;
  try {
    sample(m, {0, static_cast<int32_t>(m.config().vocab_size)}, {});
    ADD_FAILURE() << "expected an octet::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[sample] prompt token"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sample(m, {}, {}), Error);
}

}  // namespace
}  // namespace octet::model
