// fp8/gemm.cpp
#include "fp8/gemm.h"

#include "core/error.h"

namespace octet::fp8 {
namespace {

kernels::GemmOptions to_kernel_options(Fp8Operand a, Fp8Operand b, const Fp8GemmOptions& o) {
  OCTET_CHECK(!a.transposed || a.q->has_transpose(), "fp8 gemm",
              "operand A has no transposed copy; quantize it with_transpose");
  OCTET_CHECK(!b.transposed || b.q->has_transpose(), "fp8 gemm",
              "operand B has no transposed copy; quantize it with_transpose");
  kernels::GemmOptions k;
  k.alpha = o.alpha;
  k.beta = o.beta;
  k.fast_accum = o.fast_accum;
  k.workspace = o.workspace;
  k.a_scale_inv = a.transposed ? a.q->scale_inv_t : a.q->scale_inv;
  k.a_grid = a.q->grid();
  k.b_scale_inv = b.transposed ? b.q->scale_inv_t : b.q->scale_inv;
  k.b_grid = b.q->grid();
  return k;
}

const Tensor& operand(Fp8Operand x) {
  return x.transposed ? x.q->data_t : x.q->data;
}

}  // namespace

size_t gemm_workspace_bytes(Fp8Operand a, Fp8Operand b, const Tensor& c,
                            const Fp8GemmOptions& options) {
  return kernels::gemm_workspace_bytes(operand(a), operand(b), c, to_kernel_options(a, b, options));
}

void gemm(Fp8Operand a, Fp8Operand b, const Tensor& c, const Fp8GemmOptions& options) {
  kernels::gemm(operand(a), operand(b), c, to_kernel_options(a, b, options));
}

}  // namespace octet::fp8
