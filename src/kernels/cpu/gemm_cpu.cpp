// kernels/cpu/gemm_cpu.cpp: the CPU GEMM: f32 and bf16 go straight to an engine
// (oneDNN, oneDNN on f32 copies, or the reference); FP8 goes through gemm_fp8_cpu.cpp.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/convert.h"
#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

constexpr int kImplUnset = -1;
// Where the onednn-f32 engine's f32 copies start in a workspace: 64-byte aligned.
constexpr size_t kStagingAlign = 64;
std::atomic<int> g_impl{kImplUnset};

// Why `impl` cannot run here, or nullptr where it can.
const char* unavailable(GemmImpl impl) {
  if (impl == GemmImpl::reference) return nullptr;
  if (!onednn_available())
    return "this octet was built without oneDNN; install libdnnl-dev and reconfigure, or choose "
           "the reference engine (OCTET_CPU_GEMM=reference, octet bench gemm --impl reference)";
  if (impl == GemmImpl::onednn && !onednn_bf16_available())
    return "oneDNN has no bf16 matmul on this CPU (oneDNN 2.x needs AVX-512); choose onednn-f32, "
           "which multiplies bf16 as f32 with oneDNN and is the default here (leave "
           "OCTET_CPU_GEMM unset, or set it or --impl to onednn-f32), or reference";
  return nullptr;
}

GemmImpl impl_from_environment() {
  const char* env = std::getenv("OCTET_CPU_GEMM");
  const std::string_view name = env ? env : "";
  if (name.empty()) {
    if (!onednn_available()) return GemmImpl::reference;
    // oneDNN 2.6 multiplies bf16 with vdpbf16ps where the CPU has it, at half the products a
    // cycle of f32 FMAs on some CPUs (f32_fma_outruns_bf16_dot): there its f32 matmul on f32
    // copies is the faster way.
    return onednn_bf16_available() && !f32_fma_outruns_bf16_dot() ? GemmImpl::onednn
                                                                  : GemmImpl::onednn_f32;
  }
  for (GemmImpl impl : {GemmImpl::onednn, GemmImpl::onednn_f32, GemmImpl::reference}) {
    if (name != gemm_impl_name(impl)) continue;
    const char* why = unavailable(impl);
    OCTET_CHECK(why == nullptr, "gemm", "OCTET_CPU_GEMM=", name, " cannot run: ", why);
    return impl;
  }
  OCTET_FAIL("gemm", "OCTET_CPU_GEMM='", name,
             "' is not an engine; use onednn, onednn-f32 or reference (or leave it unset)");
}

// f32 copy of n bf16 values, and back (rounded to nearest even, as oneDNN rounds a bf16 C).
void to_f32(const void* bf16, float* f32, int64_t n) {
  convert(Tensor(const_cast<void*>(bf16), DType::bf16, {n}), Tensor(f32, DType::f32, {n}),
          Overflow::saturate);
}
void to_bf16(float* f32, void* bf16, int64_t n) {
  convert(Tensor(f32, DType::f32, {n}), Tensor(bf16, DType::bf16, {n}), Overflow::saturate);
}

// bf16 weight gradients (A stored [K, M], B stored [K, N]) on octet's AMX kernel where it beats
// oneDNN's brgemm (bf16_amx_gemm_takes: A the larger operand): over the 256-wide layer's weight
// gradients, alternating call by call, 8-20% less time than oneDNN 2.6 on two threads
// (docs/perf/cpu-step.md, twenty-first session). Only on the onednn engine (the others are the
// reference and the f32 fallback).
bool wgrad_shaped(const Tensor& a, const GemmOptions& o) {
  return a.dtype == DType::bf16 && o.trans_a && !o.trans_b;
}

}  // namespace

void onednn_gemm_widened(const Matmul& mm) {
  if (mm.ab_dtype == DType::f32 && mm.c_dtype == DType::f32) return onednn_gemm(mm);
  OCTET_CHECK(mm.staging != nullptr, "gemm", "the onednn-f32 engine needs ",
              matmul_staging_floats(mm.ab_dtype, mm.c_dtype, mm.m, mm.n, mm.k) * 4,
              " bytes of workspace for this ", dtype_name(mm.ab_dtype),
              " GEMM (f32 copies); "
              "size the workspace with gemm_workspace_bytes after choosing the engine");
  const int64_t a_n = mm.ab_dtype == DType::bf16 ? mm.m * mm.k : 0;
  const int64_t b_n = mm.ab_dtype == DType::bf16 ? mm.k * mm.n : 0;
  const int64_t c_n = mm.c_dtype == DType::bf16 ? mm.m * mm.n : 0;
  Matmul f = mm;
  float* a32 = mm.staging;
  float* b32 = a32 + a_n;
  float* c32 = b32 + b_n;
  if (mm.ab_dtype == DType::bf16) {
    // Same shapes and strides, f32 elements: the transposes stay where they were.
    to_f32(mm.a, a32, a_n);
    to_f32(mm.b, b32, b_n);
    f.a = a32;
    f.b = b32;
    f.ab_dtype = DType::f32;
  }
  if (c_n > 0) {
    if (mm.beta != 0.0f) to_f32(mm.c, c32, c_n);
    f.c = c32;
    f.c_dtype = DType::f32;
  }
  onednn_gemm(f);
  if (c_n > 0) to_bf16(c32, mm.c, c_n);
}

