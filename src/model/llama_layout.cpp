// model/llama_layout.cpp: how the LLaMA model is laid out and wired: the parameter
// layout in the contiguous buffers, their views, the linears' construction and binding,
// the activation arena, weight initialisation and the per-step bookkeeping around
// forward() and backward() (llama.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/rope.h"
#include "model/llama.h"
#include "model/llama_parts.h"

namespace octet::model {

namespace {

// Box-Muller on 53-bit uniforms from the integer output of mt19937_64 (the standard
// library's distributions differ between implementations; this does not). The draws are
// sequential; the transform of each pair (a log, a square root and a cosine: two thirds of the
// time) runs on every thread, with the bits of one thread. Measured on the 2-vCPU Zen 4 guest,
// `octet bench step --device cpu --model 1b --layers 2 --batch 1 --seq 16 --steps 1` (219M
// parameters) took 13.6 s before at two threads and 10.6 s after. On a lent H200 a 1B model's
// run needed over a minute before its first step (docs/perf/gpu-h200.md); at about 50 ns a
// value on one core this loop was the largest part of that we can count.
double box_muller(uint64_t a, uint64_t b) {
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// w[i] = std * N(0, 1) for i < n, continuing `rng`'s stream two draws per value; `raw`
// holds the draws of one chunk.
void fill_normal(float* w, int64_t n, double std, std::mt19937_64& rng,
                 std::vector<uint64_t>& raw) {
  const int64_t chunk = static_cast<int64_t>(raw.size() / 2);
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t m = std::min(chunk, n - b);
    for (int64_t i = 0; i < 2 * m; ++i) raw[static_cast<size_t>(i)] = rng();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      w[b + i] = static_cast<float>(std * box_muller(raw[2 * i], raw[2 * i + 1]));
    }
  }
}

std::string layer_name(int64_t l, const char* rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}

}  // namespace

