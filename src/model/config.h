// model/config.h: the shape of a LLaMA-style model, by name (tiny, small, 1b, 7b)
// or from a JSON file in Hugging Face's LlamaConfig form, validated.
// defines: LlamaConfig, llama_config_by_name, llama_config_from_json, llama_config_to_json,
//          load_llama_config, llama_config_names
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/json_fwd.h"

namespace octet::model {

// Field names follow transformers.LlamaConfig so that config.json files move
// between octet and Hugging Face tools unchanged.
struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 176;
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t max_position_embeddings = 64;  // the training sequence length
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t qkv_size() const { return (num_attention_heads + 2 * num_key_value_heads) * head_dim(); }
  // Parameters in total (counted from the shapes; nothing is allocated).
  int64_t parameter_count() const;
  // Throws octet::Error naming `where` and the field when the shape is impossible.
  void validate(std::string_view where) const;
};

// "tiny" (runs in seconds on a CPU), "small" (~25M parameters), "1b" (TinyLlama-1.1B
// shapes), "7b" (LLaMA-2-7B shapes).
LlamaConfig llama_config_by_name(std::string_view name);
const char* llama_config_names();  // "tiny, small, 1b, 7b"
// Reads a HF-style LlamaConfig object; unknown fields are errors, except the ones HF
// writes that do not change the model's shape (listed in config.cpp).
LlamaConfig llama_config_from_json(const Json& json, std::string_view where);
Json llama_config_to_json(const LlamaConfig& config);
// A name, or a path to a .json file.
LlamaConfig load_llama_config(const std::string& name_or_path);

}  // namespace octet::model
