// kernels/rope.h: rotary position embedding (RoPE) applied in place to the q and k
// heads of a packed qkv activation, in the Hugging Face LLaMA convention.
// defines: rope_forward, rope_backward, rope_table
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace octet::kernels {

// Rotates the q and k heads of qkv in place; the v heads are left untouched.
//   qkv: f32 or bf16 [T, (n_heads + 2 n_kv_heads) * head_dim], T = B * seq_len tokens,
//        batch-major (token t is at position p = t % seq_len); per token the n_heads q
//        heads come first, then the n_kv_heads k heads, then the n_kv_heads v heads.
//   head_dim even; theta the RoPE base (10000 in LLaMA 2, 500000 in LLaMA 3).
// Element i < head_dim / 2 of a head pairs with element i + head_dim / 2 ("rotate_half"):
//   x'[i]        = x[i] cos(p w_i) - x[i + hd/2] sin(p w_i)
//   x'[i + hd/2] = x[i + hd/2] cos(p w_i) + x[i] sin(p w_i)
// with w_i = 1 / theta^(2i / hd), as Hugging Face computes it in fp32: the exponent
// 2i / hd, the power, its reciprocal and the angle p * w_i are each rounded to fp32,
// then cos and sin are taken in fp32 (libm may differ from PyTorch's by an ulp). For
// bf16 activations cos and sin are rounded to bf16 first, as Hugging Face casts them
// to the activation dtype; the rotation itself is then computed in fp32 and rounded
// once (Hugging Face rounds each of its three bf16 operations).
// table: optional (empty: the angles are computed in the call), see rope_table.
void rope_forward(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                  int64_t seq_len, float theta, const Tensor& table = {});

// The gradient of rope_forward, in place on dqkv (same layout): the transposed
// (inverse) rotation of the q and k heads' gradients, with the same cos and sin; the
// v heads' gradients are left untouched.
void rope_backward(const Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   int64_t seq_len, float theta, const Tensor& table = {});

// The cos and sin of every (position, pair) above, computed once (at set-up, outside the
// step) so that the CPU rotations read them instead of taking pow, cos and sin per call.
//   table: [seq_len, head_dim] on the CPU, in the activation dtype of the qkv it will
//          rotate (f32 or bf16); row p gets cos(p w_i) for i < head_dim / 2, then
//          sin(p w_i), with the same fp32 steps and rounding as above.
// rope_forward/backward with this table (and the same head_dim, seq_len and theta) give
// the same bits as without it. CUDA kernels compute their angles themselves: a table
// passed with a CUDA qkv is refused.
void rope_table(const Tensor& table, int64_t head_dim, int64_t seq_len, float theta);

}  // namespace octet::kernels
