// model/llama.cpp: the LLaMA model. forward() and backward() read top to bottom like
// the step diagram of DESIGN.md; everything they touch was allocated in the constructor.
#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace octet::model {

// The four linears of a transformer block, and its norm weights with their gradients.
struct Llama::Layer {
  nn::Linear qkv, o, gate_up, down;
  Tensor ln1, ln1_grad, ln2, ln2_grad;
};

// Carves tensors out of one buffer: a first pass with no buffer measures, the second
// hands out views (64-byte aligned).
class Arena {
 public:
  explicit Arena(const Buffer* buffer, Device device) : buffer_(buffer), device_(device) {}
  Tensor take(DType dtype, Shape shape) {
    offset_ = (offset_ + 63) / 64 * 64;
    const size_t at = offset_;
    offset_ += static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    return buffer_ ? buffer_->view(dtype, shape, at) : Tensor(nullptr, dtype, shape, device_);
  }
  size_t bytes() const { return offset_ + 64; }

 private:
  const Buffer* buffer_;
  Device device_;
  size_t offset_ = 0;
};

// Everything the step keeps between forward and backward, and the backward scratch.
struct Llama::Activations {
  struct PerLayer {
    Tensor ln1, rstd1, qkv, attn, lse, resid_mid, ln2, rstd2, gate_up, h;
  };
  Buffer buffer;
  std::vector<Tensor> resid;  // L + 1 residual streams [T, D]
  std::vector<PerLayer> layer;
  Tensor lnf, rstdf, logits, losses;
  Tensor d_resid, d_a, d_b, d_qkv, d_gate_up, d_h;
  Tensor attn_workspace;
  Tensor loss_sum;  // f32[1]: what the loss-returning forward() reads back

  // fp8: the inputs of the block linears that only their forward reads (the norms'
  // outputs and SwiGLU's) are shared by all layers: backward reads x's FP8 transposed
  // copy instead. Under fp32/bf16 each layer keeps them for wgrad.
  void carve(Arena& a, const LlamaConfig& c, int64_t batch, int64_t seq, DType dt, bool fp8) {
    const int64_t t = batch * seq, d = c.hidden_size, f = c.intermediate_size, q = c.qkv_size();
    resid.clear();
    layer.clear();
    Tensor shared_ln, shared_h;
    if (fp8) shared_ln = a.take(dt, {t, d}), shared_h = a.take(dt, {t, f});
    for (int64_t l = 0; l <= c.num_hidden_layers; ++l) resid.push_back(a.take(dt, {t, d}));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      PerLayer p;
      p.ln1 = fp8 ? shared_ln : a.take(dt, {t, d});
      p.rstd1 = a.take(DType::f32, {t});
      p.qkv = a.take(dt, {t, q});
      p.attn = a.take(dt, {t, d});
      p.lse = a.take(DType::f32, {batch, c.num_attention_heads, seq});
      p.resid_mid = a.take(dt, {t, d});
      p.ln2 = fp8 ? shared_ln : a.take(dt, {t, d});
      p.rstd2 = a.take(DType::f32, {t});
      p.gate_up = a.take(dt, {t, 2 * f});
      p.h = fp8 ? shared_h : a.take(dt, {t, f});
      layer.push_back(p);
    }
    lnf = a.take(dt, {t, d});
    rstdf = a.take(DType::f32, {t});
    logits = a.take(dt, {t, c.vocab_size});
    losses = a.take(DType::f32, {t});
    d_resid = a.take(dt, {t, d});
    d_a = a.take(dt, {t, d});
    d_b = a.take(dt, {t, d});
    d_qkv = a.take(dt, {t, q});
    d_gate_up = a.take(dt, {t, 2 * f});
    d_h = a.take(dt, {t, f});
    const size_t ws = kernels::attention_workspace_bytes(seq, c.head_dim());
    attn_workspace = a.take(DType::u8, {static_cast<int64_t>(ws)});
    loss_sum = a.take(DType::f32, {1});
  }
};

