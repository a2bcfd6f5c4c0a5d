// train/optimizer.h: the update that ends a training step: the gradients' global norm,
// clipping, AdamW over the model's two parameter ranges (decayed matrices, undecayed
// norm weights), the working-weight sync and the FP8 scaling update.
// defines: Optimizer, finite_step_or_undo
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "model/llama.h"
#include "train/config.h"

namespace octet::train {

// AdamW on the model's fp32 master weights, with its moments m and v (f32 [P], zero at
// the start) in buffers of its own. Nothing is read back: clipping reads the norm on
// the device.
// Reads the step's loss and gradient sum of squares (f32[1] each, on the model's device) back
// (8 bytes; a wait on a GPU). When either is not finite, clears the amax the step's
// quantizations wrote into the delayed-scaling histories, so that the FP8 scaling state is as
// before the step, and returns false: the caller skips the update.
bool finite_step_or_undo(model::Llama& model, const Tensor& loss, const Tensor& grad_sum_sq);

class Optimizer {
 public:
  // Takes beta1, beta2, eps, weight_decay and grad_clip from `config`.
  Optimizer(model::Llama& model, const TrainConfig& config);

  // Optimizer step `step` (1 for the first) at learning rate `lr` over the gradients the
  // model accumulated: writes their sum of squares into grad_sum_sq (f32[1] on the
  // model's device), clips them to config.grad_clip, updates the master weights, syncs
  // the working weights and updates the FP8 scaling state.
  // With `loss` (f32[1] on the device, the step's loss) given, the step first reads the
  // loss and the sum of squares back (8 bytes; a wait on a GPU) and, when either is not
  // finite, changes nothing (weights, moments, FP8 scaling state) and returns false.
  bool step(int64_t step, double lr, const Tensor& grad_sum_sq, const Tensor& loss = Tensor());

  // The moments, f32 [P] (checkpoints write and read them in place).
  Tensor m() const;
  Tensor v() const;

 private:
  model::Llama& model_;
  TrainConfig config_;
  Buffer m_, v_;
};

}  // namespace octet::train
