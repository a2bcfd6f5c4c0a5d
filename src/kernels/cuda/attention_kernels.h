// kernels/cuda/attention_kernels.h: the two CUDA implementations behind
// cuda::attention_forward/backward (kernels/cuda/attention.cu): the bf16 tensor-core
// ("flash") kernels of kernels/cuda/attention_flash_{forward,backward}.cu, the speed path, and the simple
// CUDA-core kernels of attention.cu, the correctness path for everything else.
// Internal to kernels/cuda.
// defines: flash_attention_supported, flash_attention_forward, flash_attention_backward
#pragma once

#include <initializer_list>

#include "core/tensor.h"
#include "kernels/backends.h"

namespace octet::kernels::cuda {

// Whether the flash kernels take these tensors: bf16, head_dim 64 or 128, and every
// tensor's data 16-byte aligned (they move rows in 16-byte pieces). `tensors` are the
// bf16 tensors the call reads or writes.
bool flash_attention_supported(const AttentionDims& dims, std::initializer_list<Tensor> tensors);

// attention_forward / attention_backward on the flash kernels; arguments validated by
// kernels/attention.cpp and accepted by flash_attention_supported.
void flash_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                             const AttentionDims& dims);
void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, const Tensor& dqkv, const AttentionDims& dims);

}  // namespace octet::kernels::cuda
