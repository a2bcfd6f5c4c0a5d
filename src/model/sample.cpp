// model/sample.cpp
#include "model/sample.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace octet::model {

std::vector<int32_t> sample(Llama& model, std::vector<int32_t> prompt,
                            const SampleOptions& options) {
  const int64_t vocab = model.config().vocab_size, s = model.options().seq_len;
  OCTET_CHECK(model.options().batch == 1, "sample", "the model must have batch 1, got ",
              model.options().batch);
  OCTET_CHECK(!prompt.empty(), "sample", "the prompt needs at least one token");
  for (int32_t id : prompt) {
    OCTET_CHECK(id >= 0 && id < vocab, "sample", "prompt token ", id,
                " is outside the vocabulary [0, ", vocab, ")");
  }
  OCTET_CHECK(options.tokens >= 0, "sample", "tokens must be >= 0, got ", options.tokens);
  std::vector<int32_t> tokens = std::move(prompt);
  std::mt19937_64 rng(options.seed);
  std::vector<int32_t> window(static_cast<size_t>(s)), none(static_cast<size_t>(s), 0);
  std::vector<double> p(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < options.tokens; ++i) {
    const size_t start = tokens.size() > static_cast<size_t>(s) ? tokens.size() - s : 0;
    const size_t len = tokens.size() - start;
    std::fill(window.begin(), window.end(), 0);
    std::copy(tokens.begin() + start, tokens.end(), window.begin());
    model.forward(Tensor(window.data(), DType::i32, {1, s}),
                  Tensor(none.data(), DType::i32, {1, s}), 0.0f);
    const Tensor all = model.logits();
    OCTET_CHECK(all.dtype == DType::f32 && all.device.is_cpu(), "sample",
                "the model's logits must be f32 on the CPU (build it with precision fp32)");
    const float* logits = all.as<const float>() + (len - 1) * vocab;
    int32_t next = 0;
    if (options.temperature <= 0.0) {
      for (int32_t v = 1; v < vocab; ++v) next = logits[v] > logits[next] ? v : next;
    } else {
      double max = logits[0], total = 0.0;
      for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, logits[v]);
      for (int64_t v = 0; v < vocab; ++v) {
        total += p[v] = std::exp((logits[v] - max) / options.temperature);
      }
      double u = static_cast<double>(rng() >> 11) * 0x1p-53 * total;
      for (next = 0; next + 1 < vocab && u >= p[next]; ++next) u -= p[next];
    }
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace octet::model
