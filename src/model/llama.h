// model/llama.h: a LLaMA-style decoder (token embedding, L x [RMSNorm, attention with
// RoPE and grouped-query heads, RMSNorm, SwiGLU MLP] with residuals, final RMSNorm,
// LM head) with explicit forward and backward, under one precision policy.
// defines: ModelOptions, ParamInfo, BlockWeight, Llama
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "fp8/scaling.h"
#include "model/config.h"
#include "nn/linear.h"
#include "nn/precision.h"

namespace octet::model {

struct ModelOptions {
  nn::Precision precision = nn::Precision::bf16;
  fp8::Recipe recipe;   // under fp8: the recipe of every transformer-block linear
  int64_t batch = 1;    // sequences per micro-batch; buffers are sized for it once
  int64_t seq_len = 0;  // 0: the config's max_position_embeddings
  Device device;
};

// One parameter: its Hugging Face name, shape and place in the contiguous buffers.
struct ParamInfo {
  std::string name;
  Shape shape;
  int64_t offset;  // in elements
  bool decay;      // AdamW weight decay applies (matrices), or not (norm weights)
};

// One transformer-block linear's weight in the parameter buffers: the fused qkv (q, k and
// v rows adjacent) and gate_up (gate, up) count as one weight each.
struct BlockWeight {
  int64_t offset;      // of its first element, in elements
  int64_t rows, cols;  // [out, in]
  nn::Linear* linear;
};

// Parameters, gradients and activations each live in one buffer (DESIGN.md, Memory):
//   master  f32 [P]  the parameters the optimizer updates (under ZeRO 1 only one shard
//                    of them: shard_master())
//   working          what the step computes with: the master itself under fp32, a bf16
//                    copy under bf16 (sync_working_weights() refreshes it); under fp8 a
//                    bf16 copy of all but the block linears' matrices, which are
//                    quantized to FP8 straight from the master once per step
//   grads   f32 [P]  accumulated by backward(), zeroed by zero_grads()
// Parameters are laid out matrices first, then the norm weights, so AdamW's decayed
// and undecayed parameters are two contiguous ranges.
class Llama {
 public:
  Llama(const LlamaConfig& config, const ModelOptions& options);
  ~Llama();
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const LlamaConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  int64_t tokens() const { return options_.batch * options_.seq_len; }  // T per micro-batch
  int64_t parameter_count() const { return params_count_; }
  int64_t decayed_count() const { return decayed_count_; }  // the first decayed_count() are decayed
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& param(const std::string& name) const;

  Tensor master() const;  // f32 [P]; only while the master is whole
  Tensor grads() const;
  Tensor master_view(const ParamInfo& p) const;  // f32, p's shape; only while whole
  Tensor grad_view(const ParamInfo& p) const;

  // ZeRO 1 (dist::DataParallel): the master keeps only parameters [begin, end), f32
  // [end - begin] (the values it held there are kept); the working weights stay whole, and
  // whoever shards gathers them after each update. Under fp8 the block linears then get a
  // bf16 working copy too, since nothing can quantize them from a whole master. Under fp32
  // the master is the working weights: it stays whole. shard_master(0, P) makes it whole
  // again, the values outside the old shard to be filled by the caller (a gather). Allocates.
  void shard_master(int64_t begin, int64_t end);
  bool master_whole() const { return master_begin_ == 0 && master_end_ == params_count_; }
  int64_t master_begin() const { return master_begin_; }
  int64_t master_end() const { return master_end_; }
  Tensor master_shard() const;  // f32 [master_end() - master_begin()]
  size_t master_bytes() const { return master_.bytes(); }
  // ZeRO 2 (dist::DataParallel): the gradients of parameters [begin, end) live in `at` (f32
  // [end - begin], the caller's memory) instead of the model's own gradient buffer. The ranges
  // cover every parameter, each whole; that buffer is freed (grads() is then unavailable) and
  // the linears rebound. Ranges may share memory (buckets used in turn): whoever places them
  // zeroes each before the backward writes it; zero_grads() zeroes them all. Allocates.
  struct GradRange {
    int64_t begin, end;
    Tensor at;
  };
  void place_grads(std::vector<GradRange> ranges);
  bool grads_placed() const { return !grad_ranges_.empty(); }
  size_t grad_bytes() const { return grads_.bytes(); }  // the model's own gradient buffer
  // All the working weights in parameter order (the master under fp32, the bf16 copy
  // otherwise): what is gathered after a sharded update. Not under fp8 before shard_master.
  Tensor working() const;

  // Hugging Face's LlamaForCausalLM initialisation: matrices ~ N(0, 0.02²), norm
  // weights 1; deterministic from the seed. Also syncs the working weights.
  void init_weights(uint64_t seed, double std = 0.02);
  // master -> working (bf16, round to nearest even) after every optimizer step; marks the
  // FP8 weight copies stale so the next forward re-quantizes them once. With a sharded
  // master only its shard's working weights are written.
  void sync_working_weights();
  // The master's parameters [master_begin(), master_end()) in three consecutive runs (some
  // empty: first == end), each with the bf16 working copy of its parameters (bf16 [end -
  // first]) or, where they have none (fp32; under fp8 the block matrices of a whole master),
  // an empty tensor: an optimizer that writes the working copy in its own pass over the
  // master (kernels::adamw_step's `working`) instead of sync_working_weights() calls
  // working_weights_written() after.
  struct MasterRun {
    int64_t first, end;
    Tensor working;
  };
  std::array<MasterRun, 3> master_runs() const;
  void working_weights_written() { mark_weights_changed(); }
  void zero_grads();

