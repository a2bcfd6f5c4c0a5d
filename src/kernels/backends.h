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

// Every op's per-device implementation: one list, both backends.
struct AttentionDims {
  int64_t batch, seq_len, n_heads, n_kv_heads, head_dim;
};
namespace cpu {
#include "kernels/backend_ops.inc"
size_t attention_workspace_bytes(int64_t seq_len, int64_t head_dim, int threads);
// RoPE's cos/sin table (kernels/rope.h) and the rotation that reads it: CPU only.
void rope_table(const Tensor& table, int64_t head_dim, int64_t seq_len, float theta);
void rope(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t seq_len,
          const Tensor& table, bool backward);
// swiglu_forward / swiglu_backward that also write max |output| into an f32[1] (or not, when it
// is empty), taken row by row (kernels/swiglu.h).
void swiglu_forward(const Tensor& gate_up, const Tensor& out, const Tensor& out_amax);
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,
                     const Tensor& dgate_up_amax);
// adamw_step that also writes the updated parameters rounded to bf16 into `working`.
void adamw_step_to_bf16(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                        const AdamWStep& step, const Tensor& grad_sum_sq, const Tensor& working);
}  // namespace cpu
namespace cuda {
#include "kernels/backend_ops.inc"
size_t gemm_plan_count();  // cuBLASLt plans cached so far (tests see their reuse)
}  // namespace cuda

// Throws unless this build has CUDA and the tensor's device is present.
void require_cuda(const char* op, const Tensor& t);

}  // namespace octet::kernels

// A statement: after require_cuda(op, on) (this build has CUDA and `on`'s device is
// present, else a throw that says which is missing), `return cuda::fn(args);` in a CUDA
// build, and a throw of "[op] ... built without CUDA" otherwise (no stub files needed).
#if defined(OCTET_HAVE_CUDA)
#define OCTET_CUDA_RETURN(op, on, fn, ...)          \
  do {                                              \
    ::octet::kernels::require_cuda(op, on);         \
    return ::octet::kernels::cuda::fn(__VA_ARGS__); \
  } while (0)
#else
#define OCTET_CUDA_RETURN(op, on, fn, ...)                                              \
  OCTET_FAIL(op, (on).str(),                                                            \
             " is on a CUDA device but this octet was built without CUDA; reconfigure " \
             "where nvcc is found to run it on a GPU")
#endif
