// nn/linear.h: the policy-aware linear layer y = x Wᵀ (+ b): fp32, bf16, or FP8
// GEMMs for forward, dgrad and wgrad under an FP8 recipe (any of them in bf16 where the
// recipe says bf16=..., to attribute a loss gap to one GEMM).
// defines: LinearConfig, QuantizedWeight, Linear
#pragma once

#include <cstdint>
#include <memory>

#include "core/buffer.h"
#include "fp8/quantized_tensor.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "fp8/stats.h"
#include "nn/precision.h"

namespace octet::nn {

struct LinearConfig {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = false;
  int64_t max_tokens = 0;  // the most rows x may have; buffers are sized for it once
  Precision precision = Precision::bf16;
  fp8::Recipe recipe;  // used under Precision::fp8
  Device device;
  // The owner provides the GEMM workspace with use_workspace() instead of the layer
  // allocating its own: a model shares one among all its layers, which run one at a time.
  bool shared_workspace = false;
  // Under fp8, optional: u8 [>= fp8_scratch_bytes()] for the FP8 copies needed only
  // within one call: x's row-major copy (forward's GEMM) and both copies of dY
  // (backward's). A model's layers share one; x's transposed copy and W's stay the layer's.
  Tensor fp8_scratch;
  // Under fp8, optional: the state in which a stateful recipe's operands (x, W, dY) take
  // their slots, owned by the caller, who allocates and updates it (a model shares one
  // so that all scales update in one call). nullptr: the layer keeps a state of its own.
  fp8::DelayedScalingState* scaling_state = nullptr;
  // Under fp8, where the layer quantizes in place (quantizes_in_place(): the CPU, per-tensor
  // scales, every GEMM in FP8): forward writes x's quantized values over x itself and wgrad
  // reads them there (fp8::TransposedCopy::widened_in_place), so that x's widened copy needs no
  // memory of its own and no second stream of stores. The caller then gives up x's values after
  // forward, and keeps its memory as it is until backward (as under bf16). Likewise dy in
  // backward (no need to keep it). Elsewhere ignored.
  bool fp8_x_in_place = false;
  bool fp8_dy_in_place = false;
};

// W's FP8 copies made elsewhere (dist/fp8_weights.h: gathered from every rank's shard):
// data [out, in] in the recipe's weight format with scale_inv on its grid, and the
// transposed copy data_t [in, out] with scale_inv_t on the grid over [in, out]. A layer
// that widens (fp8::TransposedCopy::widened_on_cpu: CPU, per-tensor scales) reads only data
// and scale_inv: the other two may be empty.
struct QuantizedWeight {
  Tensor data, scale_inv, data_t, scale_inv_t;
};

// Bytes of fp8_scratch a layer of this shape needs: max(T in, 2 T out), or max(T in, 3 T out)
// when its dY is widened (`widened`: fp8::QuantizedTensor::widens for the gradient role), whose
// bf16 copy takes two bytes a value.
size_t fp8_scratch_bytes(int64_t max_tokens, int64_t in_features, int64_t out_features,
                         bool widened = false);

// One linear layer. The parameters and their gradients live in the model's
// contiguous buffers (DESIGN.md, Memory): the layer is given views with bind().
// What backward needs is kept from forward: x itself under fp32/bf16 (the caller
// keeps it alive until backward, as the activation arena does), and under fp8 the
// FP8 copies made in forward: x's transposed copy for wgrad and W's transposed copy
// for dgrad, so nothing is quantized twice. On the CPU under per-tensor scales those
// transposed copies are the codes' bf16 widenings, which the CPU's GEMMs read transposed
// (fp8::TransposedCopy::widened_on_cpu): the quantize writes them in its encoding pass, and
// no GEMM widens or transposes codes; asked to (fp8_x_in_place, fp8_dy_in_place), over the
// inputs themselves (fp8::TransposedCopy::widened_in_place).
class Linear {
 public:
  Linear() = default;
  explicit Linear(const LinearConfig& config);

  // weight [out, in] and bias [out] in the working dtype (f32 under fp32, bf16
  // otherwise; under fp8 the weight may also be f32, as it is only quantized); weight_grad [out,
  // in] and bias_grad [out] in f32. Gradients are accumulated into (+=): the optimizer zeroes them.
  void bind(const Tensor& weight, const Tensor& bias, const Tensor& weight_grad,
            const Tensor& bias_grad);

