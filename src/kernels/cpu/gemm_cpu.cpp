// kernels/cpu/gemm_cpu.cpp: the CPU GEMM: f32 and bf16 go straight to an engine
// (oneDNN or the reference); FP8 goes through gemm_fp8_cpu.cpp.
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

}  // namespace

void run_matmul(const Matmul& mm) {
  // oneDNN refuses empty reductions; K = 0 gives C = beta * C, which the reference does.
  if (gemm_impl() == GemmImpl::onednn && mm.k > 0) return onednn_gemm(mm);
  gemm_reference(mm);
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
  OCTET_CHECK(impl != GemmImpl::onednn || onednn_available(), "gemm",
              "the oneDNN engine was asked for but this octet was built without oneDNN");
  g_impl.store(static_cast<int>(impl), std::memory_order_relaxed);
}

const char* gemm_impl_name(GemmImpl impl) {
  return impl == GemmImpl::onednn ? "onednn" : "reference";
}

size_t gemm_workspace_bytes(const Tensor& a, const Tensor&, const Tensor&, const GemmOptions& o,
                            GemmDims dims) {
  return is_fp8(a.dtype) ? fp8_gemm_workspace_bytes(dims, o) : 0;
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& o, GemmDims dims) {
  if (is_fp8(a.dtype)) return fp8_gemm(a, b, c, o, dims);
  run_matmul({a.data, b.data, c.data, a.dtype, c.dtype, dims.m, dims.n, dims.k, o.trans_a,
              o.trans_b, o.alpha, o.beta});
}

}  // namespace octet::kernels::cpu
