// train/memory_check.h: whether a run fits before anything is allocated: a lower bound of
// the bytes it needs (parameters, gradients, AdamW moments, working weights and the
// largest activations) against what the device has left, refused with both numbers.
// defines: MemoryEstimate, estimate_run_memory, check_run_fits
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "model/config.h"
#include "nn/precision.h"

namespace octet::train {

struct MemoryEstimate {
  double parameters = 0;        // P (double: a config may ask for more than int64 holds)
  double parameter_bytes = 0;   // master, gradients and AdamW m, v (f32) and the working copy
  double activation_bytes = 0;  // logits and the per-layer QKV and MLP activations
  double total() const { return parameter_bytes + activation_bytes; }
  std::string str() const;  // "1.2 GiB (P parameters x 18 bytes + 0.3 GiB of activations)"
};

// A lower bound: what the model's buffers need for one micro-batch of batch x seq_len.
MemoryEstimate estimate_run_memory(const model::LlamaConfig& config, nn::Precision precision,
                                   int64_t batch, int64_t seq_len);

// Throws naming both numbers when the estimate exceeds what `device` has available; does
// nothing where the device cannot say (the emulated CUDA device).
void check_run_fits(const MemoryEstimate& estimate, Device device);

}  // namespace octet::train
