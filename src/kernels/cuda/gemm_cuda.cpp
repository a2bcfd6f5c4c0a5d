// kernels/cuda/gemm_cuda.cpp: the CUDA GEMMs, through cuBLASLt (cublaslt.h) with fp32
// accumulation: f32 and bf16 in any layout; FP8 (E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3)
// K-major with per-tensor scales (SCALAR_32F), per-row scales (OUTER_VEC_32F) or 1x128
// tiles and 128x128 blocks (VEC128_32F, BLK128x128_32F), the scales re-laid into the
// workspace where cuBLASLt's layout differs from octet's. Grids Hopper's cuBLASLt does
// not take (MX, other block sizes, 128x128 on both operands, and block grids when M or N
// is not a multiple of 4) are emulated: both operands
// dequantized into the workspace, exactly into bf16 when every scale is a power of two
// (MX), else into f32, then a bf16 or f32 GEMM; so is any scaled FP8 GEMM the cuBLASLt at hand
// refuses, in its heuristic or at the call (decided once per problem, cublaslt.h). Nothing
// synchronises the host.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/gemm_kernels.h"

namespace octet::kernels::cuda {
namespace {

constexpr const char* kOp = "gemm";
// NVIDIA's recommended cuBLASLt workspace for Hopper. gemm() also runs with less (the
// heuristic then picks among the algorithms that fit), down to none.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr size_t kAlign = 256;  // of each workspace region (cuBLASLt's default alignment)

size_t align_up(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// ---- how one GEMM runs ------------------------------------------------------------

enum class Fp8Path : unsigned char {
  tensor,    // SCALAR_32F: the scale_inv pointers as given (empty: 1)
  outer,     // OUTER_VEC_32F: one scale_inv per row of A and of B, expanded into the workspace
  block,     // VEC128_32F (1x128) / BLK128x128_32F (128x128), re-laid into the workspace
  emulated,  // both operands dequantized into the workspace, then a bf16 or f32 GEMM
};

// The path of a call and its workspace regions (each a multiple of kAlign bytes), in order.
struct Route {
  bool fp8 = false;
  Fp8Path path = Fp8Path::tensor;
  bool emulate_bf16 = false;  // emulated: operands dequantized exactly into bf16 (else f32)
  // N as cuBLASLt's FP8 kernels see it: padded to a multiple of 16 (their "dimensions of
  // 16-byte multiples", with the N dimension as wide as C's rows) by zero rows appended to
  // a copy of B (b_pad) and a C [M, np] in the workspace (d), copied back afterwards.
  int64_t np = 0;
  size_t a_scale_bytes = 0, b_scale_bytes = 0;  // re-laid scales (outer, block)
  size_t a_bytes = 0, b_bytes = 0;              // dequantized operands (emulated)
  size_t acc_bytes = 0;    // f32 [M, N] accumulator (emulated in f32 with a bf16 C)
  size_t b_pad_bytes = 0;  // fp8 [np, K]: B and np - N zero rows
  size_t d_bytes = 0;      // [M, np] in C's dtype
  size_t scratch_bytes() const {
    return a_scale_bytes + b_scale_bytes + a_bytes + b_bytes + acc_bytes + b_pad_bytes + d_bytes;
  }
};

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

bool per_tensor(ScaleGrid g) {
  return g.block_rows == 0 && g.block_cols == 0;
}

// 1x128 tiles or 128x128 blocks with f32 scales: what VEC128_32F / BLK128x128_32F read.
bool cublas_block_grid(ScaleGrid g) {
  return !g.e8m0 && g.block_cols == 128 && (g.block_rows == 1 || g.block_rows == 128);
}

// OCTET_CUDA_FP8_EMULATE=1 sends every FP8 GEMM through the emulation: a way around a
// cuBLASLt that refuses a scale mode on some machine, and a cross-check of the native paths.
bool emulation_forced() {
  static const bool forced = [] {
    const char* env = std::getenv("OCTET_CUDA_FP8_EMULATE");
    return env != nullptr && *env != '\0' && std::string_view(env) != "0";
  }();
  return forced;
}

// Bytes of one operand's scales in cuBLASLt's layout: VEC128 [ceil(K/128), rows] or
// BLK128x128 [ceil(rows/128), ceil(ceil(K/128)/4)*4], f32.
size_t block_scale_bytes(ScaleGrid g, int64_t rows, int64_t k) {
  const int64_t k_blocks = (k + 127) / 128;
  const int64_t cells =
      g.block_rows == 1 ? k_blocks * rows : (rows + 127) / 128 * ((k_blocks + 3) / 4 * 4);
  return align_up(static_cast<size_t>(cells) * 4);
}

// The path of a call: cuBLASLt's FP8 kernels where its documentation promises one, else
// (or when `emulate`) the emulation.
Route route(const Tensor& a, const Tensor& c, const GemmOptions& o, GemmDims d,
            bool emulate = false) {
  Route r;
  r.np = d.n;
  if (!is_fp8(a.dtype)) return r;
  r.fp8 = true;
  const ScaleGrid ga = o.a_grid, gb = o.b_grid;
  if (emulate || emulation_forced()) {
    r.path = Fp8Path::emulated;
  } else if (ga.block_cols == 0) {  // validation: B splits K exactly as A does
    r.path =
        per_tensor(ga) && per_tensor(gb) && !ga.e8m0 && !gb.e8m0 ? Fp8Path::tensor : Fp8Path::outer;
  } else if (cublas_block_grid(ga) && cublas_block_grid(gb) &&
             !(ga.block_rows == 128 && gb.block_rows == 128) && d.m % 4 == 0) {
    // cuBLAS documentation (narrow precision, 128-element 1D and 128x128 2D block scaling,
    // compute capability 9.0): VEC128 x VEC128, VEC128 x BLK128x128 and BLK128x128 x VEC128
    // are supported, BLK128x128 on both operands is not, and M and N must be multiples of 4
    // (N is, once padded to 16).
    r.path = Fp8Path::block;
  } else {
    r.path = Fp8Path::emulated;
  }
  if (r.path != Fp8Path::emulated && d.n % 16 != 0) {
    r.np = (d.n + 15) / 16 * 16;
    r.b_pad_bytes = align_up(static_cast<size_t>(r.np * d.k));
    r.d_bytes = align_up(static_cast<size_t>(d.m * r.np) * dtype_size(c.dtype));
  }
  switch (r.path) {
    case Fp8Path::tensor:
      // cuBLASLt 13.1 on an H100 refused, at the call, every tensorwide FP8 GEMM whose scale
      // sat 4 bytes past a 16-byte boundary (seen 2026-11-24; undocumented): such a scale is
      // copied into a workspace slot, which is aligned.
      if (!o.a_scale_inv.empty() && !aligned16(o.a_scale_inv.data)) r.a_scale_bytes = kAlign;
      if (!o.b_scale_inv.empty() && !aligned16(o.b_scale_inv.data)) r.b_scale_bytes = kAlign;
      break;
    case Fp8Path::outer:
      r.a_scale_bytes = align_up(static_cast<size_t>(d.m) * 4);
      r.b_scale_bytes = align_up(static_cast<size_t>(r.np) * 4);
      break;
    case Fp8Path::block:
      r.a_scale_bytes = block_scale_bytes(ga, d.m, d.k);
      r.b_scale_bytes = block_scale_bytes(gb, r.np, d.k);
      break;
    case Fp8Path::emulated: {
      // FP8 value x 2^e is exact in bf16 (barring under/overflow of bf16's range);
      // anything else times an f32 scale needs f32.
      r.emulate_bf16 = (o.a_scale_inv.empty() || ga.e8m0) && (o.b_scale_inv.empty() || gb.e8m0);
      const size_t elt = r.emulate_bf16 ? 2 : 4;
      r.a_bytes = align_up(static_cast<size_t>(d.m * d.k) * elt);
      r.b_bytes = align_up(static_cast<size_t>(d.n * d.k) * elt);
      if (!r.emulate_bf16 && c.dtype == DType::bf16)
        r.acc_bytes = align_up(static_cast<size_t>(d.m * d.n) * 4);
      break;
    }
  }
  return r;
}

// The caller's workspace cut into the route's regions; the rest (up to 32 MiB) is cuBLASLt's.
struct Scratch {
  char *a_scale, *b_scale, *a, *b, *acc, *b_pad, *d;
  void* cublas;
  size_t cublas_bytes;
};

Scratch carve(const Tensor& workspace, const Route& r) {
  const size_t have = workspace.empty() ? 0 : workspace.nbytes();
  const auto base = reinterpret_cast<uintptr_t>(workspace.data);
  const size_t slack = workspace.empty() ? 0 : align_up(base) - base;
  const size_t need = r.scratch_bytes();
  OCTET_CHECK(need == 0 || have >= slack + need, kOp, "this CUDA GEMM needs a workspace of ",
              kAlign + need, " bytes or more (", kAlign + need + kCublasWorkspaceBytes,
              " for the fastest algorithms), got ", have, "; size it with gemm_workspace_bytes");
  char* p = workspace.empty() ? nullptr : static_cast<char*>(workspace.data) + slack;
  auto take = [&p](size_t bytes) {
    char* region = bytes == 0 ? nullptr : p;
    p += bytes;
    return region;
  };
  Scratch s{};
  s.a_scale = take(r.a_scale_bytes);
  s.b_scale = take(r.b_scale_bytes);
  s.a = take(r.a_bytes);
  s.b = take(r.b_bytes);
  s.acc = take(r.acc_bytes);
  s.b_pad = take(r.b_pad_bytes);
  s.d = take(r.d_bytes);
  const size_t left = have > slack + need ? have - slack - need : 0;
  s.cublas_bytes = std::min(kCublasWorkspaceBytes, left / kAlign * kAlign);
  s.cublas = s.cublas_bytes > 0 ? p : nullptr;
  return s;
}

// ---- the FP8 paths ------------------------------------------------------------------

// Built field by field over zeroed bytes: the struct is a kernel argument, and its padding
// (after grid.e8m0) would otherwise carry stale stack bytes, which the emulated device's
// argument check reads as a host address.
ScaleView scale_view(const Tensor& s, ScaleGrid grid, int64_t rows, int64_t k) {
  ScaleView v;
  std::memset(static_cast<void*>(&v), 0, sizeof v);  // trivially copyable: bytes are the value
  v.data = s.empty() ? nullptr : s.data;
  v.grid.block_rows = grid.block_rows;
  v.grid.block_cols = grid.block_cols;
  v.grid.e8m0 = grid.e8m0;
  v.rows = rows;
  v.k = k;
  return v;
}

void check_fp8_alignment(const char* name, const Tensor& t) {
  const auto offset = reinterpret_cast<uintptr_t>(t.data) % 16;
  OCTET_CHECK(offset == 0, kOp, "FP8 GEMMs on CUDA need ", name,
              " 16-byte aligned (cuBLASLt's FP8 kernels load 16 bytes at a time), but ", t.str(),
              " starts ", offset,
              " bytes past a 16-byte boundary; allocate it on its own or at "
              "a 16-byte aligned offset");
}

void gemm_emulated(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o,
                   GemmDims d, const Route& r, const Scratch& s) {
  const DType wide = r.emulate_bf16 ? DType::bf16 : DType::f32;
  launch_dequantize_operand(a.as<const uint8_t>(), a.dtype == DType::e5m2,
                            scale_view(o.a_scale_inv, o.a_grid, d.m, d.k), s.a, r.emulate_bf16);
  launch_dequantize_operand(b.as<const uint8_t>(), b.dtype == DType::e5m2,
                            scale_view(o.b_scale_inv, o.b_grid, d.n, d.k), s.b, r.emulate_bf16);
  LtCall call;
  call.a = s.a;
  call.b = s.b;
  call.a_type = call.b_type = wide;
  call.m = d.m;
  call.n = d.n;
  call.k = d.k;
  call.ldc = d.n;
  call.alpha = o.alpha;
  call.workspace = s.cublas;
  call.workspace_bytes = s.cublas_bytes;
  if (s.acc == nullptr) {  // cuBLASLt writes C directly (f32 x f32 -> f32, bf16 x bf16 -> any)
    call.c = c.data;
    call.c_type = c.dtype;
    call.beta = o.beta;
    static_cast<void>(lt_matmul(call, a.device.index));  // unscaled: runs or throws
    return;
  }
  // f32 operands and a bf16 C, which cuBLASLt does not combine: acc = alpha A Bᵀ in f32,
  // then C = acc + beta C rounded to bf16, the CPU's epilogue order.
  call.c = s.acc;
  call.c_type = DType::f32;
  static_cast<void>(lt_matmul(call, a.device.index));  // unscaled: runs or throws
  launch_store_accumulator(reinterpret_cast<const float*>(s.acc), c.data, true, o.beta, d.m * d.n);
}

// The cuBLASLt call C = alpha op(A) op(B) + beta C on the tensors themselves, N = ldc = `n` (a
// padded N on the FP8 path), with cuBLASLt's workspace from `s`; the caller adds the rest.
LtCall direct_call(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o,
                   GemmDims d, int64_t n, const Scratch& s) {
  LtCall call;
  call.a = a.data;
  call.b = b.data;
  call.c = c.data;
  call.a_type = a.dtype;
  call.b_type = b.dtype;
  call.c_type = c.dtype;
  call.m = d.m;
  call.n = n;
  call.k = d.k;
  call.ldc = n;
  call.alpha = o.alpha;
  call.beta = o.beta;
  call.workspace = s.cublas;
  call.workspace_bytes = s.cublas_bytes;
  return call;
}

void gemm_fp8(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o, GemmDims d,
              const Route& r, const Scratch& s) {
  if (r.path == Fp8Path::emulated) return gemm_emulated(a, b, c, o, d, r, s);
  const bool padded = r.np != d.n;
  check_fp8_alignment("A", a);
  if (!padded) {  // else the GEMM reads a copy of B and writes a copy of C, both aligned
    check_fp8_alignment("B", b);
    check_fp8_alignment("C", c);
  }
  LtCall call = direct_call(a, b, c, o, d, r.np, s);
  call.fast_accum = o.fast_accum;
  if (padded) {  // B [N, K] and zero rows up to np; C [M, N] in the first N columns of D [M, np]
    call.b = s.b_pad;
    call.c = s.d;
  }
  const ScaleView sa = scale_view(o.a_scale_inv, o.a_grid, d.m, d.k);
  const ScaleView sb = scale_view(o.b_scale_inv, o.b_grid, d.n, d.k);
  auto block_mode = [](const ScaleView& v) {
    return v.grid.block_rows == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                  : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  };
  switch (r.path) {
    case Fp8Path::tensor:  // a scale off a 16-byte boundary is read from its workspace copy
      call.a_mode = call.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
      call.a_scale = s.a_scale != nullptr ? s.a_scale : sa.data;
      call.b_scale = s.b_scale != nullptr ? s.b_scale : sb.data;
      break;
    case Fp8Path::outer:
      call.a_mode = call.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      call.a_scale = s.a_scale;
      call.b_scale = s.b_scale;
      break;
    case Fp8Path::block:
      call.a_mode = block_mode(sa);
      call.b_mode = block_mode(sb);
      call.a_scale = s.a_scale;
      call.b_scale = s.b_scale;
      // The block-scaled kernels promote to fp32 every 128 K anyway; PyTorch refuses fast
      // accumulation with them and so do we.
      call.fast_accum = false;
      break;
    case Fp8Path::emulated:
      break;
  }
  // Nothing is enqueued yet: a problem this cuBLASLt refuses (e.g. a scale mode it predates)
  // runs through the emulation instead, in the same workspace (gemm_workspace_bytes sizes it
  // for both paths).
  if (!lt_native(call, a.device.index)) {
    const Route emulated = route(a, c, o, d, true);
    return gemm_emulated(a, b, c, o, d, emulated, carve(o.workspace, emulated));
  }
  if (padded) {
    const size_t b_bytes = static_cast<size_t>(d.n * d.k);
    OCTET_CUDA_CHECK(kOp,
                     cudaMemcpyAsync(s.b_pad, b.data, b_bytes, cudaMemcpyDeviceToDevice, stream()));
    OCTET_CUDA_CHECK(kOp, cudaMemsetAsync(s.b_pad + b_bytes, 0,
                                          static_cast<size_t>((r.np - d.n) * d.k), stream()));
    if (o.beta != 0.0f) {
      const size_t row = static_cast<size_t>(d.n) * dtype_size(c.dtype);
      OCTET_CUDA_CHECK(kOp, cudaMemcpy2DAsync(s.d, r.np * dtype_size(c.dtype), c.data, row, row,
                                              d.m, cudaMemcpyDeviceToDevice, stream()));
    }
  }
  if (r.path == Fp8Path::tensor) {
    for (const auto& [slot, scale] : {std::pair{s.a_scale, sa.data}, std::pair{s.b_scale, sb.data}})
      if (slot != nullptr)
        OCTET_CUDA_CHECK(kOp, cudaMemcpyAsync(slot, scale, 4, cudaMemcpyDeviceToDevice, stream()));
  } else if (r.path == Fp8Path::outer) {
    launch_row_scales(sa, d.m, reinterpret_cast<float*>(s.a_scale));
    launch_row_scales(sb, r.np, reinterpret_cast<float*>(s.b_scale));
  } else if (r.path == Fp8Path::block) {
    auto relayout = [](const ScaleView& v, int64_t rows, char* out) {
      if (v.grid.block_rows == 1)
        launch_vec128_scales(v, rows, reinterpret_cast<float*>(out));
      else  // padding rows share the last row block, which exists (np <= that block's end)
        launch_blk128_scales(v, reinterpret_cast<float*>(out));
    };
    relayout(sa, d.m, s.a_scale);
    relayout(sb, r.np, s.b_scale);
  }
  if (!lt_matmul(call, a.device.index)) {  // refused at the call: emulated, now and from now on
    const Route emulated = route(a, c, o, d, true);
    return gemm_emulated(a, b, c, o, d, emulated, carve(o.workspace, emulated));
  }
  if (padded) {
    const size_t row = static_cast<size_t>(d.n) * dtype_size(c.dtype);
    OCTET_CUDA_CHECK(kOp, cudaMemcpy2DAsync(c.data, row, s.d, r.np * dtype_size(c.dtype), row, d.m,
                                            cudaMemcpyDeviceToDevice, stream()));
  }
}

}  // namespace

// A native FP8 GEMM may turn out emulated (cuBLASLt refuses it at its first call), so its
// workspace covers both paths.
size_t gemm_workspace_bytes(const Tensor& a, const Tensor&, const Tensor& c,
                            const GemmOptions& options, GemmDims dims) {
  const Route r = route(a, c, options, dims);
  size_t scratch = r.scratch_bytes();
  if (r.fp8 && r.path != Fp8Path::emulated)
    scratch = std::max(scratch, route(a, c, options, dims, true).scratch_bytes());
  return kAlign + scratch + kCublasWorkspaceBytes;
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o, GemmDims d) {
  OCTET_CUDA_CHECK(kOp, cudaSetDevice(a.device.index));
  if (d.k == 0) return launch_scale_c(c.data, c.dtype == DType::bf16, o.beta, d.m * d.n);
  const Route r = route(a, c, o, d);
  const Scratch s = carve(o.workspace, r);
  if (r.fp8) return gemm_fp8(a, b, c, o, d, r, s);
  LtCall call = direct_call(a, b, c, o, d, d.n, s);
  call.trans_a = o.trans_a;
  call.trans_b = o.trans_b;
  static_cast<void>(lt_matmul(call, a.device.index));  // unscaled: runs or throws
}

size_t gemm_plan_count() {
  return lt_plan_count();
}

}  // namespace octet::kernels::cuda
