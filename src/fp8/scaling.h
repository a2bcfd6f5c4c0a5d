// fp8/scaling.h: the delayed-scaling state of a model's FP8 tensors: one amax
// history, scale and scale_inv per tensor, all in one buffer, updated for all of
// them in one kernel call after each step. Operands take their slots themselves
// (QuantizedTensor::use_scaling_state); the owner allocates once, updates and
// checkpoints the whole state without knowing which operand holds which slot.
// defines: DelayedScalingState
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "fp8/recipe.h"

namespace octet::fp8 {

// Transformer Engine's DelayedScaling per tensor: quantization at step t uses the
// scale computed from the amax history after step t-1 (initially 1); each quantize
// writes its amax into the history's current slot; update() reduces every history
// (max over the window, or the most recent), rolls it and computes the next scales.
// Where octet differs from Transformer Engine: a non-finite amax is counted
// (nonfinite_count()) besides keeping the previous scale, so it is reported, never silent.
class DelayedScalingState {
 public:
  DelayedScalingState() = default;
  // An empty state: operands add their slots, then allocate() lays them out once.
  DelayedScalingState(Device device, const DelayedScaling& options);
  // One slot per tensor, allocated; `formats` gives each tensor's FP8 format (its fp8_max).
  DelayedScalingState(Device device, const DelayedScaling& options,
                      const std::vector<DType>& formats);

  // A new slot for a tensor of `format` (e4m3 or e5m2); only before allocate().
  int add_slot(DType format);
  // Allocates and initialises every slot (empty history, scale 1). Nothing to allocate
  // without slots.
  void allocate();
  bool allocated() const { return allocated_; }

  int size() const { return static_cast<int>(formats_.size()); }
  const DelayedScaling& options() const { return options_; }

  Tensor scale(int slot) const;      // f32[1]: the scale quantize uses now
  Tensor scale_inv(int slot) const;  // f32[1]
  Tensor amax_slot(int slot) const;  // f32[1]: where this step's amax goes
  Tensor history() const;            // f32 [N, history_len]
  Tensor nonfinite() const;          // i32[1]: updates that met a non-finite amax
  Tensor scale_all() const;          // f32 [N]: every slot's scale (checkpoints)
  // After scale_all() was written directly (a checkpoint read): scale_inv = 1 / scale.
  void refresh_scale_inv();

  // After each step (each optimizer step, when gradients are accumulated): one call
  // for all tensors.
  void update();

  // Host copies, for tests, checkpoints and statistics (these synchronise).
  std::vector<float> scales_host() const;
  std::vector<float> history_host() const;
  int nonfinite_count() const;
  // Restores a state read back with the two functions above (resume).
  void restore(const std::vector<float>& scales, const std::vector<float>& history);

  // What a checkpoint keeps, by name ("fp8.amax_history", "fp8.scale"); none without slots.
  std::vector<std::pair<std::string, Tensor>> checkpoint_tensors() const;
  // After checkpoint_tensors() were read back in place: derives the rest (scale_inv).
  void checkpoint_loaded() { refresh_scale_inv(); }

 private:
  Tensor whole(Arena::Region region) const;
  Tensor element(Arena::Region region, int slot, int64_t stride) const;
  DelayedScaling options_;
  std::vector<DType> formats_;
  Device device_;
  bool allocated_ = false;
  Arena storage_;
  Arena::Region history_ = -1, scale_ = -1, scale_inv_ = -1, fp8_max_ = -1, nonfinite_ = -1;
};

}  // namespace octet::fp8
