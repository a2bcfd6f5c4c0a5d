// cli/bench/step_model.h: the model FLOPs of one LLaMA training step (what `octet bench step`
// divides by the step time for TFLOP/s and MFU) and the model shapes of its sweep.
// Header-only so that tests/bench checks the formula against a hand count.
// defines: kHopperBf16DenseTflops, step_matmul_params, step_flops_per_token, step_model_flops,
//          llama_ffn_size, sweep_config
#pragma once

#include <cstdint>

#include "model/config.h"

namespace octet::bench {

// H100/H200 SXM dense BF16 tensor-core peak (1978.9 TFLOP/s is the 2:4-sparse figure).
inline constexpr double kHopperBf16DenseTflops = 989.4;

// Weights that take part in a matrix multiply for every token: the transformer-block
// linears (QKV with grouped K/V heads, attention output, gate, up, down) of all layers plus
// the LM head. The embedding is a gather (no FLOPs), and its gradient a scatter-add; the LM
// head is counted even when tied to the embedding, because it is still a [V, d] GEMM.
// RMSNorm weights are not matmul weights.
inline int64_t step_matmul_params(const model::LlamaConfig& c) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim();
  const int64_t qkv = d * (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  const int64_t out = c.num_attention_heads * hd * d;
  const int64_t mlp = 3 * d * f;
  return c.num_hidden_layers * (qkv + out + mlp) + c.vocab_size * d;
}

// Model FLOPs of one token of a forward + backward pass over sequences of seq_len tokens.
//
// Linears. y = x W^T with W [n_out, n_in] costs 2 n_in n_out FLOPs per token forward
// (a multiply and an add per weight); backward costs the same twice more: dgrad dx = dy W
// and wgrad dW += dy^T x. So 6 FLOPs per matmul weight per token: 6 * step_matmul_params.
//
// Causal attention core, per layer and query head (head dim hd): the query at position i
// (0-based) attends to i + 1 keys: scores q k^T cost 2 hd (i + 1) and P V another 2 hd (i + 1).
// The mean context over a causal sequence is (S + 1) / 2; like FlashAttention's causal count
// we take S / 2 (a relative difference of 1/S in this term). Forward: 2 matmuls x 2 hd x S/2 =
// 2 hd S per head; backward has 4 such matmuls (dV = P^T dO, dP = dO V^T, dQ = dS K,
// dK = dS^T Q), twice the forward, so fwd + bwd = 6 hd S per head. Grouped K/V heads do not
// reduce it: every query head does its own products. Over H heads (H hd = d) and L layers:
// 6 L S d per token.
//
// Not counted (the MFU convention of PaLM, "model FLOPs", not hardware FLOPs): attention
// recomputation in backward, RMSNorm, RoPE, SwiGLU, softmax, the loss and AdamW, which are
// O(d) per token and memory-bound. PaLM's 12 L H hd S attention term counts a non-causal
// context of S; ours counts the causal S / 2 that is really computed, so our MFU is the
// more conservative of the two.
inline int64_t step_flops_per_token(const model::LlamaConfig& c, int64_t seq_len) {
  const int64_t attention =
      6 * c.num_hidden_layers * seq_len * c.num_attention_heads * c.head_dim();
  return 6 * step_matmul_params(c) + attention;
}

// Model FLOPs of one optimizer step over batch x seq_len tokens (one micro-batch).
inline double step_model_flops(const model::LlamaConfig& c, int64_t batch, int64_t seq_len) {
  return static_cast<double>(step_flops_per_token(c, seq_len)) * static_cast<double>(batch) *
         static_cast<double>(seq_len);
}

// LLaMA's FFN width: 2/3 of 4 d, rounded up to a multiple of 256 (2048 -> 5632, 4096 -> 11008).
inline int64_t llama_ffn_size(int64_t hidden) {
  const int64_t raw = 2 * 4 * hidden / 3;
  return (raw + 255) / 256 * 256;
}

// The sweep's model of one hidden size: LLaMA's FFN rule, heads of dimension 128 (full
// multi-head K/V), LLaMA-2's vocabulary of 32000, `layers` layers, sequences of seq_len.
inline model::LlamaConfig sweep_config(int64_t hidden, int64_t layers, int64_t seq_len) {
  model::LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = hidden;
  c.intermediate_size = llama_ffn_size(hidden);
  c.num_hidden_layers = layers;
  c.num_attention_heads = hidden / 128;
  c.num_key_value_heads = c.num_attention_heads;
  c.max_position_embeddings = seq_len;
  return c;
}

}  // namespace octet::bench
