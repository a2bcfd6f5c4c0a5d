// kernels/cpu/gemm_fp8_cpu.cpp: FP8 GEMMs on the CPU: operands widened exactly to
// bf16 (every E4M3/E5M2 value is a bf16 value), or to f32 where the engine multiplies f32
// (onednn-f32, matmul_operand_dtype), multiplied by that GEMM with fp32 accumulation, and the
// scale_inv factors applied in fp32 the way Hopper's scaled GEMMs apply them: per tensor on the
// accumulator, per row/column in the epilogue, and per K slice for grids that split K (1x128,
// 128x128, MX). That path is the reference; gemm_fp8_fused_cpu.cpp runs every grid as one
// full-K GEMM where the scales' range allows it (the default, see Fp8GemmPath). Per tensor it
// makes the same GEMM call as the per-tensor branch below, only with faster widening; other
// grids' scales go into the widened operands or its epilogue, not alpha.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/convert.h"
#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/gemm_cpu.h"

namespace octet::kernels::cpu {
namespace {

// Widens columns [k0, k0 + width) of the [rows, ld] FP8 matrix into a [rows, width] one of
// `to` (bf16 or f32).
void widen_fp8(const uint8_t* src, DType dtype, int64_t rows, int64_t ld, int64_t k0, int64_t width,
               DType to, void* dst) {
  const auto run = [&](auto widen_row, auto* out) {
  // Below ~64 Ki elements one thread is faster than waking the others.
#pragma omp parallel for schedule(static) if (rows * width > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) widen_row(src + r * ld + k0, out + r * width, width);
  };
  if (to == DType::f32) return run(fp8_to_f32(dtype), static_cast<float*>(dst));
  run(fp8_to_bf16(dtype), static_cast<uint16_t*>(dst));
}

// The scale_inv of row `row` of an operand in K slice `slice`.
struct Scales {
  const void* data;  // empty tensor: nullptr, meaning 1
  ScaleGrid grid;
  int64_t grid_cols;
  float at(int64_t row, int64_t slice) const {
    if (data == nullptr) return 1.0f;
    const int64_t r = grid.block_rows == 0 ? 0 : row / grid.block_rows;
    const int64_t index = r * grid_cols + (grid.block_cols == 0 ? 0 : slice);
    return grid.e8m0 ? e8m0_to_f32(static_cast<const uint8_t*>(data)[index])
                     : static_cast<const float*>(data)[index];
  }
};

Scales scales_of(const Tensor& s, ScaleGrid grid, int64_t k) {
  const int64_t grid_cols = grid.block_cols == 0 ? 1 : (k + grid.block_cols - 1) / grid.block_cols;
  return {s.empty() ? nullptr : s.data, grid, grid_cols};
}

bool per_tensor(const GemmOptions& o) {
  return o.a_grid.block_rows == 0 && o.a_grid.block_cols == 0 && o.b_grid.block_rows == 0 &&
         o.b_grid.block_cols == 0;
}

// The layout of the workspace: [slack][A'][B'][acc f32][partial f32][staging], A' and B' the
// widened operands (matmul_operand_dtype: bf16 or f32), staging the engine's f32 C for a bf16 C
// of the per-tensor GEMM (matmul_staging_floats; 0 but on onednn-f32).
struct Layout {
  int64_t slice;  // K columns widened at a time
  size_t a_bytes, b_bytes, acc_bytes, partial_bytes, staging_bytes;
  size_t total() const {
    return kAlign + a_bytes + b_bytes + acc_bytes + partial_bytes + staging_bytes;
  }
};

Layout layout(GemmDims d, const GemmOptions& o, DType c_dtype) {
  const bool split = o.a_grid.block_cols > 0;
  // At least 1 so that K = 0 (C = beta * C) needs no special case.
  const int64_t slice =
      std::max<int64_t>(1, split ? std::min<int64_t>(o.a_grid.block_cols, d.k) : d.k);
  const bool tensor = per_tensor(o);
  const int64_t slices = (d.k + slice - 1) / slice;
  const DType wide = matmul_operand_dtype();
  const size_t element = dtype_size(wide);
  const int64_t staging = tensor ? matmul_staging_floats(wide, c_dtype, d.m, d.n, d.k) : 0;
  return {slice,
          align_up(static_cast<size_t>(d.m * slice) * element),
          align_up(static_cast<size_t>(d.n * slice) * element),
          tensor ? 0 : align_up(static_cast<size_t>(d.m * d.n) * 4),
          slices > 1 ? align_up(static_cast<size_t>(d.m * d.n) * 4) : 0,
          align_up(static_cast<size_t>(staging) * 4)};
}

constexpr int kPathUnset = -1;
std::atomic<int> g_path{kPathUnset};

}  // namespace

Fp8GemmPath fp8_gemm_path() {
  int path = g_path.load(std::memory_order_relaxed);
  if (path == kPathUnset) {
    const char* env = std::getenv("OCTET_CPU_FP8_GEMM");
    const std::string_view name = env ? env : "";
    OCTET_CHECK(name.empty() || name == "fused" || name == "slices", "gemm", "OCTET_CPU_FP8_GEMM='",
                name, "' is not a path; use fused or slices (or leave it unset)");
    path = static_cast<int>(name == "slices" ? Fp8GemmPath::slices : Fp8GemmPath::fused);
    g_path.store(path, std::memory_order_relaxed);
  }
  return static_cast<Fp8GemmPath>(path);
}

void set_fp8_gemm_path(Fp8GemmPath path) {
  g_path.store(static_cast<int>(path), std::memory_order_relaxed);
}

// A stored [K, M] (trans_a) and B stored [K, N] (trans_b false) made K-major in the
// workspace's front where the fused path does not take them as they are: A's bytes, B's, then
// the K-major call's workspace.
size_t kmajor_a_bytes(GemmDims d, const GemmOptions& o) {
  return o.trans_a ? kAlign + align_up(static_cast<size_t>(d.m * d.k)) : 0;
}
size_t kmajor_b_bytes(GemmDims d, const GemmOptions& o) {
  return o.trans_b ? 0 : kAlign + align_up(static_cast<size_t>(d.n * d.k));
}

size_t fp8_gemm_workspace_bytes(GemmDims d, const GemmOptions& o, DType c_dtype) {
  // Either path may run (the fused one declines scales out of its range): room for both.
  GemmOptions k = o;
  k.trans_a = false;
  k.trans_b = true;
  return kmajor_a_bytes(d, o) + kmajor_b_bytes(d, o) +
         std::max(layout(d, k, c_dtype).total(), fp8_gemm_fused_workspace_bytes(d, k, c_dtype));
}

void fp8_gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o, GemmDims d) {
  const Layout l = layout(d, o, c.dtype);
  const size_t have = o.workspace.empty() ? 0 : o.workspace.nbytes();
  const size_t need = fp8_gemm_workspace_bytes(d, o, c.dtype);
  OCTET_CHECK(have >= need, "gemm", "FP8 on the CPU needs a workspace of ", need, " bytes (got ",
              have, ") on the ", gemm_impl_name(gemm_impl()),
              " engine; size it with gemm_workspace_bytes after choosing the engine");
  char* base = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(o.workspace.data)));
  const DType wide = matmul_operand_dtype();
  void* a_wide = base;
  void* b_wide = base + l.a_bytes;
  auto* acc = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes);
  auto* partial = reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes + l.acc_bytes);
  auto* staging =
      reinterpret_cast<float*>(base + l.a_bytes + l.b_bytes + l.acc_bytes + l.partial_bytes);
  const Scales sa = scales_of(o.a_scale_inv, o.a_grid, d.k);
  const Scales sb = scales_of(o.b_scale_inv, o.b_grid, d.k);
  const auto* a8 = a.as<const uint8_t>();
  const auto* b8 = b.as<const uint8_t>();

  if (fp8_gemm_path() == Fp8GemmPath::fused && fp8_gemm_fused(a, b, c, o, d)) return;
  if (o.trans_a || !o.trans_b) {
    // A stored [K, M] or B stored [K, N] where the fused path declined them: transposed into the
    // workspace's front, then the K-major call on the rest (the same bits: only the layouts
    // differ).
    char* front = static_cast<char*>(o.workspace.data);
    auto kmajor = [&](const Tensor& x, int64_t rows, size_t bytes) {
      Tensor t(reinterpret_cast<void*>(align_up(reinterpret_cast<uintptr_t>(front))), x.dtype,
               {rows, d.k}, x.device);
      transpose(x, t);
      front += bytes;
      return t;
    };
    const Tensor ak = o.trans_a ? kmajor(a, d.m, kmajor_a_bytes(d, o)) : a;
    const Tensor bk = o.trans_b ? b : kmajor(b, d.n, kmajor_b_bytes(d, o));
    GemmOptions k = o;
    k.trans_a = false;
    k.trans_b = true;
    const size_t used = static_cast<size_t>(front - static_cast<char*>(o.workspace.data));
    k.workspace = Tensor(front, DType::u8, {static_cast<int64_t>(have - used)}, o.workspace.device);
    return fp8_gemm(ak, bk, c, k, d);
  }

  if (per_tensor(o)) {
    // One product of the two factors on the fp32 accumulator, folded into alpha.
    widen_fp8(a8, a.dtype, d.m, d.k, 0, d.k, wide, a_wide);
    widen_fp8(b8, b.dtype, d.n, d.k, 0, d.k, wide, b_wide);
    const float scale = sa.at(0, 0) * sb.at(0, 0);
    run_matmul({a_wide, b_wide, c.data, wide, c.dtype, d.m, d.n, d.k, false, true, o.alpha * scale,
                o.beta, l.staging_bytes > 0 ? staging : nullptr});
    return;
  }

  // Scales that vary by row, column or K slice: accumulate sum_s (sa * sb) * partial_s
  // in fp32, then C = alpha * acc + beta * C.
  const int64_t slices = (d.k + l.slice - 1) / l.slice;
  if (slices == 0) std::fill_n(acc, d.m * d.n, 0.0f);  // K = 0
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t k0 = s * l.slice, width = std::min(l.slice, d.k - k0);
    widen_fp8(a8, a.dtype, d.m, d.k, k0, width, wide, a_wide);
    widen_fp8(b8, b.dtype, d.n, d.k, k0, width, wide, b_wide);
    float* out = s == 0 ? acc : partial;
    run_matmul({a_wide, b_wide, out, wide, DType::f32, d.m, d.n, width, false, true, 1.0f, 0.0f});
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d.m; ++i) {
      const float row_scale = sa.at(i, s);
      for (int64_t j = 0; j < d.n; ++j) {
        const float v = (row_scale * sb.at(j, s)) * out[i * d.n + j];
        acc[i * d.n + j] = s == 0 ? v : acc[i * d.n + j] + v;
      }
    }
  }
  const bool bf16_out = c.dtype == DType::bf16;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = 0; j < d.n; ++j) {
      const int64_t idx = i * d.n + j;
      float v = o.alpha * acc[idx];
      if (o.beta != 0.0f) {
        const float old = bf16_out ? bf16_to_f32(c.as<const uint16_t>()[idx]) : c.as<float>()[idx];
        v = v + o.beta * old;
      }
      if (bf16_out) {
        c.as<uint16_t>()[idx] = f32_to_bf16(v);
      } else {
        c.as<float>()[idx] = v;
      }
    }
  }
}

}  // namespace octet::kernels::cpu