// fp8: the inputs of the block linears that only their forward reads (the norms'
// outputs and SwiGLU's) are shared by all layers (share_inputs): backward reads x's FP8
// transposed copy instead. Under fp32/bf16 each layer keeps them for wgrad, and so it does
// under fp8 where the linears quantize them in place (their copy is then x itself).
Llama::Activations::Activations(const LlamaConfig& c, int64_t batch, int64_t seq, DType dt,
                                bool share_inputs, bool amaxes, Device device)
    : arena(device),
      resid(static_cast<size_t>(c.num_hidden_layers + 1)),
      layer(static_cast<size_t>(c.num_hidden_layers)) {
  const int64_t t = batch * seq, d = c.hidden_size, f = c.intermediate_size, q = c.qkv_size();
  Arena& a = arena;
  const Arena::Region shared_ln = share_inputs ? a.add("shared ln", dt, {t, d}) : -1;
  const Arena::Region shared_h = share_inputs ? a.add("shared h", dt, {t, f}) : -1;
  for (Tensor& r : resid) a.add("resid", dt, {t, d}, &r);
  for (PerLayer& p : layer) {
    if (share_inputs) {
      a.bind(shared_ln, &p.ln1);
      a.bind(shared_ln, &p.ln2);
      a.bind(shared_h, &p.h);
    } else {
      a.add("ln1", dt, {t, d}, &p.ln1);
      a.add("ln2", dt, {t, d}, &p.ln2);
      a.add("h", dt, {t, f}, &p.h);
    }
    a.add("rstd1", DType::f32, {t}, &p.rstd1);
    a.add("qkv", dt, {t, q}, &p.qkv);
    a.add("attn", dt, {t, d}, &p.attn);
    a.add("lse", DType::f32, {batch, c.num_attention_heads, seq}, &p.lse);
    a.add("resid_mid", dt, {t, d}, &p.resid_mid);
    a.add("rstd2", DType::f32, {t}, &p.rstd2);
    a.add("gate_up", dt, {t, 2 * f}, &p.gate_up);
  }
  a.add("lnf", dt, {t, d}, &lnf);
  a.add("rstdf", DType::f32, {t}, &rstdf);
  a.add("logits", dt, {t, c.vocab_size}, &logits);
  a.add("losses", DType::f32, {t}, &losses);
  a.add("d_resid", dt, {t, d}, &d_resid);
  a.add("d_normed", dt, {t, d}, &d_normed);
  a.bind(a.add("d_branch", dt, {t, d}, &d_branch), &d_attn);
  a.add("d_qkv", dt, {t, q}, &d_qkv);
  a.add("d_gate_up", dt, {t, 2 * f}, &d_gate_up);
  a.add("d_h", dt, {t, f}, &d_h);
  const size_t ws = kernels::attention_workspace_bytes(seq, c.head_dim());
  a.add("attention workspace", DType::u8, {static_cast<int64_t>(ws)}, &attn_workspace);
  a.add("loss_sum", DType::f32, {1}, &loss_sum);
  if (amaxes) {
    a.add("h amax", DType::f32, {1}, &h_amax);
    a.add("d_gate_up amax", DType::f32, {1}, &d_gate_up_amax);
  }
  // The CPU's RoPE angles, once (CUDA computes them in its kernel).
  if (device.is_cpu()) a.add("rope table", dt, {seq, c.head_dim()}, &rope_table);
  a.allocate();
  if (device.is_cpu()) {
    kernels::rope_table(rope_table, c.head_dim(), seq, static_cast<float>(c.rope_theta));
  }
}

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
  master_end_ = params_count_;
  grads_ = Buffer::for_tensor(device, DType::f32, {params_count_});
  if (options_.precision == nn::Precision::fp8 && config_.num_hidden_layers > 0) {
    // The block matrices are contiguous: from layer 0's q_proj to the last down_proj.
    const ParamInfo& last =
        param(layer_name(config_.num_hidden_layers - 1, "mlp.down_proj.weight"));
    master_only_begin_ = param(layer_name(0, "self_attn.q_proj.weight")).offset;
    master_only_end_ = last.offset + last.shape.numel();
  }
  if (dt != DType::f32) {
    working_ =
        Buffer::for_tensor(device, dt, {params_count_ - (master_only_end_ - master_only_begin_)});
  }

  // The linears: the four of each block under the policy, the LM head never in FP8.
  const int64_t t = tokens(), d = config_.hidden_size, f = config_.intermediate_size;
  const bool fp8 = options_.precision == nn::Precision::fp8;
  // Under a stateful recipe the block linears' FP8 operands take their slots in one
  // state, so that all scales update in one call.
  scaling_state_ = std::make_unique<fp8::DelayedScalingState>(device, options_.recipe.delayed);
  // Under fp8 the FP8 copies needed only within one call (x's row-major copy, both of
  // dY's) live in one scratch that all the block linears share.
  const int64_t q = config_.qkv_size();
  Tensor fp8_scratch;
  if (fp8) {
    const bool w = fp8::QuantizedTensor::widens(device, options_.recipe, fp8::Role::gradient);
    const size_t bytes =
        std::max({nn::fp8_scratch_bytes(t, d, q, w), nn::fp8_scratch_bytes(t, d, d, w),
                  nn::fp8_scratch_bytes(t, d, 2 * f, w), nn::fp8_scratch_bytes(t, f, d, w)});
    fp8_scratch_ = Buffer(device, bytes);
    fp8_scratch = fp8_scratch_.view(DType::u8, {static_cast<int64_t>(bytes)});
  }
  // Where the block linears quantize in place (the CPU, per-tensor scales), the inputs only
  // they read take their FP8 copies: the norms' outputs and SwiGLU's (x of qkv, gate_up and
  // down, each layer's own then), and the gradients at qkv and gate_up (dy). Not x of o
  // (attention's output, which its backward reads) nor dy of o and down (the residual
  // stream's gradient, which the adds read).
  const bool in_place =
      fp8 && nn::Linear::quantizes_in_place(device, options_.recipe, fp8::Role::activation);
  auto linear = [&](int64_t in, int64_t out, bool x_in_place, bool dy_in_place) {
    return nn::Linear({.in_features = in,
                       .out_features = out,
                       .bias = false,
                       .max_tokens = t,
                       .precision = options_.precision,
                       .recipe = options_.recipe,
                       .device = device,
                       .shared_workspace = true,
                       .fp8_scratch = fp8_scratch,
                       .scaling_state = scaling_state_.get(),
                       .fp8_x_in_place = in_place && x_in_place,
                       .fp8_dy_in_place = in_place && dy_in_place});
  };
  layers_.reserve(config_.num_hidden_layers);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    Layer& layer = layers_.emplace_back();
    layer.qkv = linear(d, q, true, true);
    layer.o = linear(d, d, false, false);
    layer.gate_up = linear(d, 2 * f, true, true);
    layer.down = linear(f, d, true, false);  // the norm weights are bound in bind_linears()
  }
  scaling_state_->allocate();
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

  act_ = std::make_unique<Activations>(
      config_, options_.batch, options_.seq_len, dt, fp8 && !in_place,
      nn::Linear::takes_amax(device, options_.precision, options_.recipe), device);
}

Llama::~Llama() = default;

