// kernels/quantize.cpp: validation of quantize/dequantize and dispatch by device.
#include "kernels/quantize.h"

#include "core/error.h"
#include "kernels/backends.h"

namespace octet::kernels {
namespace {

int64_t blocks(int64_t n, int64_t block) {
  return block == 0 ? 1 : (n + block - 1) / block;
}

void check_scales(const char* op, const char* name, const Tensor& s, int64_t rows, int64_t cols,
                  ScaleGrid grid, Device device) {
  const Shape want = scale_grid_shape(rows, cols, grid);
  const DType dtype = grid.e8m0 ? DType::e8m0 : DType::f32;
  OCTET_CHECK(s.dtype == dtype && s.numel() == want.numel() && s.device == device, op, name,
              " must be ", dtype_name(dtype), want.str(), " on ", device_name(device), ", got ",
              s.str());
}

void check_grid(const char* op, ScaleGrid grid) {
  OCTET_CHECK(grid.block_rows >= 0 && grid.block_cols >= 0, op, "scale grid blocks must be >= 0");
  OCTET_CHECK(!grid.e8m0 || (grid.block_rows == 1 && grid.block_cols > 0), op,
              "E8M0 scales are per 1xN block (MX), got a ", grid.block_rows, "x", grid.block_cols,
              " grid");
}

}  // namespace

Shape scale_grid_shape(int64_t rows, int64_t cols, ScaleGrid grid) {
  return Shape{blocks(rows, grid.block_rows), blocks(cols, grid.block_cols)};
}

void quantize(const Tensor& x, const QuantizeOutputs& out, const QuantizeOptions& o) {
  constexpr const char* op = "quantize";
  const int64_t rows = x.rows(), cols = x.cols();
  check_grid(op, o.grid);
  OCTET_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16, op,
              "the input must be f32 or bf16, got ", x.str());
  OCTET_CHECK(is_fp8(out.data.dtype) && out.data.rows() == rows && out.data.cols() == cols &&
                  out.data.device == x.device,
              op, "data must be e4m3 or e5m2 [", rows, ", ", cols, "] on ", device_name(x.device),
              ", got ", out.data.str());
  check_scales(op, "scale_inv", out.scale_inv, rows, cols, o.grid, x.device);
  if (out.data_t_in_x_layout) {
    OCTET_CHECK(x.device.is_cpu(), op,
                "data_t in x's layout (A stored [K, M], B [K, N]) is the CPU's; on ",
                device_name(x.device), " the transposed copy is K-major");
    OCTET_CHECK(o.grid.block_rows == 1, op,
                "data_t in x's layout takes grids whose blocks are 1xN (row, 1x128, MX), whose "
                "transposed copy has scales of its own; got ",
                o.grid.block_rows, "x", o.grid.block_cols);
  }
  if (!out.data_t.empty()) {
    const bool x_layout = out.data_t_in_x_layout;
    OCTET_CHECK(
        out.data_t.dtype == out.data.dtype && out.data_t.rows() == (x_layout ? rows : cols) &&
            out.data_t.cols() == (x_layout ? cols : rows) && out.data_t.device == x.device,
        op, "data_t must be ", dtype_name(out.data.dtype), "[", x_layout ? rows : cols, ", ",
        x_layout ? cols : rows, "]", x_layout ? " (x's layout)" : "", ", got ", out.data_t.str());
    check_scales(op, "scale_inv_t", out.scale_inv_t, cols, rows, o.grid, x.device);
  }
  if (!out.wide.empty()) {
    OCTET_CHECK(x.device.is_cpu(), op, "wide (the codes widened to bf16) is the CPU's GEMM ",
                "operand; on ", device_name(x.device), " leave it empty");
    OCTET_CHECK(out.wide.dtype == DType::bf16 && out.wide.rows() == rows &&
                    out.wide.cols() == cols && out.wide.device == x.device,
                op, "wide must be bf16[", rows, ", ", cols, "] on ", device_name(x.device),
                ", got ", out.wide.str());
  }
  if (!out.amax.empty()) {
    OCTET_CHECK(
        out.amax.dtype == DType::f32 && out.amax.numel() == 1 && out.amax.device == x.device, op,
        "amax must be f32[1] on ", device_name(x.device), ", got ", out.amax.str());
  }
  if (!out.counts.empty()) {
    OCTET_CHECK(
        out.counts.dtype == DType::i32 && out.counts.numel() == 2 && out.counts.device == x.device,
        op, "counts must be i32[2] on ", device_name(x.device), ", got ", out.counts.str());
  }
  // A given scale or amax: one f32 for the whole tensor.
  const auto check_given = [&](const Tensor& given, const char* name, const char* why) {
    if (given.empty()) return;
    OCTET_CHECK(o.grid.block_rows == 0 && o.grid.block_cols == 0 && !o.grid.e8m0, op, why,
                "; the grid must be {0, 0}");
    OCTET_CHECK(given.dtype == DType::f32 && given.numel() == 1 && given.device == x.device, op,
                name, " must be f32[1] on ", device_name(x.device), ", got ", given.str());
  };
  check_given(o.given_scale, "given_scale", "a given scale (delayed scaling) is per tensor");
  OCTET_CHECK(o.given_amax.empty() || x.device.is_cpu(), op,
              "a given amax is taken on the CPU only; on ", device_name(x.device),
              " the quantize takes its own (leave given_amax empty)");
  check_given(o.given_amax, "given_amax", "a given amax is x's, one for the tensor");
  OCTET_CHECK(!(o.power_of_two_scales && o.grid.e8m0), op,
              "power_of_two_scales applies to f32 scales; E8M0 scales are powers of two already");
  if (x.numel() == 0) return;
  if (x.device.is_cpu()) return cpu::quantize(x, out, o);
  OCTET_CUDA_RETURN(op, x, quantize, x, out, o);
}

void dequantize(const Tensor& data, const Tensor& scale_inv, ScaleGrid grid, const Tensor& y) {
  constexpr const char* op = "dequantize";
  check_grid(op, grid);
  OCTET_CHECK(is_fp8(data.dtype), op, "data must be e4m3 or e5m2, got ", data.str());
  OCTET_CHECK((y.dtype == DType::f32 || y.dtype == DType::bf16) && y.rows() == data.rows() &&
                  y.cols() == data.cols() && y.device == data.device,
              op, "y must be f32 or bf16 shaped like ", data.str(), ", got ", y.str());
  check_scales(op, "scale_inv", scale_inv, data.rows(), data.cols(), grid, data.device);
  if (data.numel() == 0) return;
  if (data.device.is_cpu()) return cpu::dequantize(data, scale_inv, grid, y);
  OCTET_CUDA_RETURN(op, data, dequantize, data, scale_inv, grid, y);
}

}  // namespace octet::kernels
