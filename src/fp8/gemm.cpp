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
  // A copy in x's layout is xᵀ stored [K, M] as A, [K, N] as B (kernels/gemm.h: the CPU takes
  // both).
  k.trans_a = a.transposed && a.q->data_t_in_x_layout();
  k.trans_b = !(b.transposed && b.q->data_t_in_x_layout());
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

// Both operands widened (TransposedCopy::widened_on_cpu): one bf16 GEMM of their values, each
// read in the orientation the GEMM wants, with the per-tensor scales' product in alpha, as the
// CPU's FP8 GEMM gives it to the engine for codes (gemm_fp8_fused_cpu.cpp), so that only the
// layouts differ from that call. One widened and one not cannot be multiplied.
bool both_widened(Fp8Operand a, Fp8Operand b) {
  const bool wa = a.q->widened(), wb = b.q->widened();
  if (wa && wb) {
    kernels::check_fp8_formats(a.q->format(), b.q->format(),
                               a.transposed ? a.q->rows() : a.q->cols());
    return true;
  }
  // Otherwise the codes, and a widened operand has no data_t.
  OCTET_CHECK(!(wa && a.transposed) && !(wb && b.transposed), "fp8 gemm", "operand ",
              wa && a.transposed ? "A" : "B",
              " holds its transposed copy widened to bf16 (CPU, per tensor) and the other "
              "operand does not: make both the same way");
  return false;
}

// The widened GEMM's options but alpha's scales, which gemm() multiplies in.
kernels::GemmOptions widened_options(Fp8Operand a, Fp8Operand b, const Fp8GemmOptions& o) {
  kernels::GemmOptions k;
  k.trans_a = a.transposed;   // wide is [rows, cols]: Aᵀ's K runs down its rows
  k.trans_b = !b.transposed;  // B as stored is [N, K]; transposed, wide is [K, N]
  k.alpha = o.alpha;
  k.beta = o.beta;
  k.workspace = o.workspace;
  return k;
}

}  // namespace

size_t gemm_workspace_bytes(Fp8Operand a, Fp8Operand b, const Tensor& c,
                            const Fp8GemmOptions& options) {
  if (both_widened(a, b)) {
    return kernels::gemm_workspace_bytes(a.q->wide, b.q->wide, c, widened_options(a, b, options));
  }
  return kernels::gemm_workspace_bytes(operand(a), operand(b), c, to_kernel_options(a, b, options));
}

void gemm(Fp8Operand a, Fp8Operand b, const Tensor& c, const Fp8GemmOptions& options) {
  if (both_widened(a, b)) {
    kernels::GemmOptions k = widened_options(a, b, options);
    k.alpha = options.alpha * (a.q->scale_inv.as<float>()[0] * b.q->scale_inv.as<float>()[0]);
    kernels::gemm(a.q->wide, b.q->wide, c, k);
    return;
  }
  kernels::gemm(operand(a), operand(b), c, to_kernel_options(a, b, options));
}

}  // namespace octet::fp8
