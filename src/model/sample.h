// model/sample.h: generation: a prompt extended token by token from a model's logits,
// greedily or by sampling at a temperature.
// defines: SampleOptions, sample
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama.h"

namespace octet::model {

struct SampleOptions {
  int64_t tokens = 32;       // tokens to generate after the prompt
  double temperature = 1.0;  // <= 0: greedy (the most likely token)
  uint64_t seed = 0;         // of the sampling
};

// The prompt followed by options.tokens generated tokens. Each step runs a forward over the
// last seq_len tokens (left-aligned; later positions cannot affect earlier logits) and picks
// the next token from the logits at the last one. `model` must have batch 1 and f32 logits
// (precision fp32); prompt ids must lie in [0, vocab_size). Throws octet::Error ("[sample] ...").
std::vector<int32_t> sample(Llama& model, std::vector<int32_t> prompt,
                            const SampleOptions& options);

}  // namespace octet::model
