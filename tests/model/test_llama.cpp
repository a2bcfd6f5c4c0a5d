// tests/model/test_llama.cpp: the whole LLaMA model: its gradients against finite
// differences in fp32, its parameter layout, and the precision policy's losses.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "testing.h"

namespace octet::model {
namespace {

LlamaConfig small_config() {
  LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 8;
  return c;
}

std::vector<int32_t> random_ids(testing::Rng& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

TEST(Llama, TinyFp32GradientsMatchFiniteDifferences) {
  testing::Rng rng(testing::fresh_seed());
  const LlamaConfig c = llama_config_by_name("tiny");
  ModelOptions o;
  o.precision = nn::Precision::fp32;
  o.batch = 1;
  Llama m(c, o);
  // Larger weights than training's 0.02 make every layer matter to the loss.
  m.init_weights(rng(), 0.3);
  const int64_t t = m.tokens();
  std::vector<int32_t> in = random_ids(rng, t, c.vocab_size), tg = random_ids(rng, t, c.vocab_size);
  const Tensor inputs(in.data(), DType::i32, {o.batch, c.max_position_embeddings});
  const Tensor targets(tg.data(), DType::i32, {o.batch, c.max_position_embeddings});

  m.zero_grads();
  m.forward(inputs, targets, 1.0f / static_cast<float>(t));  // d(mean loss)
  m.backward();
  std::vector<float> grads(static_cast<size_t>(m.parameter_count()));
  copy_bytes(grads.data(), Device::cpu(), m.grads().data, Device::cpu(), grads.size() * 4);

  float* w = m.master().as<float>();
  auto loss_at = [&](int64_t i, double delta) {
    const float saved = w[i];
    w[i] = static_cast<float>(saved + delta);
    m.sync_working_weights();
    const double l = m.forward(inputs, targets, 0.0f);
    w[i] = saved;
    return l;
  };
  // Central differences at h and h/2. Truncation error is O(h^2); the difference of the two
  // estimates, times 4/3, bounds it (Richardson). Rounding: the loss is a mean of f32 token
  // losses, each within ~64 u of exact through 2 layers (u = 2^-24), so each difference
  // quotient errs by at most 2 * 64 u * |L| / h. Bound = both terms, with a factor 2 margin.
  const double h = 1e-2;
  int checked = 0;
  for (const ParamInfo& p : m.params()) {
    for (int k = 0; k < 3; ++k) {
      const int64_t i =
          p.offset + static_cast<int64_t>(rng() % static_cast<uint64_t>(p.shape.numel()));
      const double l0 = m.forward(inputs, targets, 0.0f);
      const double fd_h = (loss_at(i, h) - loss_at(i, -h)) / (2 * h);
      const double fd_h2 = (loss_at(i, h / 2) - loss_at(i, -h / 2)) / h;
      const double richardson = (4 * fd_h2 - fd_h) / 3;
      const double truncation = 4.0 / 3.0 * std::abs(fd_h - fd_h2);
      const double rounding = 2 * 64 * 0x1p-24 * std::abs(l0) / (h / 2);
      const double bound = 2 * (truncation + rounding) + 1e-6;
      EXPECT_NEAR(grads[i], richardson, bound) << p.name << " element " << i - p.offset;
      ++checked;
    }
  }
  m.sync_working_weights();
  EXPECT_EQ(checked, 3 * static_cast<int>(m.params().size()));
}

TEST(Llama, ParametersAreHuggingFaceNamedAndContiguous) {
  LlamaConfig c = small_config();
  ModelOptions o;
  o.precision = nn::Precision::fp32;
  Llama m(c, o);
  EXPECT_EQ(m.parameter_count(), c.parameter_count());
  int64_t next = 0;
  for (const ParamInfo& p : m.params()) {
    EXPECT_EQ(p.offset, next) << p.name;
    next += p.shape.numel();
  }
  EXPECT_EQ(m.param("model.layers.1.self_attn.k_proj.weight").shape,
            (Shape{c.num_key_value_heads * c.head_dim(), c.hidden_size}));
  EXPECT_THROW(m.param("model.layers.9.mlp.up_proj.weight"), Error);
  c.tie_word_embeddings = true;
  Llama tied(c, o);
  EXPECT_EQ(tied.parameter_count(), c.parameter_count());
  EXPECT_THROW(tied.param("lm_head.weight"), Error);
}

// init_weights draws Hugging Face's N(0, std^2) for the matrices through Box-Muller on the
// integer output of mt19937_64, two draws a value, in parameter order, and sets the norm
// weights to 1: one stream, so a seed starts the same run in every version of octet and at
// any thread count. The embedding here has more values than one of the transform's chunks
// (2^20), so the stream runs on across a chunk's end.
TEST(Llama, InitWeightsFollowsOneBoxMullerStreamAtAnyThreadCount) {
  LlamaConfig c = small_config();
  c.vocab_size = 4500;
  c.hidden_size = 256;
  c.intermediate_size = 64;
  ModelOptions o;
  o.precision = nn::Precision::fp32;
  o.batch = 1;
  const uint64_t seed = testing::fresh_seed();
  const double std = 0.02;
  const int saved = omp_get_max_threads();
  std::vector<float> expected;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Llama m(c, o);
    ASSERT_GT(m.param("model.embed_tokens.weight").shape.numel(), int64_t{1} << 20);
    if (expected.empty()) {
      expected.assign(static_cast<size_t>(m.parameter_count()), 0.0f);
      std::mt19937_64 rng(seed);
      for (const ParamInfo& p : m.params()) {
        for (int64_t i = 0; i < p.shape.numel(); ++i) {
          float v = 1.0f;
          if (p.decay) {
            const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1p-53;
            const double u2 = static_cast<double>(rng() >> 11) * 0x1p-53;
            v = static_cast<float>(
                std * (std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2)));
          }
          expected[static_cast<size_t>(p.offset + i)] = v;
        }
      }
    }
    m.init_weights(seed, std);
    const Tensor w = m.master();
    ASSERT_EQ(w.numel(), static_cast<int64_t>(expected.size()));
    int64_t differ = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      differ += std::memcmp(w.as<float>() + i, &expected[static_cast<size_t>(i)], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "values of " << w.numel() << " differ at " << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Llama, Bf16AndFp8LossesStayNearFp32) {
  testing::Rng rng(testing::fresh_seed());
  LlamaConfig c = small_config();
  c.max_position_embeddings = 16;  // T = 32: a multiple of 16 for the FP8 GEMMs
  c.intermediate_size = 64;
  const uint64_t seed = rng();
  std::vector<int32_t> in = random_ids(rng, 32, c.vocab_size),
                       tg = random_ids(rng, 32, c.vocab_size);
  double loss[3];
  const nn::Precision ps[3] = {nn::Precision::fp32, nn::Precision::bf16, nn::Precision::fp8};
  for (int i = 0; i < 3; ++i) {
    ModelOptions o;
    o.precision = ps[i];
    o.batch = 2;
    Llama m(c, o);
    m.init_weights(seed);
    loss[i] = m.forward(Tensor(in.data(), DType::i32, {2, 16}),
                        Tensor(tg.data(), DType::i32, {2, 16}), 0.0f);
  }
  // At initialisation the logits are tiny (weights 0.02), so the loss is near log(V)
  // whatever the precision; bf16 and FP8 perturb each logit by a few of their ulps
  // (2^-8, 2^-4 relative), which moves a loss of ~3 nats by far less than 1%.
  EXPECT_NEAR(loss[1], loss[0], 0.01 * loss[0]);
  EXPECT_NEAR(loss[2], loss[0], 0.01 * loss[0]);
  EXPECT_NEAR(loss[0], std::log(static_cast<double>(c.vocab_size)), 0.1);
}

}  // namespace
}  // namespace octet::model