namespace {

// Box-Muller on 53-bit uniforms from the integer output of mt19937_64 (the standard
// library's distributions differ between implementations; this does not).
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  double next() {
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1p-53;
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::mt19937_64 rng_;
};

std::string layer_name(int64_t l, const char* rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}

}  // namespace

Llama::Llama(const LlamaConfig& config, const ModelOptions& options)
    : config_(config), options_(options) {
  config_.validate("model");
  if (options_.seq_len == 0) options_.seq_len = config_.max_position_embeddings;
  OCTET_CHECK(options_.batch > 0 && options_.seq_len > 0, "model",
              "batch and seq_len must be positive, got ", options_.batch, " and ",
              options_.seq_len);
  OCTET_CHECK(options_.seq_len <= config_.max_position_embeddings, "model", "seq_len ",
              options_.seq_len, " exceeds max_position_embeddings ",
              config_.max_position_embeddings);
  build_layout();
  embedding_ = &param("model.embed_tokens.weight");
  final_norm_ = &param("model.norm.weight");
  const Device device = options_.device;
  const DType dt = nn::activation_dtype(options_.precision);
  master_ = Buffer::for_tensor(device, DType::f32, {params_count_});
  grads_ = Buffer::for_tensor(device, DType::f32, {params_count_});
  if (options_.precision == nn::Precision::fp8 && config_.num_hidden_layers > 0) {
    // The block matrices are contiguous: from layer 0's q_proj to the last down_proj.
    const ParamInfo& last =
        param(layer_name(config_.num_hidden_layers - 1, "mlp.down_proj.weight"));
    no_working_begin_ = param(layer_name(0, "self_attn.q_proj.weight")).offset;
    no_working_end_ = last.offset + last.shape.numel();
  }
  if (dt != DType::f32) {
    working_ =
        Buffer::for_tensor(device, dt, {params_count_ - (no_working_end_ - no_working_begin_)});
  }

  // The linears: the four of each block under the policy, the LM head never in FP8.
  const int64_t t = tokens(), d = config_.hidden_size, f = config_.intermediate_size;
  const bool fp8 = options_.precision == nn::Precision::fp8;
  if (fp8 && options_.recipe.mode == fp8::ScalingMode::tensor_delayed) {
    std::vector<DType> formats;
    for (int64_t i = 0; i < 4 * config_.num_hidden_layers; ++i) {
      formats.push_back(options_.recipe.format(fp8::Role::activation));
      formats.push_back(options_.recipe.format(fp8::Role::weight));
      formats.push_back(options_.recipe.format(fp8::Role::gradient));
    }
    delayed_ = std::make_unique<fp8::DelayedScalingState>(device, options_.recipe.delayed, formats);
  }
  // Under fp8 the FP8 copies needed only within one call (x's row-major copy, both of
  // dY's) live in one scratch that all the block linears share.
  const int64_t q = config_.qkv_size();
  Tensor fp8_scratch;
  if (fp8) {
    const size_t bytes =
        std::max({nn::fp8_scratch_bytes(t, d, q), nn::fp8_scratch_bytes(t, d, d),
                  nn::fp8_scratch_bytes(t, d, 2 * f), nn::fp8_scratch_bytes(t, f, d)});
    fp8_scratch_ = Buffer(device, bytes);
    fp8_scratch = fp8_scratch_.view(DType::u8, {static_cast<int64_t>(bytes)});
  }
  auto linear = [&](int64_t in, int64_t out, int slot) {
    nn::LinearConfig lc{in,     out,  false,      t, options_.precision, options_.recipe,
                        device, true, fp8_scratch};
    return nn::Linear(lc, delayed_.get(), slot);
  };
  layers_.reserve(config_.num_hidden_layers);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const int base = static_cast<int>(12 * l);
    Layer& layer = layers_.emplace_back();
    layer.qkv = linear(d, q, base);
    layer.o = linear(d, d, base + 3);
    layer.gate_up = linear(d, 2 * f, base + 6);
    layer.down = linear(f, d, base + 9);  // the norm weights are bound in bind_linears()
  }
  nn::LinearConfig head;  // the LM head stays in bf16 under fp8 (DESIGN.md)
  head.in_features = d;
  head.out_features = config_.vocab_size;
  head.max_tokens = t;
  head.precision = fp8 ? nn::Precision::bf16 : options_.precision;
  head.device = device;
  head.shared_workspace = true;
  lm_head_ = std::make_unique<nn::Linear>(head);
  // The linears run one at a time on one stream: one GEMM workspace serves them all.
  size_t workspace_bytes = lm_head_->workspace_bytes();
  for (Layer& layer : layers_) {
    for (nn::Linear* lin : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down})
      workspace_bytes = std::max(workspace_bytes, lin->workspace_bytes());
  }
  gemm_workspace_ = Buffer(device, workspace_bytes);
  const Tensor workspace = gemm_workspace_.view(DType::u8, {static_cast<int64_t>(workspace_bytes)});
  lm_head_->use_workspace(workspace);
  for (Layer& layer : layers_) {
    for (nn::Linear* lin : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down})
      lin->use_workspace(workspace);
  }
  bind_linears();

  act_ = std::make_unique<Activations>();
  Arena measure(nullptr, device);
  act_->carve(measure, config_, options_.batch, options_.seq_len, dt, fp8);
  act_->buffer = Buffer(device, measure.bytes());
  Arena arena(&act_->buffer, device);
  act_->carve(arena, config_, options_.batch, options_.seq_len, dt, fp8);
}

