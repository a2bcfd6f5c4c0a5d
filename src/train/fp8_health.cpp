// train/fp8_health.cpp
#include "train/fp8_health.h"

#include <cstdio>

namespace octet::train {
namespace {

fp8::Fp8Stats operand(const fp8::TensorStats& t) {
  fp8::Fp8Stats s;
  if (t.numel > 0) s.add(t);  // a tensor never quantized reports zeros
  return s;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%%", 100.0 * share);
  return buf;
}

}  // namespace

std::vector<LayerFp8Stats> gather_fp8_stats(const model::Llama& model) {
  std::vector<LayerFp8Stats> out;
  if (model.options().precision != nn::Precision::fp8) return out;
  for (const auto& [name, s] : model.fp8_stats()) {
    out.emplace_back(name,
                     Fp8OperandStats{operand(s.x), operand(s.weight), operand(s.grad_output)});
  }
  return out;
}

std::vector<std::string> fp8_health_warnings(const std::vector<LayerFp8Stats>& stats,
                                             const Fp8HealthThresholds& thresholds) {
  std::vector<std::string> out;
  for (const auto& [name, s] : stats) {
    for (const auto& [op, o] :
         {std::pair<const char*, const fp8::Fp8Stats*>{"x", &s.x}, {"w", &s.w}, {"dy", &s.dy}}) {
      const std::string who = name + " " + op + ": ";
      if (o->nonfinite_amax() > 0)
        out.push_back(who + "non-finite amax (NaN or Inf in the tensor)");
      if (o->saturated_share() > thresholds.saturated) {
        out.push_back(who + percent(o->saturated_share()) + " saturated (threshold " +
                      percent(thresholds.saturated) + ")");
      }
      if (o->flushed_share() > thresholds.flushed) {
        out.push_back(who + percent(o->flushed_share()) + " flushed to zero (threshold " +
                      percent(thresholds.flushed) + ")");
      }
    }
  }
  return out;
}

}  // namespace octet::train