void run_matmul(const Matmul& mm) {
  // oneDNN refuses empty reductions; K = 0 gives C = beta * C, which the reference does.
  if (mm.k == 0) return gemm_reference(mm);
  switch (gemm_impl()) {
    case GemmImpl::onednn:
      return onednn_gemm(mm);
    case GemmImpl::onednn_f32:
      return onednn_gemm_widened(mm);
    case GemmImpl::reference:
      return gemm_reference(mm);
  }
}

DType matmul_operand_dtype() {
  return gemm_impl() == GemmImpl::onednn_f32 ? DType::f32 : DType::bf16;
}

int64_t matmul_staging_floats(DType ab_dtype, DType c_dtype, int64_t m, int64_t n, int64_t k) {
  if (gemm_impl() != GemmImpl::onednn_f32) return 0;
  return (ab_dtype == DType::bf16 ? m * k + k * n : 0) + (c_dtype == DType::bf16 ? m * n : 0);
}

GemmImpl gemm_impl() {
  int impl = g_impl.load(std::memory_order_relaxed);
  if (impl == kImplUnset) {
    impl = static_cast<int>(impl_from_environment());
    g_impl.store(impl, std::memory_order_relaxed);
  }
  return static_cast<GemmImpl>(impl);
}

void set_gemm_impl(GemmImpl impl) {
  const char* why = unavailable(impl);
  OCTET_CHECK(why == nullptr, "gemm", "the ", gemm_impl_name(impl),
              " engine was asked for but cannot run: ", why);
  g_impl.store(static_cast<int>(impl), std::memory_order_relaxed);
}

const char* gemm_impl_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::onednn:
      return "onednn";
    case GemmImpl::onednn_f32:
      return "onednn-f32";
    case GemmImpl::reference:
      break;
  }
  return "reference";
}

size_t gemm_workspace_bytes(const Tensor& a, const Tensor&, const Tensor& c, const GemmOptions& o,
                            GemmDims dims) {
  if (is_fp8(a.dtype)) return fp8_gemm_workspace_bytes(dims, o, c.dtype);
  const int64_t floats = matmul_staging_floats(a.dtype, c.dtype, dims.m, dims.n, dims.k);
  const size_t staging = floats == 0 ? 0 : kStagingAlign + static_cast<size_t>(floats) * 4;
  // Room for the AMX way whichever way runs: OCTET_CPU_ISA and the engine are read per call.
  const size_t amx = wgrad_shaped(a, o) ? bf16_amx_gemm_workspace_bytes(dims.m, dims.n, dims.k) : 0;
  return std::max(staging, amx);
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o, GemmDims dims) {
  if (is_fp8(a.dtype)) return fp8_gemm(a, b, c, o, dims);
  if (wgrad_shaped(a, o) && gemm_impl() == GemmImpl::onednn &&
      bf16_amx_gemm_takes(dims.m, dims.n, dims.k)) {
    const size_t need = bf16_amx_gemm_workspace_bytes(dims.m, dims.n, dims.k);
    // A caller that sized no workspace (gemm_workspace_bytes) keeps oneDNN's way.
    if (!o.workspace.empty() && o.workspace.nbytes() >= need) {
      return bf16_amx_gemm({a.as<const uint16_t>(), b.as<const uint16_t>(), dims.m, dims.n, dims.k,
                            c.data, c.dtype, o.alpha, o.beta},
                           o.workspace.data);
    }
  }
  Matmul mm{a.data, b.data, c.data,    a.dtype,   c.dtype, dims.m,
            dims.n, dims.k, o.trans_a, o.trans_b, o.alpha, o.beta};
  const int64_t floats = matmul_staging_floats(a.dtype, c.dtype, dims.m, dims.n, dims.k);
  if (floats > 0 && dims.k > 0) {
    const size_t need = kStagingAlign + static_cast<size_t>(floats) * 4;
    const size_t have = o.workspace.empty() ? 0 : o.workspace.nbytes();
    OCTET_CHECK(have >= need, "gemm", "a ", dtype_name(a.dtype),
                " GEMM on the onednn-f32 engine "
                "needs a workspace of ",
                need, " bytes for its f32 copies (got ", have,
                "); size it with gemm_workspace_bytes after choosing the engine");
    const auto at = reinterpret_cast<uintptr_t>(o.workspace.data);
    mm.staging = reinterpret_cast<float*>((at + kStagingAlign - 1) / kStagingAlign * kStagingAlign);
  }
  run_matmul(mm);
}

}  // namespace octet::kernels::cpu
