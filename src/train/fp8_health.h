// train/fp8_health.h: the FP8 health a run reports at its log steps: each block linear's
// statistics per GEMM operand (x, W, dY: amax, scales, saturated and flushed shares), and
// warnings when a share passes its threshold.
// defines: Fp8HealthThresholds, gather_fp8_stats, fp8_health_warnings
#pragma once

#include <string>
#include <vector>

#include "model/llama.h"
#include "train/metrics.h"

namespace octet::train {

// When an operand's quantization is reported as unhealthy. Saturation: under current
// scaling the amax maps to the format's max, so any clamped value means a stale scale
// (delayed scaling) or an outlier; more than 1 in 10^4 values is a scale that lags the data.
// Underflow: E4M3 keeps values down to 2^-9 (1/229376 of its max 448), E5M2 down to 2^-16
// (1/3.8e9 of 57344), so more than 1% of the nonzero values flushed to zero means the
// tensor's dynamic range exceeds the format's (or the scale is far too small).
struct Fp8HealthThresholds {
  double saturated = 1e-4;
  double flushed = 1e-2;
};

// Each FP8 block linear's statistics of its last counted quantizations (reads them back:
// call at log steps). Empty under fp32/bf16.
std::vector<LayerFp8Stats> gather_fp8_stats(const model::Llama& model);

// One line per operand over a threshold, or with a non-finite amax:
// "layers.0.qkv dy: 2.31% flushed to zero (threshold 1%)".
std::vector<std::string> fp8_health_warnings(const std::vector<LayerFp8Stats>& stats,
                                             const Fp8HealthThresholds& thresholds = {});

}  // namespace octet::train
