// kernels/backends.h: the per-device implementations behind kernels/*.h. The
// public functions validate their arguments once and then call these with
// arguments known to be good. Internal to kernels/.
// defines: GemmDims, cpu::*, cuda::*, require_cuda
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/convert.h"
#include "core/tensor.h"
#include "kernels/gemm.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace octet::kernels {

struct GemmDims {
  int64_t m, n, k;
};

namespace cpu {
size_t gemm_workspace_bytes(const Tensor& a, const Tensor& b, const Tensor& c,
                            const GemmOptions& options, GemmDims dims);
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options,
          GemmDims dims);
void convert(const Tensor& src, const Tensor& dst, Overflow overflow);
void transpose(const Tensor& src, const Tensor& dst);
void quantize(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& options);
void dequantize(const Tensor& data, const Tensor& scale_inv, ScaleGrid grid, const Tensor& y);
void delayed_scaling_update(const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                            const Tensor& fp8_max, const Tensor& nonfinite, AmaxReduce reduce,
                            int margin);
void add_bias(const Tensor& y, const Tensor& bias);
void bias_grad_accumulate(const Tensor& dy, const Tensor& grad);
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWStep& step);
void sum_of_squares(const Tensor& x, const Tensor& out);
}  // namespace cpu

namespace cuda {
size_t gemm_workspace_bytes(const Tensor& a, const Tensor& b, const Tensor& c,
                            const GemmOptions& options, GemmDims dims);
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options,
          GemmDims dims);
void convert(const Tensor& src, const Tensor& dst, Overflow overflow);
void transpose(const Tensor& src, const Tensor& dst);
void quantize(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& options);
void dequantize(const Tensor& data, const Tensor& scale_inv, ScaleGrid grid, const Tensor& y);
void delayed_scaling_update(const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                            const Tensor& fp8_max, const Tensor& nonfinite, AmaxReduce reduce,
                            int margin);
void add_bias(const Tensor& y, const Tensor& bias);
void bias_grad_accumulate(const Tensor& dy, const Tensor& grad);
}  // namespace cuda

// The LLaMA layer kernels (embedding, norm, rope, attention, swiglu, cross_entropy,
// elementwise); CPU only until the CUDA training step (the dispatchers refuse CUDA tensors).
namespace cpu {
struct AttentionDims {
  int64_t batch, seq_len, n_heads, n_kv_heads, head_dim;
};
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);
void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dweight);
// backward = true applies the transposed rotation.
void rope(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t seq_len,
          float theta, bool backward);
size_t attention_workspace_bytes(int64_t seq_len, int64_t head_dim, int threads);
void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                       const AttentionDims& dims, const Tensor& workspace);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& dqkv, const AttentionDims& dims, const Tensor& workspace);
void swiglu_forward(const Tensor& gate_up, const Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up);
void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                   const Tensor& dlogits, float grad_scale);
void add(const Tensor& a, const Tensor& b, const Tensor& out);
}  // namespace cpu

// Throws unless this build has CUDA and the tensor's device is present.
void require_cuda(const char* op, const Tensor& t);

}  // namespace octet::kernels

// A statement: `return cuda::fn(args);` in a CUDA build, and a throw of
// "[op] ... built without CUDA" otherwise (so that no stub files are needed).
#if defined(OCTET_HAVE_CUDA)
#define OCTET_CUDA_RETURN(op, fn, ...) return ::octet::kernels::cuda::fn(__VA_ARGS__)
#else
#define OCTET_CUDA_RETURN(op, fn, ...)                                             \
  OCTET_FAIL(op,                                                                   \
             "this octet was built without CUDA; reconfigure where nvcc is found " \
             "to run it on a GPU")
#endif
