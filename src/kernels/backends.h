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
}  // namespace cpu

namespace cuda {
size_t gemm_workspace_bytes(const Tensor& a, const Tensor& b, const Tensor& c,
                            const GemmOptions& options, GemmDims dims);
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options,
          GemmDims dims);
size_t gemm_plan_count();
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

// The LLaMA layer kernels and the optimizer: one list, both backends.
struct AttentionDims {
  int64_t batch, seq_len, n_heads, n_kv_heads, head_dim;
};
namespace cpu {
#include "kernels/backend_ops.inc"
size_t attention_workspace_bytes(int64_t seq_len, int64_t head_dim, int threads);
}  // namespace cpu
namespace cuda {
#include "kernels/backend_ops.inc"
}  // namespace cuda

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
