// kernels/cpu/gemm_cpu.cpp: the CPU GEMM: f32 and bf16 go straight to an engine
// (oneDNN or the reference); FP8 operands are first widened exactly to bf16 in
// the caller's workspace, then multiplied by the bf16 GEMM.
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

constexpr size_t kAlign = 64;
size_t align_up(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// Workspace layout for FP8: A as bf16 [m, k], then B as bf16 [n, k], each
// starting on a 64-byte boundary. The first kAlign bytes are slack so that any
// workspace pointer (a view at an odd offset into an arena) can be aligned.
size_t fp8_workspace_bytes(GemmDims d) {
  return kAlign + align_up(static_cast<size_t>(d.m * d.k) * 2) +
         align_up(static_cast<size_t>(d.n * d.k) * 2);
}

// Every E4M3 and E5M2 value is a bf16 value (at most 3 mantissa bits, exponents
// well inside bf16's range), so the exact f32 decode ends in 16 zero bits and
// its upper half is the bf16 encoding; NaN stays NaN, E5M2's infinities stay infinite.
struct Fp8ToBf16 {
  uint16_t e4m3[256];
  uint16_t e5m2[256];
};

const Fp8ToBf16& fp8_to_bf16_tables() {
  static const Fp8ToBf16 tables = [] {
    Fp8ToBf16 t{};
    for (int v = 0; v < 256; ++v) {
      t.e4m3[v] = static_cast<uint16_t>(f32_bits(e4m3_to_f32(static_cast<uint8_t>(v))) >> 16);
      t.e5m2[v] = static_cast<uint16_t>(f32_bits(e5m2_to_f32(static_cast<uint8_t>(v))) >> 16);
    }
    return t;
  }();
  return tables;
}

void widen_fp8(const uint8_t* src, DType dtype, uint16_t* dst, int64_t count) {
  const Fp8ToBf16& t = fp8_to_bf16_tables();
  const uint16_t* table = dtype == DType::e4m3 ? t.e4m3 : t.e5m2;
  // Split into cache-sized chunks; below ~64 Ki elements one thread is faster.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(count, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) dst[i] = table[src[i]];
  }
}

constexpr int kImplUnset = -1;
std::atomic<int> g_impl{kImplUnset};

GemmImpl impl_from_environment() {
  const char* env = std::getenv("OCTET_CPU_GEMM");
  const std::string_view name = env ? env : "";
  if (name.empty()) return onednn_available() ? GemmImpl::onednn : GemmImpl::reference;
  if (name == "reference") return GemmImpl::reference;
  OCTET_CHECK(name == "onednn", "gemm", "OCTET_CPU_GEMM='", name,
              "' is not an engine; use onednn or reference (or leave it unset)");
  OCTET_CHECK(onednn_available(), "gemm",
              "OCTET_CPU_GEMM=onednn but this octet was built without oneDNN; install "
              "libdnnl-dev and reconfigure, or use OCTET_CPU_GEMM=reference");
  return GemmImpl::onednn;
}

void run(const Matmul& mm) {
  // oneDNN refuses empty reductions; K = 0 gives C = beta * C, which the reference does.
  if (gemm_impl() == GemmImpl::onednn && mm.k > 0) return onednn_gemm(mm);
  gemm_reference(mm);
}

}  // namespace

GemmImpl gemm_impl() {
  int impl = g_impl.load(std::memory_order_relaxed);
  if (impl == kImplUnset) {
    impl = static_cast<int>(impl_from_environment());
    g_impl.store(impl, std::memory_order_relaxed);
  }
  return static_cast<GemmImpl>(impl);
}

void set_gemm_impl(GemmImpl impl) {
  OCTET_CHECK(impl != GemmImpl::onednn || onednn_available(), "gemm",
              "the oneDNN engine was asked for but this octet was built without oneDNN");
  g_impl.store(static_cast<int>(impl), std::memory_order_relaxed);
}

const char* gemm_impl_name(GemmImpl impl) {
  return impl == GemmImpl::onednn ? "onednn" : "reference";
}

size_t gemm_workspace_bytes(const Tensor& a, const Tensor&, const Tensor&, const GemmOptions&,
                            GemmDims dims) {
  return is_fp8(a.dtype) ? fp8_workspace_bytes(dims) : 0;
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o, GemmDims dims) {
  Matmul mm{a.data, b.data, c.data,    a.dtype,   c.dtype, dims.m,
            dims.n, dims.k, o.trans_a, o.trans_b, o.alpha, o.beta};
  if (is_fp8(a.dtype)) {
    const size_t needed = fp8_workspace_bytes(dims);
    const size_t have = o.workspace.empty() ? 0 : o.workspace.nbytes();
    OCTET_CHECK(have >= needed, "gemm", "FP8 on the CPU needs a workspace of ", needed,
                " bytes (got ", have, "); size it with gemm_workspace_bytes");
    const auto base = reinterpret_cast<uintptr_t>(o.workspace.data);
    auto* a16 = reinterpret_cast<uint16_t*>(align_up(base));
    auto* b16 = reinterpret_cast<uint16_t*>(align_up(base) +
                                            align_up(static_cast<size_t>(dims.m * dims.k) * 2));
    widen_fp8(a.as<const uint8_t>(), a.dtype, a16, dims.m * dims.k);
    widen_fp8(b.as<const uint8_t>(), b.dtype, b16, dims.n * dims.k);
    // The scale factors multiply the fp32 accumulator together with alpha (in
    // fp32, like the GPU's epilogue); validate() guaranteed K-major operands.
    const float a_scale_inv = o.a_scale_inv ? *o.a_scale_inv : 1.0f;
    const float b_scale_inv = o.b_scale_inv ? *o.b_scale_inv : 1.0f;
    mm.a = a16;
    mm.b = b16;
    mm.ab_dtype = DType::bf16;
    mm.alpha = o.alpha * a_scale_inv * b_scale_inv;
  }
  run(mm);
}

}  // namespace octet::kernels::cpu