  // y [T, out] = x [T, in] Wᵀ + b, x and y in the working dtype. Under fp8, T must be
  // a multiple of 16 (wgrad's K) and in/out too (forward's and dgrad's K).
  // x_amax (optional, f32[1]): max |x| as x's producer took it, where the layer takes one
  // (takes_amax(): the CPU under per-tensor scales); the quantize then makes no pass for it.
  void forward(const Tensor& x, const Tensor& y, const Tensor& x_amax = Tensor());
  // dx [T, in] = dy W (skipped when dx is empty); weight_grad += dyᵀ x; bias_grad += Σ_t dy.
  // dy_amax: as x_amax, dy's.
  void backward(const Tensor& dy, const Tensor& dx, const Tensor& dy_amax = Tensor());

  // The optimizer changed the weights: the next forward re-quantizes them (under fp8
  // W is quantized once per step, however many micro-batches run).
  void weights_changed() { weight_fresh_ = false; }
  // Under fp8: from now on forward reads W's FP8 copy from w.data and w.scale_inv and dgrad
  // reads w.data_t and w.scale_inv_t; W itself is never quantized by the layer (no second
  // quantization). Whoever gives them rewrites them in place before each forward after the
  // weights changed (under tensor-delayed, also writing the weight's amax into the slot
  // weight_scaling_slot() names). An empty w: back to quantizing the bound W.
  void use_quantized_weight(const QuantizedWeight& w);
  bool uses_quantized_weight() const { return given_weight_; }
  // Under a stateful recipe: W's slot in the delayed-scaling state (-1 otherwise).
  int weight_scaling_slot() const { return qw_.scaling_slot(); }
  // With a scaling state of its own: the per-step update (a no-op for stateless recipes).
  void update_scaling();

  const LinearConfig& config() const { return config_; }
  // Whether a layer on `device` under `recipe` would quantize its x (activation) or dy
  // (gradient) in place when asked to (LinearConfig::fp8_x_in_place, fp8_dy_in_place).
  static bool quantizes_in_place(Device device, const fp8::Recipe& recipe, fp8::Role role);
  // The transposed copy a layer on `device` under `recipe` makes of its x (activation), dy
  // (gradient) or W (weight) when it does not quantize them in place: x's and dy's in x's layout
  // where the FP8 GEMM reads them K-first (QuantizedTensor::copies_by_columns); otherwise, and
  // always for W (whose copy is dgrad's B, read K-major), widened on the CPU under per-tensor
  // scales, else codes. `octet bench gemm --layer` quantizes as a layer does.
  static fp8::TransposedCopy transposed_copy(Device device, const fp8::Recipe& recipe,
                                             fp8::Role role);
  // Whether a layer on `device` under `precision` and `recipe` takes its inputs' amaxes
  // (forward's x_amax, backward's dy_amax): fp8 on the CPU, per-tensor scales.
  static bool takes_amax(Device device, Precision precision, const fp8::Recipe& recipe);
  // Bytes of GEMM workspace the layer's forward and backward need.
  size_t workspace_bytes() const { return workspace_bytes_; }
  // With config.shared_workspace: u8 [>= workspace_bytes()] on the layer's device, kept
  // alive by the caller; the layer's GEMMs use it (and must not run concurrently with
  // another user of it).
  void use_workspace(const Tensor& workspace);
  // Statistics of the last quantization of x, W and dY (synchronises; call when reporting).
  struct Stats {
    fp8::TensorStats x, weight, grad_output;
    fp8::Fp8Stats layer;  // the three accumulated
  };
  Stats stats() const;
  // Whether the FP8 quantizations count saturated and flushed values (on by default;
  // stats() reports the counts of the last counted step).
  void set_counting(bool on);

 private:
  DType dtype() const { return activation_dtype(config_.precision); }
  void check_input(const char* op, const Tensor& t, int64_t cols) const;

  LinearConfig config_;
  Tensor weight_, bias_, weight_grad_, bias_grad_;
  Tensor saved_x_;  // fp32/bf16: the forward input, for wgrad
  int64_t tokens_ = 0;

  // fp8 only
  fp8::QuantizedTensor qx_, qw_, qdy_;
  std::unique_ptr<fp8::DelayedScalingState> own_scaling_state_;
  bool weight_fresh_ = false;
  bool given_weight_ = false;  // qw_'s tensors view a QuantizedWeight given to the layer
  size_t workspace_bytes_ = 0;
  Buffer own_workspace_;
  Tensor workspace_;  // u8; empty when no GEMM needs one
  // fp8 with GEMMs in bf16 (Recipe::bf16_gemms): W's bf16 copy for forward or dgrad, x's
  // for wgrad (made in forward: the caller need not keep x alive under fp8).
  Buffer bf16_storage_;
  Tensor weight_bf16_, x_bf16_;
};

}  // namespace octet::nn
