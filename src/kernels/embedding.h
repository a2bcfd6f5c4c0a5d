// kernels/embedding.h: the token embedding of a LLaMA model: a row lookup in the forward
// pass and the scatter-add of the output gradient into the table in the backward pass.
// defines: embedding_forward, embedding_backward
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// out[t, :] = table[ids[t], :] for every token t, rounded to out's dtype.
//   ids:   i32, T elements (any shape, e.g. [B, S]; token t = b * S + s)
//   table: f32 or bf16 [V, D]
//   out:   f32 or bf16 [T, D] (written)
// Throws octet::Error naming the first id outside [0, V), its index and V. On a CUDA device
// (which cannot throw without stopping the stream) such a token's row of out is NaN and
// the id is printed once per process instead; memory outside the table is never read.
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);

// dtable[ids[t], :] += dout[t, :] for every token t, in fp32.
//   ids:    i32, T elements;  dout: f32 or bf16 [T, D]
//   dtable: f32 [V, D] (accumulated: zero it first for a fresh gradient)
// Each row of dtable receives its tokens' gradients in increasing t, whatever the
// thread count or device (CUDA and CPU give the same bits). Ids are checked as in
// embedding_forward; on a CUDA device an out-of-range id's gradient is dropped.
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

}  // namespace octet::kernels
