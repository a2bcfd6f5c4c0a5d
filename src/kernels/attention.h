// kernels/attention.h: causal self-attention with grouped-query heads (GQA, MHA when
// n_kv_heads == n_heads) on a packed qkv activation, forward and flash-style backward.
// defines: attention_workspace_bytes, attention_forward, attention_backward
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace octet::kernels {

// Bytes of workspace that attention_forward and attention_backward need to run on
// `threads` CPU threads (0: omp_get_max_threads()); on a CUDA device they need none
// (any workspace tensor, even an empty one, is accepted and left alone). With a smaller workspace
// (at least the size for 1 thread) the CPU kernels use as many threads as it has room for; the
// results are the same bits for any thread count. Per thread: one row of scores or
// the dk/dv accumulators of one block of 32 keys, max(seq_len + 2 hd, 66 hd) floats.
size_t attention_workspace_bytes(int64_t seq_len, int64_t head_dim, int threads = 0);

// out = softmax(q k^T / sqrt(head_dim) + causal mask) v for every sequence and q head,
// where q head h reads kv head h / (n_heads / n_kv_heads); fp32 math.
//   qkv: f32 or bf16 [B * S, (n_heads + 2 n_kv_heads) * head_dim], batch-major tokens;
//        per token n_heads q heads, then n_kv_heads k heads, then n_kv_heads v heads
//        (the layout rope_forward takes)
//   out: qkv's dtype [B * S, n_heads * head_dim] (written), head h in columns h * head_dim...
//   lse: f32 [B, n_heads, S] (written): the log-sum-exp of each row of scaled scores,
//        saved for the backward pass
//   workspace: CPU: u8, at least attention_workspace_bytes(S, head_dim, 1) bytes; CUDA: unused
// n_heads must be a multiple of n_kv_heads; out must not overlap qkv. On CUDA, bf16 with
// head_dim 64 or 128 and 16-byte aligned tensors runs on tensor cores (P rounded to bf16
// before P v, as in FlashAttention); other cases run a simple fp32 kernel (head_dim <= 512).
void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, int64_t batch,
                       int64_t seq_len, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                       const Tensor& workspace);

// The gradient of attention_forward, recomputing the probabilities P from q, k and the
// saved lse (never storing the score matrix), with D_i = rowsum(dout ⊙ out):
//   dS = P ⊙ (dout v^T - D),  dq = dS k / sqrt(hd),  dk = dS^T q / sqrt(hd),  dv = P^T dout
//   dout: qkv's dtype [B * S, n_heads * head_dim];  qkv, out, lse: as attention_forward
//   took and wrote them
//   dqkv: qkv's dtype, qkv's shape (written, not accumulated): the q heads' gradients
//         and the k and v heads' gradients summed over the q heads that share them
// Every element of dqkv is summed in a fixed order, whatever the thread count (and on
// CUDA without atomics: the same bits on every run). The tensor-core path rounds P and dS
// to bf16 before their products; the CPU's AMX path (bf16, head_dim a multiple of 32) splits
// them exactly into three bf16 parts instead (kernels/cpu/attention_amx.h), keeping fp32 math.
// dqkv must not overlap the inputs.
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& dqkv, int64_t batch, int64_t seq_len, int64_t n_heads,
                        int64_t n_kv_heads, int64_t head_dim, const Tensor& workspace);

}  // namespace octet::kernels
