// kernels/gemm.cpp: validation of GEMM arguments and dispatch by device.
#include "kernels/gemm.h"

#include <string>

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/gemm_cpu.h"

namespace octet::kernels {
namespace {

bool is_gemm_output(DType d) {
  return d == DType::f32 || d == DType::bf16;
}

// An FP8 operand's scale_inv: empty (1), or laid out on its grid over [rows, K].
void check_scales(const char* name, const Tensor& s, ScaleGrid grid, int64_t rows, int64_t k,
                  Device device) {
  if (s.empty()) {
    OCTET_CHECK(grid == ScaleGrid{}, "gemm", "the scale grid of ", name,
                " is not per tensor but no scale_inv was given");
    return;
  }
  const Shape want = scale_grid_shape(rows, k, grid);
  const DType dtype = grid.e8m0 ? DType::e8m0 : DType::f32;
  OCTET_CHECK(s.dtype == dtype && s.numel() == want.numel() && s.device == device, "gemm",
              "the scale_inv of ", name, " must be ", dtype_name(dtype), want.str(), " on ",
              device_name(device), " for its ", grid.block_rows, "x", grid.block_cols,
              " grid, got ", s.str());
}

GemmDims validate(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o) {
  constexpr const char* op = "gemm";
  OCTET_CHECK(a.shape.rank() == 2 && b.shape.rank() == 2 && c.shape.rank() == 2, op,
              "operands must be matrices, got A ", a.str(), ", B ", b.str(), ", C ", c.str());
  OCTET_CHECK(a.device == b.device && a.device == c.device, op,
              "all operands must be on one device, got A ", a.str(), ", B ", b.str(), ", C ",
              c.str());

  const GemmDims d{o.trans_a ? a.shape[1] : a.shape[0], o.trans_b ? b.shape[0] : b.shape[1],
                   o.trans_a ? a.shape[0] : a.shape[1]};
  const int64_t k_b = o.trans_b ? b.shape[1] : b.shape[0];
  OCTET_CHECK(k_b == d.k, op, "inner dimensions differ: op(A) is [", d.m, ", ", d.k,
              "] but op(B) is [", k_b, ", ", d.n, "] (A ", a.str(), ", B ", b.str(),
              ", trans_a=", o.trans_a, ", trans_b=", o.trans_b, ")");
  OCTET_CHECK(c.shape[0] == d.m && c.shape[1] == d.n, op, "C must be [", d.m, ", ", d.n, "], got ",
              c.str());

  const bool fp8 = is_fp8(a.dtype) || is_fp8(b.dtype);
  if (fp8) {
    OCTET_CHECK(is_fp8(a.dtype) && is_fp8(b.dtype), op, "FP8 GEMMs take two FP8 operands, got A ",
                a.str(), " and B ", b.str());
    check_fp8_formats(a.dtype, b.dtype, d.k);
    OCTET_CHECK((!o.trans_a && o.trans_b) || a.device.is_cpu(), op,
                "FP8 operands must both be K-major (A [M, K], B [N, K]) on ", device_name(a.device),
                " (cuBLASLt's FP8 GEMMs are TN; the CPU also takes A stored [K, M] and B [K, N]); "
                "make the transposed copy with kernels::transpose or at quantization time");
    check_scales("A", o.a_scale_inv, o.a_grid, d.m, d.k, a.device);
    check_scales("B", o.b_scale_inv, o.b_grid, d.n, d.k, a.device);
    OCTET_CHECK(o.a_grid.block_cols == o.b_grid.block_cols, op,
                "the scale grids of A and B split K differently (", o.a_grid.block_cols, " vs ",
                o.b_grid.block_cols, " columns); use one K block size for both");
  } else {
    OCTET_CHECK(o.a_scale_inv.empty() && o.b_scale_inv.empty(), op,
                "scale_inv factors apply to FP8 operands only, got A ", a.str(), " and B ",
                b.str());
    OCTET_CHECK(a.dtype == b.dtype && (a.dtype == DType::f32 || a.dtype == DType::bf16), op,
                "operands must be f32 x f32, bf16 x bf16 or FP8, got A ", a.str(), " and B ",
                b.str());
  }
  OCTET_CHECK(is_gemm_output(c.dtype), op, "C must be f32 or bf16, got ", c.str());
  OCTET_CHECK(!(a.dtype == DType::f32 && c.dtype != DType::f32), op,
              "an f32 GEMM writes f32, got C ", c.str());
  if (o.workspace.data != nullptr) {
    OCTET_CHECK(o.workspace.device == a.device, op, "the workspace must be on ",
                device_name(a.device), ", got ", o.workspace.str());
  }
  return d;
}

}  // namespace

void check_fp8_formats(DType a, DType b, int64_t k) {
  OCTET_CHECK(!(a == DType::e5m2 && b == DType::e5m2), "gemm",
              "E5M2 x E5M2 is not supported (Hopper's FP8 tensor cores refuse it); quantize "
              "one operand to E4M3");
  OCTET_CHECK(k % 16 == 0, "gemm", "K=", k,
              " is not a multiple of 16, which FP8 GEMMs need; pad K to a multiple of 16");
}

size_t gemm_workspace_bytes(const Tensor& a, const Tensor& b, const Tensor& c,
                            const GemmOptions& options) {
  const GemmDims dims = validate(a, b, c, options);
  if (a.device.is_cpu()) return cpu::gemm_workspace_bytes(a, b, c, options, dims);
  OCTET_CUDA_RETURN("gemm", a, gemm_workspace_bytes, a, b, c, options, dims);
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options) {
  const GemmDims dims = validate(a, b, c, options);
  if (dims.m == 0 || dims.n == 0) return;
  OCTET_CHECK(!a.empty() && !b.empty() && !c.empty(), "gemm", "an operand has no data");
  if (a.device.is_cpu()) return cpu::gemm(a, b, c, options, dims);
  OCTET_CUDA_RETURN("gemm", a, gemm, a, b, c, options, dims);
}

size_t gemm_cuda_plan_count() {
#if defined(OCTET_HAVE_CUDA)
  return cuda::gemm_plan_count();
#else
  return 0;
#endif
}

bool fp8_gemm_reads_k_first(Device device, ScaleGrid grid) {
  return device.is_cpu() && cpu::fp8_gemm_reads_k_first(grid);
}

const char* cpu_gemm_engine() {
  return cpu::gemm_impl_name(cpu::gemm_impl());
}

void set_cpu_gemm_engine(std::string_view name) {
  for (cpu::GemmImpl impl :
       {cpu::GemmImpl::onednn, cpu::GemmImpl::onednn_f32, cpu::GemmImpl::reference}) {
    if (name == cpu::gemm_impl_name(impl)) return cpu::set_gemm_impl(impl);
  }
  OCTET_FAIL("gemm", "unknown CPU GEMM engine '", std::string(name),
             "'; choose onednn, onednn-f32 or reference");
}

}  // namespace octet::kernels
