// fp8/stats.h: what a user reads when an FP8 run goes wrong: per quantized tensor
// its amax, scales and the shares of values that saturated or were flushed to zero,
// accumulated per layer.
// defines: TensorStats, read_stats, Fp8Stats
#pragma once

#include <cstdint>
#include <string>

#include "fp8/quantized_tensor.h"
#include "io/json_fwd.h"

namespace octet::fp8 {

struct TensorStats {
  float amax = 0.0f;       // of the high-precision tensor (NaN/Inf when it held one)
  float min_scale = 0.0f;  // over the tensor's scale blocks (one block per tensor modes)
  float max_scale = 0.0f;
  int64_t numel = 0;
  int64_t saturated = 0;  // values beyond the format's range, clamped to ±max
  int64_t flushed = 0;    // nonzero values that became ±0
};

// Reads the statistics of q's last quantization back to the host. It synchronises
// with the device: call it when reporting (every eval), not every step.
TensorStats read_stats(const QuantizedTensor& q);

// TensorStats accumulated over tensors and calls (a layer's x, W and dY, over steps).
class Fp8Stats {
 public:
  void add(const TensorStats& s);
  int64_t tensors() const { return tensors_; }
  float amax() const { return amax_; }  // max over what was added (NaN wins)
  float min_scale() const { return min_scale_; }
  float max_scale() const { return max_scale_; }
  int64_t nonfinite_amax() const { return nonfinite_; }
  double saturated_share() const { return numel_ ? double(saturated_) / double(numel_) : 0.0; }
  double flushed_share() const { return numel_ ? double(flushed_) / double(numel_) : 0.0; }
  // {"amax":..,"min_scale":..,"max_scale":..,"saturated":..,"flushed":..,"nonfinite_amax":..};
  // JSON has no NaN/Inf: a non-finite amax or scale is written as null (and amax counted).
  Json json() const;

 private:
  int64_t tensors_ = 0, numel_ = 0, saturated_ = 0, flushed_ = 0, nonfinite_ = 0;
  float amax_ = 0.0f, min_scale_ = 0.0f, max_scale_ = 0.0f;
};

}  // namespace octet::fp8
