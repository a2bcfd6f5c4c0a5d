// train/memory_check.cpp: the run's memory estimate and the check before allocating.
#include "train/memory_check.h"

#include <cstdio>

#include "core/error.h"
#include "core/memory_info.h"

namespace octet::train {
namespace {

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GiB (%.4g bytes)", bytes / (1024.0 * 1024 * 1024), bytes);
  return buf;
}

double bytes_per_parameter(nn::Precision precision) {
  // master, gradient, AdamW m and v in f32, plus a bf16 working copy (fp8: bf16 or the FP8
  // copy and its transpose, 2 bytes either way); fp32 computes with the master itself.
  return 16.0 + (precision == nn::Precision::fp32 ? 0.0 : 2.0);
}

}  // namespace

std::string MemoryEstimate::str() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, " (%.4g parameters x %.0f bytes + %s of activations)", parameters,
                parameters > 0 ? parameter_bytes / parameters : 0.0, gib(activation_bytes).c_str());
  return gib(total()) + buf;
}

MemoryEstimate estimate_run_memory(const model::LlamaConfig& c, nn::Precision precision,
                                   int64_t batch, int64_t seq_len) {
  const double d = static_cast<double>(c.hidden_size), f = static_cast<double>(c.intermediate_size);
  const double v = static_cast<double>(c.vocab_size), l = static_cast<double>(c.num_hidden_layers);
  const double heads = static_cast<double>(c.num_attention_heads);
  const double kv = static_cast<double>(c.num_key_value_heads);
  const double hd = c.num_attention_heads > 0 ? d / heads : 0.0;
  const double qkv = (heads + 2 * kv) * hd;
  MemoryEstimate e;
  e.parameters = v * d * (c.tie_word_embeddings ? 1 : 2) +
                 l * (d * qkv + heads * hd * d + 3 * d * f + 2 * d) + d;
  e.parameter_bytes = e.parameters * bytes_per_parameter(precision);
  const double tokens = static_cast<double>(batch) *
                        static_cast<double>(seq_len > 0 ? seq_len : c.max_position_embeddings);
  const double width = precision == nn::Precision::fp32 ? 4.0 : 2.0;
  // The logits, and per layer at least its QKV and gate/up outputs kept for backward.
  e.activation_bytes = tokens * width * (v + l * (qkv + 2 * f));
  return e;
}

void check_run_fits(const MemoryEstimate& estimate, Device device) {
  const std::optional<MemoryInfo> info = memory_info(device);
  if (!info) return;
  OCTET_CHECK(estimate.total() <= static_cast<double>(info->available), "train",
              "this run does not fit: it needs at least ", estimate.str(), ", but ",
              device_name(device), " has ", gib(static_cast<double>(info->available)),
              " available of ", gib(static_cast<double>(info->total)), " (", info->source,
              "); use a smaller model (vocab_size, hidden_size, layers) or --batch / --seq-len");
}

}  // namespace octet::train
