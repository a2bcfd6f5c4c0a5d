// kernels/swiglu.h: the SwiGLU gate of a LLaMA MLP, out = silu(gate) * up, forward
// and backward, on the fused gate/up projection.
// defines: swiglu_forward, swiglu_backward
#pragma once

#include "core/tensor.h"

namespace octet::kernels {

// out[t, j] = silu(g) * u with g = gate_up[t, j], u = gate_up[t, F + j] and
// silu(g) = g / (1 + exp(-g)), in fp32, rounded once to out's dtype.
//   gate_up: f32 or bf16 [T, 2F] (the first F columns gate, the next F up)
//   out:     gate_up's dtype [T, F] (written)
//   out_amax: optional f32[1], CPU only: max |out| as stored (NaN if out holds one), taken row by
//             row while each row is in L1: the amax a per-tensor FP8 quantize of out needs
//             (QuantizeOptions::given_amax), without a pass of its own over out
void swiglu_forward(const Tensor& gate_up, const Tensor& out, const Tensor& out_amax = Tensor());

// With s = sigmoid(g):  dgate = dout * u * s * (1 + g (1 - s)),  dup = dout * silu(g).
//   dout: gate_up's dtype [T, F];  gate_up: as swiglu_forward took it
//   dgate_up: gate_up's dtype [T, 2F] (written; may alias gate_up)
//   dgate_up_amax: optional f32[1], CPU only: max |dgate_up| as stored, as out_amax above
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,
                     const Tensor& dgate_up_amax = Tensor());

}  // namespace octet::kernels
