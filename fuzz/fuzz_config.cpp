// fuzz/fuzz_config.cpp: config.json (a Hugging Face LlamaConfig) on any bytes: an
// octet::Error, or a validated config whose parameter count, memory estimate and JSON round
// trip are well defined (UBSan checks the integer arithmetic).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "io/json.h"
#include "model/config.h"
#include "train/memory_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const model::LlamaConfig c = model::llama_config_from_json(parse_json(text, "fuzz"), "fuzz");
    (void)c.parameter_count();
    (void)c.qkv_size();
    for (nn::Precision p : {nn::Precision::fp32, nn::Precision::bf16, nn::Precision::fp8}) {
      (void)train::estimate_run_memory(c, p, 8, 0).str();
    }
    const model::LlamaConfig back =
        model::llama_config_from_json(model::llama_config_to_json(c), "fuzz round trip");
    if (back.vocab_size != c.vocab_size || back.hidden_size != c.hidden_size ||
        back.num_hidden_layers != c.num_hidden_layers ||
        back.max_position_embeddings != c.max_position_embeddings) {
      std::abort();
    }
  } catch (const Error&) {
  }
  return 0;
}
