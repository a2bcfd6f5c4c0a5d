// model/llama.cpp: the LLaMA model. forward() and backward() read top to bottom like
// the step diagram of DESIGN.md; everything they touch was allocated in the constructor.
#include "model/llama.h"
#include "model/llama_parts.h"

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace octet::model {

float Llama::forward(const Tensor& inputs, const Tensor& targets, float grad_scale) {
  const Tensor& sum = act_->loss_sum;
  zero_bytes(sum.data, options_.device, 4);
  forward(inputs, targets, grad_scale, sum, 1.0 / static_cast<double>(tokens()));
  float mean = 0.0f;
  copy_bytes(&mean, Device::cpu(), sum.data, options_.device, 4);
  return mean;
}

void Llama::forward(const Tensor& inputs, const Tensor& targets, float grad_scale,
                    const Tensor& loss_sum, double loss_weight) {
  const LlamaConfig& c = config_;
  const int64_t b = options_.batch, s = options_.seq_len, t = tokens();
  OCTET_CHECK(
      loss_sum.dtype == DType::f32 && loss_sum.numel() == 1 && loss_sum.device == options_.device,
      "model", "loss_sum must be f32[1] on ", device_name(options_.device), ", got ",
      loss_sum.str());
  OCTET_CHECK(inputs.dtype == DType::i32 && inputs.numel() == t && targets.dtype == DType::i32 &&
                  targets.numel() == t && inputs.device == options_.device &&
                  targets.device == options_.device,
              "model", "inputs and targets must be i32 [", b, ", ", s, "] on ",
              device_name(options_.device), ", got ", inputs.str(), " and ", targets.str());
  if (fp8_weight_source_ && fp8_weights_stale_) {
    fp8_weight_source_();
    fp8_weights_stale_ = false;
  }
  inputs_ = inputs;
  targets_ = targets;
  grad_scale_ = grad_scale;
  Activations& a = *act_;
  const float eps = static_cast<float>(c.rms_norm_eps), theta = static_cast<float>(c.rope_theta);
  const int64_t hq = c.num_attention_heads, hkv = c.num_key_value_heads, hd = c.head_dim();

  kernels::embedding_forward(inputs, working_view(*embedding_), a.resid[0]);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer& layer = layers_[l];
    Activations::PerLayer& p = a.layer[l];
    const Tensor& x = a.resid[l];
    // attention block
    kernels::rmsnorm_forward(x, layer.ln1, p.ln1, p.rstd1, eps);
    layer.qkv.forward(p.ln1, p.qkv);
    kernels::rope_forward(p.qkv, hq, hkv, hd, s, theta, a.rope_table);
    kernels::attention_forward(p.qkv, p.attn, p.lse, b, s, hq, hkv, hd, a.attn_workspace);
    layer.o.forward(p.attn, p.resid_mid);
    kernels::add(x, p.resid_mid, p.resid_mid);
    // MLP block
    kernels::rmsnorm_forward(p.resid_mid, layer.ln2, p.ln2, p.rstd2, eps);
    layer.gate_up.forward(p.ln2, p.gate_up);
    kernels::swiglu_forward(p.gate_up, p.h, a.h_amax);
    layer.down.forward(p.h, a.resid[l + 1], a.h_amax);
    kernels::add(p.resid_mid, a.resid[l + 1], a.resid[l + 1]);
  }
  kernels::rmsnorm_forward(a.resid[c.num_hidden_layers], working_view(*final_norm_), a.lnf, a.rstdf,
                           eps);
  lm_head_->forward(a.lnf, a.logits);
  // The loss, and (for training) its gradient written over the logits.
  kernels::cross_entropy(a.logits, targets, a.losses, grad_scale != 0.0f ? a.logits : Tensor(),
                         grad_scale);
  kernels::add_scaled_sum(a.losses, loss_sum, loss_weight);
}

void Llama::backward() {
  OCTET_CHECK(grad_scale_ != 0.0f && !inputs_.empty(), "model",
              "backward() needs a forward() with a non-zero grad_scale first");
  const LlamaConfig& c = config_;
  const int64_t b = options_.batch, s = options_.seq_len;
  const int64_t hq = c.num_attention_heads, hkv = c.num_key_value_heads, hd = c.head_dim();
  const float theta = static_cast<float>(c.rope_theta);
  Activations& a = *act_;
  const int64_t nl = c.num_hidden_layers;

  // The logits hold d(loss)/d(logits) since forward().
  lm_head_->backward(a.logits, a.d_normed);
  kernels::rmsnorm_backward(a.d_normed, a.resid[nl], working_view(*final_norm_), a.rstdf, a.d_resid,
                            grad_view(*final_norm_));
  if (backward_hook_) backward_hook_(nl);
  for (int64_t l = nl - 1; l >= 0; --l) {
    Layer& layer = layers_[l];
    Activations::PerLayer& p = a.layer[l];
    // MLP block: resid[l + 1] = resid_mid + down(swiglu(gate_up(norm2(resid_mid))))
    layer.down.backward(a.d_resid, a.d_h);
    kernels::swiglu_backward(a.d_h, p.gate_up, a.d_gate_up, a.d_gate_up_amax);
    layer.gate_up.backward(a.d_gate_up, a.d_normed, a.d_gate_up_amax);
    kernels::rmsnorm_backward(a.d_normed, p.resid_mid, layer.ln2, p.rstd2, a.d_branch,
                              layer.ln2_grad);
    kernels::add(a.d_resid, a.d_branch, a.d_resid);
    // attention block: resid_mid = resid[l] + o(attention(rope(qkv(norm1(resid[l])))))
    layer.o.backward(a.d_resid, a.d_attn);
    kernels::attention_backward(a.d_attn, p.qkv, p.attn, p.lse, a.d_qkv, b, s, hq, hkv, hd,
                                a.attn_workspace);
    kernels::rope_backward(a.d_qkv, hq, hkv, hd, s, theta, a.rope_table);
    layer.qkv.backward(a.d_qkv, a.d_normed);
    kernels::rmsnorm_backward(a.d_normed, a.resid[l], layer.ln1, p.rstd1, a.d_branch,
                              layer.ln1_grad);
    kernels::add(a.d_resid, a.d_branch, a.d_resid);
    if (backward_hook_) backward_hook_(l);
  }
  kernels::embedding_backward(inputs_, a.d_resid, grad_view(*embedding_));
  if (backward_hook_) backward_hook_(-1);
}

Tensor Llama::logits() const {
  return act_->logits;
}

}  // namespace octet::model