Llama::~Llama() = default;

void Llama::build_layout() {
  const int64_t v = config_.vocab_size, d = config_.hidden_size, f = config_.intermediate_size;
  const int64_t hd = config_.head_dim(), hq = config_.num_attention_heads,
                hkv = config_.num_key_value_heads;
  auto add = [&](std::string name, Shape shape, bool decay) {
    params_.push_back({std::move(name), shape, params_count_, decay});
    params_count_ += shape.numel();
  };
  add("model.embed_tokens.weight", {v, d}, true);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    // q, k and v rows are adjacent: together they are the fused qkv weight; so are gate and up.
    add(layer_name(l, "self_attn.q_proj.weight"), {hq * hd, d}, true);
    add(layer_name(l, "self_attn.k_proj.weight"), {hkv * hd, d}, true);
    add(layer_name(l, "self_attn.v_proj.weight"), {hkv * hd, d}, true);
    add(layer_name(l, "self_attn.o_proj.weight"), {d, hq * hd}, true);
    add(layer_name(l, "mlp.gate_proj.weight"), {f, d}, true);
    add(layer_name(l, "mlp.up_proj.weight"), {f, d}, true);
    add(layer_name(l, "mlp.down_proj.weight"), {d, f}, true);
  }
  if (!config_.tie_word_embeddings) add("lm_head.weight", {v, d}, true);
  decayed_count_ = params_count_;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    add(layer_name(l, "input_layernorm.weight"), {d}, false);
    add(layer_name(l, "post_attention_layernorm.weight"), {d}, false);
  }
  add("model.norm.weight", {d}, false);
}

const ParamInfo& Llama::param(const std::string& name) const {
  for (const ParamInfo& p : params_) {
    if (p.name == name) return p;
  }
  OCTET_FAIL("model", "no parameter named '", name, "'");
}

Tensor Llama::master() const {
  return master_.tensor(DType::f32, {params_count_});
}
Tensor Llama::grads() const {
  return grads_.tensor(DType::f32, {params_count_});
}
DType Llama::working_dtype() const {
  return nn::activation_dtype(options_.precision);
}

