// model/config.cpp
#include "model/config.h"

#include <filesystem>

#include "core/error.h"
#include "io/json_fields.h"

namespace octet::model {

int64_t LlamaConfig::parameter_count() const {
  const int64_t d = hidden_size, f = intermediate_size, hd = head_dim();
  const int64_t attention = d * qkv_size() + num_attention_heads * hd * d;
  const int64_t mlp = 3 * d * f;
  const int64_t layer = attention + mlp + 2 * d;
  const int64_t embeddings = vocab_size * d * (tie_word_embeddings ? 1 : 2);
  return embeddings + num_hidden_layers * layer + d;
}

void LlamaConfig::validate(std::string_view where) const {
  const std::string w(where);
  auto positive = [&](int64_t v, const char* field) {
    OCTET_CHECK(v > 0, "config", w, ": ", field, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  OCTET_CHECK(hidden_size % num_attention_heads == 0, "config", w, ": num_attention_heads (",
              num_attention_heads, ") must divide hidden_size (", hidden_size, ")");
  OCTET_CHECK(num_attention_heads % num_key_value_heads == 0, "config", w,
              ": num_key_value_heads (", num_key_value_heads, ") must divide num_attention_heads (",
              num_attention_heads, ")");
  OCTET_CHECK(head_dim() % 2 == 0, "config", w,
              ": the head dimension hidden_size / "
              "num_attention_heads = ",
              head_dim(), " must be even for rotary embeddings");
  OCTET_CHECK(rms_norm_eps > 0.0, "config", w, ": rms_norm_eps must be positive, got ",
              rms_norm_eps);
  OCTET_CHECK(rope_theta > 0.0, "config", w, ": rope_theta must be positive, got ", rope_theta);
  // Sizes whose products would overflow int64 (parameter counts, byte offsets) are refused
  // here, counted in double, so that every product computed from a valid config is defined.
  const double d = static_cast<double>(hidden_size), f = static_cast<double>(intermediate_size);
  const double hd = static_cast<double>(head_dim());
  const double qkv =
      (static_cast<double>(num_attention_heads) + 2.0 * static_cast<double>(num_key_value_heads)) *
      hd;
  const double params =
      static_cast<double>(vocab_size) * d * 2 +
      static_cast<double>(num_hidden_layers) * (d * qkv + d * d + 3 * d * f + 2 * d);
  OCTET_CHECK(params <= 0x1p48 && max_position_embeddings <= (int64_t{1} << 31), "config", w,
              ": the model is too large: about ", params, " parameters (at most 2^48) and ",
              max_position_embeddings, " positions (at most 2^31)");
}

namespace {

// The named sizes: the defaults of LlamaConfig are "tiny".
struct Preset {
  const char* name;
  LlamaConfig config;
};
const Preset kPresets[] = {
    {"tiny", {}},  // 2 layers of width 64, vocabulary 256, sequences of 64
    {"small",
     {.vocab_size = 8192,
      .hidden_size = 512,
      .intermediate_size = 1376,
      .num_hidden_layers = 6,
      .num_attention_heads = 8,
      .num_key_value_heads = 4,
      .max_position_embeddings = 512}},
    {"1b",  // TinyLlama-1.1B
     {.vocab_size = 32000,
      .hidden_size = 2048,
      .intermediate_size = 5632,
      .num_hidden_layers = 22,
      .num_attention_heads = 32,
      .num_key_value_heads = 4,
      .max_position_embeddings = 2048}},
    {"7b",  // LLaMA-2-7B
     {.vocab_size = 32000,
      .hidden_size = 4096,
      .intermediate_size = 11008,
      .num_hidden_layers = 32,
      .num_attention_heads = 32,
      .num_key_value_heads = 32,
      .max_position_embeddings = 4096}},
};

}  // namespace

LlamaConfig llama_config_by_name(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.config;
  }
  OCTET_FAIL("config", "unknown model '", std::string(name), "'; expected one of ",
             llama_config_names(), " or a path to a config.json");
}

const char* llama_config_names() {
  static const std::string names = [] {
    std::string s;
    for (const Preset& p : kPresets) s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
  }();
  return names.c_str();
}

LlamaConfig llama_config_from_json(const Json& json, std::string_view where) {
  OCTET_CHECK(json.is_object(), "config", std::string(where), ": expected a JSON object");
  // Fields HF writes that do not change the shape of a LLaMA model octet trains.
  check_known_keys(json,
                   {"vocab_size",
                    "hidden_size",
                    "intermediate_size",
                    "num_hidden_layers",
                    "num_attention_heads",
                    "num_key_value_heads",
                    "max_position_embeddings",
                    "rms_norm_eps",
                    "rope_theta",
                    "tie_word_embeddings",
                    "architectures",
                    "model_type",
                    "hidden_act",
                    "torch_dtype",
                    "initializer_range",
                    "use_cache",
                    "bos_token_id",
                    "eos_token_id",
                    "pad_token_id",
                    "attention_bias",
                    "attention_dropout",
                    "mlp_bias",
                    "pretraining_tp",
                    "rope_scaling",
                    "transformers_version",
                    "head_dim"},
                   where);
  LlamaConfig c;
  c.vocab_size = get_int(json, "vocab_size", where);
  c.hidden_size = get_int(json, "hidden_size", where);
  c.intermediate_size = get_int(json, "intermediate_size", where);
  c.num_hidden_layers = get_int(json, "num_hidden_layers", where);
  c.num_attention_heads = get_int(json, "num_attention_heads", where);
  c.num_key_value_heads = get_int_or(json, "num_key_value_heads", c.num_attention_heads, where);
  c.max_position_embeddings = get_int_or(json, "max_position_embeddings", 2048, where);
  c.rms_norm_eps = get_number_or(json, "rms_norm_eps", 1e-6, where);
  c.rope_theta = get_number_or(json, "rope_theta", 10000.0, where);
  c.tie_word_embeddings = get_bool_or(json, "tie_word_embeddings", false, where);
  const std::string w(where);
  OCTET_CHECK(get_string_or(json, "hidden_act", "silu", where) == "silu", "config", w,
              ": hidden_act must be \"silu\" (SwiGLU)");
  OCTET_CHECK(!get_bool_or(json, "attention_bias", false, where), "config", w,
              ": attention_bias must be false (LLaMA has no biases)");
  OCTET_CHECK(!get_bool_or(json, "mlp_bias", false, where), "config", w,
              ": mlp_bias must be false (LLaMA has no biases)");
  if (const auto scaling = json.find("rope_scaling"); scaling != json.end()) {
    OCTET_CHECK(scaling->is_null(), "config", w, ": rope_scaling must be null (not supported)");
  }
  if (json.contains("head_dim")) {
    const int64_t hd = get_int_or(json, "head_dim", 0, where);
    OCTET_CHECK(json.at("head_dim").is_null() ||
                    (c.num_attention_heads > 0 && hd * c.num_attention_heads == c.hidden_size),
                "config", w, ": head_dim must equal hidden_size / num_attention_heads");
  }
  c.validate(where);
  return c;
}

Json llama_config_to_json(const LlamaConfig& c) {
  Json j = Json::object();
  j["architectures"] = Json::array({"LlamaForCausalLM"});
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["rope_scaling"] = nullptr;
  j["torch_dtype"] = "float32";
  return j;
}

LlamaConfig load_llama_config(const std::string& name_or_path) {
  if (name_or_path.ends_with(".json") || std::filesystem::exists(name_or_path)) {
    return llama_config_from_json(read_json_file(name_or_path), name_or_path);
  }
  return llama_config_by_name(name_or_path);
}

}  // namespace octet::model