  // The forward pass of one micro-batch: inputs and targets i32 [batch, seq_len] on the
  // model's device. Adds loss_weight * (sum of the token losses) to loss_sum (f32[1] on
  // the model's device) without reading anything back, so a step on a GPU never waits
  // for it. With grad_scale != 0 it also prepares backward(): the loss gradient is
  // grad_scale * d(sum of token losses) (1 / (T * accumulation steps) for a mean).
  void forward(const Tensor& inputs, const Tensor& targets, float grad_scale,
               const Tensor& loss_sum, double loss_weight);
  // The same, returning the mean cross-entropy loss (nats per token): reads it back,
  // which waits for the device.
  float forward(const Tensor& inputs, const Tensor& targets, float grad_scale);
  // Accumulates d(loss)/d(parameters) into grads() for the last forward.
  void backward();
  // Called by backward() as the gradients of parameters become final: with L (the layer
  // count) after the LM head's and the final norm's backward (the LM head's matrix is final
  // unless tied to the embedding), with l after layer l's backward (its four linears'
  // matrices and its two norm weights; l = L-1 down to 0), then with -1 at the end (the
  // embedding). Data parallelism starts reducing a bucket there (ZeRO 2). Empty: nothing
  // is called.
  void set_backward_hook(std::function<void(int64_t layer)> hook) {
    backward_hook_ = std::move(hook);
  }
  // Under fp8: the block linears' weights in parameter order (layer 0's qkv, o, gate_up,
  // down, then layer 1's, ...), contiguous; empty otherwise.
  std::vector<BlockWeight> block_weights();
  // Under fp8: when the weights changed since it last ran (sync_working_weights(),
  // init_weights(), ...), forward() first calls `fill`, which gives the block linears their
  // FP8 weights (nn::Linear::use_quantized_weight): data parallelism's FP8 all-gather of
  // them (dist/fp8_weights.h), run where every rank runs forward. Empty: nothing is called.
  void set_fp8_weight_source(std::function<void()> fill) {
    fp8_weight_source_ = std::move(fill);
    fp8_weights_stale_ = true;
  }
  // The logits of the last forward ([T, vocab], working dtype; f32 under fp32).
  Tensor logits() const;

  // Under fp8 with a stateful recipe: the per-step scaling update of all the model's FP8
  // tensors in one call. A no-op otherwise.
  void update_scaling();
  // The scaling state a checkpoint keeps, by name (none under a stateless recipe), and
  // the call after they were read back in place.
  std::vector<std::pair<std::string, Tensor>> scaling_state_tensors() const;
  void scaling_state_loaded();
  // FP8 statistics of each transformer-block linear, by name ("layers.0.qkv", ...).
  std::vector<std::pair<std::string, nn::Linear::Stats>> fp8_stats() const;
  // Whether the FP8 quantizations count saturated and flushed values (nn::Linear).
  void set_fp8_counting(bool on);

 private:
  struct Layer;
  struct Activations;
  // p's working copy (bf16), or its master (f32) where it has none.
  Tensor working_view(const ParamInfo& p) const;
  DType working_dtype() const;
  Tensor placed_grad_view(const ParamInfo& p) const;  // place_grads()' memory
  void build_layout();
  void bind_linears();
  void check_master_whole(const char* what) const;
  // The master's elements [first, end), m pointing at element first, into the working copy.
  void master_to_working(const float* m, int64_t first, int64_t end);
  void mark_weights_changed();  // the FP8 weight copies are stale

  LlamaConfig config_;
  ModelOptions options_;
  std::vector<ParamInfo> params_;
  int64_t params_count_ = 0, decayed_count_ = 0;
  // Parameters [master_only_begin_, master_only_end_) have no working copy (fp8: the block
  // linears' matrices); working offsets above the range move down by its length.
  int64_t master_only_begin_ = 0, master_only_end_ = 0;
  // The parameters master_ holds (all but under ZeRO 1).
  int64_t master_begin_ = 0, master_end_ = 0;
  Buffer master_, working_, grads_, gemm_workspace_, fp8_scratch_;
  std::unique_ptr<fp8::DelayedScalingState> scaling_state_;
  std::vector<Layer> layers_;
  std::unique_ptr<nn::Linear> lm_head_;
  std::unique_ptr<Activations> act_;
  const ParamInfo* embedding_ = nullptr;   // model.embed_tokens.weight
  const ParamInfo* final_norm_ = nullptr;  // model.norm.weight
  Tensor inputs_, targets_;
  float grad_scale_ = 0.0f;
  std::function<void(int64_t)> backward_hook_;
  std::vector<GradRange> grad_ranges_;  // place_grads(), by begin
  std::function<void()> fp8_weight_source_;
  bool fp8_weights_stale_ = true;
};

}  // namespace octet::model