Tensor Llama::master_view(const ParamInfo& p) const {
  return master_.view(DType::f32, p.shape, static_cast<size_t>(p.offset) * 4);
}
Tensor Llama::grad_view(const ParamInfo& p) const {
  return grads_.view(DType::f32, p.shape, static_cast<size_t>(p.offset) * 4);
}
Tensor Llama::working_view(const ParamInfo& p) const {
  if (!working_.data()) return master_view(p);
  if (p.offset >= no_working_begin_ && p.offset < no_working_end_) return master_view(p);
  const int64_t at =
      p.offset >= no_working_end_ ? p.offset - (no_working_end_ - no_working_begin_) : p.offset;
  return working_.view(working_dtype(), p.shape, static_cast<size_t>(at) * 2);
}

void Llama::bind_linears() {
  // A fused weight: the rows of `rows` adjacent parameters starting at `first`.
  auto fused = [&](const std::string& first, int64_t rows, bool grad) {
    const ParamInfo& p = param(first);
    const ParamInfo whole{p.name, Shape{rows, p.shape[1]}, p.offset, true};
    return grad ? grad_view(whole) : working_view(whole);
  };
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    Layer& layer = layers_[l];
    const std::string q = layer_name(l, "self_attn.q_proj.weight");
    const std::string gate = layer_name(l, "mlp.gate_proj.weight");
    const int64_t qkv_rows = config_.qkv_size(), gate_up_rows = 2 * config_.intermediate_size;
    layer.qkv.bind(fused(q, qkv_rows, false), {}, fused(q, qkv_rows, true), {});
    const ParamInfo& o = param(layer_name(l, "self_attn.o_proj.weight"));
    layer.o.bind(working_view(o), {}, grad_view(o), {});
    layer.gate_up.bind(fused(gate, gate_up_rows, false), {}, fused(gate, gate_up_rows, true), {});
    const ParamInfo& down = param(layer_name(l, "mlp.down_proj.weight"));
    layer.down.bind(working_view(down), {}, grad_view(down), {});
    const ParamInfo& ln1 = param(layer_name(l, "input_layernorm.weight"));
    const ParamInfo& ln2 = param(layer_name(l, "post_attention_layernorm.weight"));
    layer.ln1 = working_view(ln1);
    layer.ln1_grad = grad_view(ln1);
    layer.ln2 = working_view(ln2);
    layer.ln2_grad = grad_view(ln2);
  }
  const ParamInfo& head =
      param(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  lm_head_->bind(working_view(head), {}, grad_view(head), {});
}

void Llama::init_weights(uint64_t seed, double std) {
  std::vector<float> host(static_cast<size_t>(params_count_));
  Normal normal(seed);
  for (const ParamInfo& p : params_) {
    float* w = host.data() + p.offset;
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      w[i] = p.decay ? static_cast<float>(std * normal.next()) : 1.0f;
    }
  }
  copy_bytes(master_.data(), options_.device, host.data(), Device::cpu(), host.size() * 4);
  sync_working_weights();
}

void Llama::sync_working_weights() {
  if (working_.data()) {
    // master -> working around the parameters that have no working copy.
    const int64_t gap = no_working_end_ - no_working_begin_;
    const DType dt = working_dtype();
    auto* m = static_cast<float*>(master_.data());
    auto* w = static_cast<uint16_t*>(working_.data());
    const Device d = options_.device;
    if (no_working_begin_ > 0) {
      kernels::convert(Tensor(m, DType::f32, {no_working_begin_}, d),
                       Tensor(w, dt, {no_working_begin_}, d));
    }
    const int64_t rest = params_count_ - no_working_end_;
    if (rest > 0) {
      kernels::convert(Tensor(m + no_working_end_, DType::f32, {rest}, d),
                       Tensor(w + no_working_end_ - gap, dt, {rest}, d));
    }
  }
  for (Layer& layer : layers_) {
    layer.qkv.weights_changed();
    layer.o.weights_changed();
    layer.gate_up.weights_changed();
    layer.down.weights_changed();
  }
  lm_head_->weights_changed();
}

void Llama::zero_grads() {
  zero_bytes(grads_.data(), options_.device, grads_.bytes());
}

