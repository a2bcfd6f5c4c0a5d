// model/llama_parts.h: the parts of the LLaMA model that forward()/backward() (llama.cpp)
// and its layout and binding (llama_layout.cpp) share: a transformer block's linears and
// norm weights, and the activations kept between forward and backward.
// defines: Llama::Layer, Llama::Activations
#pragma once

#include <vector>

#include "core/arena.h"
#include "model/llama.h"

namespace octet::model {

// The four linears of a transformer block, and its norm weights with their gradients.
struct Llama::Layer {
  nn::Linear qkv, o, gate_up, down;
  Tensor ln1, ln1_grad, ln2, ln2_grad;
};

// Everything the step keeps between forward and backward, and the backward scratch, in
// one arena sized once for (batch, sequence).
struct Llama::Activations {
  struct PerLayer {
    Tensor ln1, rstd1, qkv, attn, lse, resid_mid, ln2, rstd2, gate_up, h;
  };
  Arena arena;
  std::vector<Tensor> resid;  // L + 1 residual streams [T, D]
  std::vector<PerLayer> layer;
  Tensor lnf, rstdf, logits, losses;
  // Backward: the gradient flowing down the residual stream; at a norm's output (a
  // linear's input); what a block's branch adds to the residual stream; at attention's
  // output (sharing d_branch's memory, which is free then); at qkv, gate_up and h.
  Tensor d_resid, d_normed, d_branch, d_attn, d_qkv, d_gate_up, d_h;
  Tensor attn_workspace;
  // Where the block linears take their inputs' amaxes (nn::Linear::takes_amax; else empty):
  // SwiGLU's output's, for down's x, and its gradient's, for gate_up's dy, each f32[1]
  // written by the SwiGLU kernel and read by the next quantize.
  Tensor h_amax, d_gate_up_amax;
  // CPU only (else empty): kernels::rope_table's cos and sin for the seq positions.
  Tensor rope_table;
  Tensor loss_sum;  // f32[1]: what the loss-returning forward() reads back

  // share_inputs: the block linears' inputs that only their forward reads (the norms' outputs
  // and SwiGLU's) are one buffer for all layers (fp8, where backward reads x's FP8 copy).
  Activations(const LlamaConfig& c, int64_t batch, int64_t seq, DType dt, bool share_inputs,
              bool amaxes, Device device);
};

}  // namespace octet::model