void Llama::build_layout() {
  const int64_t v = config_.vocab_size, d = config_.hidden_size, f = config_.intermediate_size;
  const int64_t hd = config_.head_dim(), hq = config_.num_attention_heads,
                hkv = config_.num_key_value_heads;
  auto add = [&](std::string name, Shape shape, bool decay) {
    params_.push_back(
        {.name = std::move(name), .shape = shape, .offset = params_count_, .decay = decay});
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
  check_master_whole("master()");
  return master_.tensor(DType::f32, {params_count_});
}
Tensor Llama::grads() const {
  OCTET_CHECK(!grads_placed(), "model",
              "grads(): under ZeRO 2 the gradients live in data parallelism's buckets, not in "
              "one buffer; read them there (dist::DataParallel)");
  return grads_.tensor(DType::f32, {params_count_});
}
DType Llama::working_dtype() const {
  return nn::activation_dtype(options_.precision);
}

Tensor Llama::master_view(const ParamInfo& p) const {
  check_master_whole("master_view()");
  return master_.view(DType::f32, p.shape, static_cast<size_t>(p.offset) * 4);
}
Tensor Llama::grad_view(const ParamInfo& p) const {
  if (grads_placed()) return placed_grad_view(p);
  return grads_.view(DType::f32, p.shape, static_cast<size_t>(p.offset) * 4);
}
Tensor Llama::working_view(const ParamInfo& p) const {
  if (!working_.data()) return master_view(p);
  if (p.offset >= master_only_begin_ && p.offset < master_only_end_) return master_view(p);
  const int64_t at =
      p.offset >= master_only_end_ ? p.offset - (master_only_end_ - master_only_begin_) : p.offset;
  return working_.view(working_dtype(), p.shape, static_cast<size_t>(at) * 2);
}

void Llama::bind_linears() {
  // A fused weight: the rows of `rows` adjacent parameters starting at `first`.
  auto fused = [&](const std::string& first, int64_t rows, bool grad) {
    const ParamInfo& p = param(first);
    const ParamInfo whole{
        .name = p.name, .shape = Shape{rows, p.shape[1]}, .offset = p.offset, .decay = true};
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
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> raw(size_t{2} << 20);
  for (const ParamInfo& p : params_) {
    float* w = host.data() + p.offset;
    if (p.decay) {
      fill_normal(w, p.shape.numel(), std, rng, raw);
    } else {
      std::fill_n(w, p.shape.numel(), 1.0f);
    }
  }
  if (master_whole()) {
    copy_bytes(master_.data(), options_.device, host.data(), Device::cpu(), host.size() * 4);
    sync_working_weights();
    return;
  }
  // A sharded master: the working weights of all parameters from the host values, through
  // a small f32 staging buffer on the device.
  const int64_t chunk = std::min<int64_t>(params_count_, int64_t{1} << 20);
  Buffer staging = Buffer::for_tensor(options_.device, DType::f32, {chunk});
  for (int64_t b = 0; b < params_count_; b += chunk) {
    const int64_t e = std::min(params_count_, b + chunk);
    copy_bytes(staging.data(), options_.device, host.data() + b, Device::cpu(),
               static_cast<size_t>(e - b) * 4);
    master_to_working(static_cast<const float*>(staging.data()), b, e);
  }
  copy_bytes(master_.data(), options_.device, host.data() + master_begin_, Device::cpu(),
             static_cast<size_t>(master_end_ - master_begin_) * 4);
  mark_weights_changed();
}

void Llama::sync_working_weights() {
  if (working_.data()) {
    master_to_working(static_cast<const float*>(master_.data()), master_begin_, master_end_);
  }
  mark_weights_changed();
}

void Llama::master_to_working(const float* m, int64_t first, int64_t end) {
  // m: the master's element `first`. Around the parameters that have no working copy.
  const int64_t gap = master_only_end_ - master_only_begin_;
  const DType dt = working_dtype();
  auto* w = static_cast<uint16_t*>(working_.data());
  const Device d = options_.device;
  auto convert = [&](int64_t b, int64_t e, int64_t to) {
    if (e <= b) return;
    kernels::convert(Tensor(const_cast<float*>(m) + (b - first), DType::f32, {e - b}, d),
                     Tensor(w + to, dt, {e - b}, d));
  };
  convert(first, std::min(end, master_only_begin_), first);
  const int64_t b = std::max(first, master_only_end_);
  convert(b, end, b - gap);
}

// The runs master_to_working() converts: around the parameters that have no working copy.
std::array<Llama::MasterRun, 3> Llama::master_runs() const {
  const int64_t b = master_begin_, e = master_end_;
  const int64_t gap = master_only_end_ - master_only_begin_;
  const int64_t mid_begin = std::clamp(master_only_begin_, b, e);
  const int64_t mid_end = std::clamp(master_only_end_, b, e);
  auto run = [&](int64_t first, int64_t end, int64_t to) {
    MasterRun r{first, end, Tensor()};
    if (to >= 0 && working_.data() && end > first) {
      r.working = Tensor(static_cast<uint16_t*>(working_.data()) + to, working_dtype(),
                         {end - first}, options_.device);
    }
    return r;
  };
  return {run(b, mid_begin, b), run(mid_begin, mid_end, -1), run(mid_end, e, mid_end - gap)};
}

void Llama::mark_weights_changed() {
  fp8_weights_stale_ = true;
  for (Layer& layer : layers_) {
    layer.qkv.weights_changed();
    layer.o.weights_changed();
    layer.gate_up.weights_changed();
    layer.down.weights_changed();
  }
  lm_head_->weights_changed();
}

void Llama::zero_grads() {
  for (const GradRange& r : grad_ranges_) zero_bytes(r.at.data, r.at.device, r.at.nbytes());
  if (grads_.data()) zero_bytes(grads_.data(), options_.device, grads_.bytes());
}

void Llama::update_scaling() {
  scaling_state_->update();
}

std::vector<std::pair<std::string, Tensor>> Llama::scaling_state_tensors() const {
  return scaling_state_->checkpoint_tensors();
}

void Llama::scaling_state_loaded() {
  if (scaling_state_->size() > 0) scaling_state_->checkpoint_loaded();
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