Tensor Llama::logits() const {
  return act_->logits;
}

void Llama::update_scaling() {
  if (delayed_) delayed_->update();
}

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
    kernels::rope_forward(p.qkv, hq, hkv, hd, s, theta);
    kernels::attention_forward(p.qkv, p.attn, p.lse, b, s, hq, hkv, hd, a.attn_workspace);
    layer.o.forward(p.attn, p.resid_mid);
    kernels::add(x, p.resid_mid, p.resid_mid);
    // MLP block
    kernels::rmsnorm_forward(p.resid_mid, layer.ln2, p.ln2, p.rstd2, eps);
    layer.gate_up.forward(p.ln2, p.gate_up);
    kernels::swiglu_forward(p.gate_up, p.h);
    layer.down.forward(p.h, a.resid[l + 1]);
    kernels::add(p.resid_mid, a.resid[l + 1], a.resid[l + 1]);
  }
  kernels::rmsnorm_forward(a.resid[c.num_hidden_layers], working_view(*final_norm_), a.lnf, a.rstdf,
                           eps);
  lm_head_->forward(a.lnf, a.logits);
  // The loss, and (for training) its gradient written over the logits.
  kernels::cross_entropy(a.logits, targets, a.losses, grad_scale != 0.0f ? a.logits : Tensor(),
                         grad_scale);
  kernels::accumulate_sum(a.losses, loss_sum, loss_weight);
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
  lm_head_->backward(a.logits, a.d_a);
  kernels::rmsnorm_backward(a.d_a, a.resid[nl], working_view(*final_norm_), a.rstdf, a.d_resid,
                            grad_view(*final_norm_));
  for (int64_t l = nl - 1; l >= 0; --l) {
    Layer& layer = layers_[l];
    Activations::PerLayer& p = a.layer[l];
    // MLP block: resid[l + 1] = resid_mid + down(swiglu(gate_up(norm2(resid_mid))))
    layer.down.backward(a.d_resid, a.d_h);
    kernels::swiglu_backward(a.d_h, p.gate_up, a.d_gate_up);
    layer.gate_up.backward(a.d_gate_up, a.d_a);
    kernels::rmsnorm_backward(a.d_a, p.resid_mid, layer.ln2, p.rstd2, a.d_b, layer.ln2_grad);
    kernels::add(a.d_resid, a.d_b, a.d_resid);
    // attention block: resid_mid = resid[l] + o(attention(rope(qkv(norm1(resid[l])))))
    layer.o.backward(a.d_resid, a.d_a);
    kernels::attention_backward(a.d_a, p.qkv, p.attn, p.lse, a.d_qkv, b, s, hq, hkv, hd,
                                a.attn_workspace);
    kernels::rope_backward(a.d_qkv, hq, hkv, hd, s, theta);
    layer.qkv.backward(a.d_qkv, a.d_b);
    kernels::rmsnorm_backward(a.d_b, a.resid[l], layer.ln1, p.rstd1, a.d_a, layer.ln1_grad);
    kernels::add(a.d_resid, a.d_a, a.d_resid);
  }
  kernels::embedding_backward(inputs_, a.d_resid, grad_view(*embedding_));
}

void Llama::set_fp8_counting(bool on) {
  for (Layer& layer : layers_) {
    for (nn::Linear* lin : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down})
      lin->set_counting(on);
  }
}

std::vector<std::pair<std::string, nn::Linear::Stats>> Llama::fp8_stats() const {
  std::vector<std::pair<std::string, nn::Linear::Stats>> out;
  if (options_.precision != nn::Precision::fp8) return out;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    out.emplace_back(prefix + "qkv", layers_[l].qkv.stats());
    out.emplace_back(prefix + "o", layers_[l].o.stats());
    out.emplace_back(prefix + "gate_up", layers_[l].gate_up.stats());
    out.emplace_back(prefix + "down", layers_[l].down.stats());
  }
  return out;
}

}  // namespace octet::model
