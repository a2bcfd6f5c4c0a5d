// cudasim/cublaslt/matmul.cpp: the emulated cublasLtMatmulAlgoGetHeuristic and
// cublasLtMatmul: every call is checked against the documented sm_90 rules (rules.h),
// recorded in the call log (cudasim/cublaslt_log.h), and, when accepted, computed on the
// host: products accumulated in double, the scales applied as cuBLASLt defines them
// (3.1.4.1 tensorwide, 3.1.4.3 outer vector, 3.1.4.5 128-element and 128x128 blocks), the
// epilogue in f32 and D rounded to its type. FP8 products are summed as an H100's tensor cores
// were measured to sum them (13 fraction bits, truncated, promoted into fp32 every 128 K
// unless fast accumulation is on; compute() below).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "cudasim/cublaslt_log.h"
#include "objects.h"
#include "rules.h"

namespace cudasim {
namespace {

struct Log {
  std::mutex mutex;
  std::vector<LtCallRecord> calls;
  int version = 130000;
};

Log& log() {
  static Log instance;
  return instance;
}

}  // namespace

std::vector<LtCallRecord> cublaslt_calls() {
  const std::lock_guard<std::mutex> lock(log().mutex);
  return log().calls;
}

void cublaslt_clear_calls() {
  const std::lock_guard<std::mutex> lock(log().mutex);
  log().calls.clear();
}

int cublaslt_set_version(int version) {
  const std::lock_guard<std::mutex> lock(log().mutex);
  const int previous = log().version;
  log().version = version;
  return previous;
}

namespace lt {

int emulated_version() {
  const std::lock_guard<std::mutex> lock(log().mutex);
  return log().version;
}

namespace {

uint64_t alignment_of(const void* p) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  uint64_t a = 256;
  while (a > 1 && x % a != 0) a /= 2;
  return a;
}

LtCallRecord describe(LtCallKind kind, const Desc* desc, const Layout* a, const Layout* b,
                      const Layout* c, const Layout* d, const Problem& p) {
  LtCallRecord r;
  r.kind = kind;
  cudaGetDevice(&r.device);
  r.m = p.m;
  r.n = p.n;
  r.k = p.k;
  if (a != nullptr) r.a_type = a->type, r.lda = a->ld;
  if (b != nullptr) r.b_type = b->type, r.ldb = b->ld;
  if (c != nullptr) r.c_type = c->type, r.ldc = c->ld;
  if (d != nullptr) r.d_type = d->type, r.ldd = d->ld;
  if (desc != nullptr) {
    r.trans_a = static_cast<cublasOperation_t>(desc->trans_a);
    r.trans_b = static_cast<cublasOperation_t>(desc->trans_b);
    r.a_scale_mode = desc->a_mode;
    r.b_scale_mode = desc->b_mode;
    r.a_scale_set = desc->a_scale != nullptr;
    r.b_scale_set = desc->b_scale != nullptr;
    r.fast_accum = desc->fast_accum != 0;
    r.epilogue = desc->epilogue;
  }
  return r;
}

cublasStatus_t finish(LtCallRecord record, const Verdict& v) {
  record.status = v.status;
  record.reason = v.reason;
  if (!v.ok())
    std::fprintf(
        stderr, "[cudasim cuBLASLt] %s: %s (m=%lld n=%lld k=%lld): %s\n",
        record.kind == LtCallKind::heuristic ? "cublasLtMatmulAlgoGetHeuristic" : "cublasLtMatmul",
        cublasLtGetStatusName(v.status), static_cast<long long>(record.m),
        static_cast<long long>(record.n), static_cast<long long>(record.k), v.reason.c_str());
  const std::lock_guard<std::mutex> lock(log().mutex);
  log().calls.push_back(std::move(record));
  return v.status;
}

// op(X) as a dense row-per-outer-index array of doubles: out[o * k + l].
std::vector<double> widen(const void* x, const Layout& l, bool outer_is_rows, int64_t outer,
                          int64_t k) {
  std::vector<double> out(static_cast<size_t>(outer * k));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < k; ++i) {
      const int64_t row = outer_is_rows ? o : i, col = outer_is_rows ? i : o;
      out[static_cast<size_t>(o * k + i)] = load(x, l.type, row + col * l.ld);
    }
  return out;
}

// The scale of operand element (outer index o, K block `block`) in `mode`'s layout
// (3.1.4.5.1): VEC128 [L][outer] outer-major; BLK128x128 [ceil(outer/128)][L4] K-major.
double scale_at(const void* s, int32_t mode, int64_t o, int64_t block, int64_t outer, int64_t k) {
  if (s == nullptr) return 1.0;
  const auto* f = static_cast<const float*>(s);
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
      return f[o];
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
      return f[block * outer + o];
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: {
      const int64_t l4 = ((k + 127) / 128 + 3) / 4 * 4;  // L rounded up to a multiple of 4
      return f[(o / 128) * l4 + block];
    }
    default:
      return f[0];
  }
}

// Hopper's FP8 tensor cores as cuBLASLt drives them, measured on an H100 (cuBLAS 13.1,
// 2026-11-24, docs/perf/gpu-h100.md): the products (exact) are added into a sum that keeps 13
// fraction bits and truncates (256 + 256 * 2^-13 survives, 256 + 256 * 2^-14 does not), and
// cuBLASLt adds that sum into an fp32 accumulator every 128 products, or only at the end of K
// with fast accumulation. Emulated as such: the products in K order, each addition truncated to
// 13 fraction bits, promoted into fp32 every 128 K (the block modes' blocks are these 128) or
// once. The order of the additions inside a tensor core is not known; the bits kept and the
// promotion interval are measured.
double truncate_to_13_fraction_bits(double x) {
  // Clearing the low 39 of binary64's 52 fraction bits keeps 13 and truncates toward zero
  // (sign and magnitude); FP8 products and their sums are normal numbers here, far from
  // binary64's subnormals. Infinities and NaNs pass unchanged. (The same as trunc(x / ulp) * ulp
  // with ulp = 2^(exponent - 13), bit for bit, at a fraction of the cost.)
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits >> 52 & 0x7FF) == 0x7FF) return x;
  bits &= ~((uint64_t{1} << 39) - 1);
  std::memcpy(&x, &bits, sizeof bits);
  return x;
}

void compute(const Problem& p, float alpha, float beta, const void* a, const void* b, const void* c,
             void* d) {
  const Desc& desc = *p.desc;
  const int64_t m = p.m, n = p.n, k = p.k;
  // op(A)[i, l]: A stored m x k (N) or k x m (T); op(B)[l, j]: k x n (N) or n x k (T).
  const std::vector<double> wa = widen(a, *p.a, desc.trans_a == CUBLAS_OP_N, m, k);
  const std::vector<double> wb = widen(b, *p.b, desc.trans_b != CUBLAS_OP_N, n, k);
  const bool blocks = desc.a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
                      desc.a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  // FP8: the promotion interval of the tensor cores' sum (above); otherwise one sum in double.
  const int64_t block_k = p.fp8 && (blocks || desc.fast_accum == 0) ? 128 : std::max<int64_t>(k, 1);
  const double c_scale = desc.c_scale != nullptr ? *static_cast<const float*>(desc.c_scale) : 1.0;
  const double d_scale = desc.d_scale != nullptr ? *static_cast<const float*>(desc.d_scale) : 1.0;
  cudaDataType_t bias_type = p.d->type;
  if (p.fp8 && (bias_type == CUDA_R_32F || is_fp8(bias_type)))
    bias_type = p.c->type == CUDA_R_16F ? CUDA_R_16F : CUDA_R_16BF;
  float amax = 0.0f;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0.0;  // FP8: the fp32 accumulator the tensor cores' sums are promoted into
      for (int64_t start = 0, blk = 0; start < k; start += block_k, ++blk) {
        double part = 0.0;
        for (int64_t l = start; l < std::min(k, start + block_k); ++l) {
          part += wa[static_cast<size_t>(i * k + l)] * wb[static_cast<size_t>(j * k + l)];
          if (p.fp8) part = truncate_to_13_fraction_bits(part);
        }
        if (!p.fp8) {
          acc += part;
          continue;
        }
        // 3.1.4.5: each 128-block's sum times its two scales; 3.1.4.1 / 3.1.4.3: one scale
        // per row or tensor, the same for every block.
        part *= scale_at(desc.a_scale, desc.a_mode, i, blk, m, k) *
                scale_at(desc.b_scale, desc.b_mode, j, blk, n, k);
        acc = static_cast<float>(acc + part);
      }
      // The epilogue in the f32 scale type (3.3.9 SCALE_TYPE): alpha, beta, C and bias.
      float t = alpha * static_cast<float>(acc);
      if (beta != 0.0f)
        t += beta * static_cast<float>(c_scale * load(c, p.c->type, i + j * p.c->ld));
      if (desc.epilogue == CUBLASLT_EPILOGUE_BIAS)
        t += static_cast<float>(load(desc.bias, bias_type, i));
      amax = std::max(amax, std::fabs(t));
      store(d, p.d->type, i + j * p.d->ld, static_cast<float>(t * d_scale));
    }
  // 3.1.4.1: amax_D = absmax(D_temp), before scale_D.
  if (desc.amax_d != nullptr) *static_cast<float*>(desc.amax_d) = amax;
}

}  // namespace
}  // namespace lt
}  // namespace cudasim

using namespace cudasim;
using namespace cudasim::lt;

extern "C" {

size_t cublasLtGetVersion(void) {
  return static_cast<size_t>(emulated_version());
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc_handle, cublasLtMatrixLayout_t a_handle,
    cublasLtMatrixLayout_t b_handle, cublasLtMatrixLayout_t c_handle,
    cublasLtMatrixLayout_t d_handle, cublasLtMatmulPreference_t pref_handle, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  const Desc* desc = lt::desc(desc_handle);
  const Layout *a = layout(a_handle), *b = layout(b_handle), *c = layout(c_handle),
               *d = layout(d_handle);
  const Preference* pref = preference(pref_handle);
  if (returned != nullptr) *returned = 0;
  Problem p;
  Verdict v = make_problem(desc, a, b, c, d, p);
  LtCallRecord record = describe(LtCallKind::heuristic, desc, a, b, c, d, p);
  if (handle != nullptr) record.handle_device = handle->device;
  if (handle == nullptr) return finish(record, {CUBLAS_STATUS_NOT_INITIALIZED, "handle is NULL"});
  if (pref == nullptr || results == nullptr || returned == nullptr || requested < 1)
    return finish(record, {CUBLAS_STATUS_INVALID_VALUE, "preference, results or count missing"});
  record.workspace_bytes = pref->max_workspace;
  if (v.ok()) v = check_problem(p);
  if (v.ok()) v = check_alignments(p, pref->align_a, pref->align_b, pref->align_c, pref->align_d);
  if (!v.ok()) return finish(record, v);
  // One algorithm: no workspace, valid for operands aligned as the preference promised.
  cublasLtMatmulHeuristicResult_t& r = results[0];
  r = cublasLtMatmulHeuristicResult_t{};
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = std::min<uint64_t>(pref->align_a, 256);
  r.algo.data[2] = std::min<uint64_t>(pref->align_b, 256);
  r.algo.data[3] = std::min<uint64_t>(pref->align_c, 256);
  r.algo.data[4] = std::min<uint64_t>(pref->align_d, 256);
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returned = 1;
  return finish(record, v);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc_handle,
                              const void* alpha, const void* a_ptr, cublasLtMatrixLayout_t a_handle,
                              const void* b_ptr, cublasLtMatrixLayout_t b_handle, const void* beta,
                              const void* c_ptr, cublasLtMatrixLayout_t c_handle, void* d_ptr,
                              cublasLtMatrixLayout_t d_handle, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t) {
  const Desc* desc = lt::desc(desc_handle);
  const Layout *a = layout(a_handle), *b = layout(b_handle), *c = layout(c_handle),
               *d = layout(d_handle);
  Problem p;
  Verdict v = make_problem(desc, a, b, c, d, p);
  LtCallRecord record = describe(LtCallKind::matmul, desc, a, b, c, d, p);
  if (handle != nullptr) record.handle_device = handle->device;
  record.workspace_bytes = workspace_bytes;
  if (handle == nullptr) return finish(record, {CUBLAS_STATUS_NOT_INITIALIZED, "handle is NULL"});
  if (alpha == nullptr || beta == nullptr)
    return finish(record, {CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is NULL"});
  record.alpha = *static_cast<const float*>(alpha);
  record.beta = *static_cast<const float*>(beta);
  if (v.ok()) v = check_problem(p);
  const uint64_t al_a = alignment_of(a_ptr), al_b = alignment_of(b_ptr), al_c = alignment_of(c_ptr),
                 al_d = alignment_of(d_ptr);
  if (v.ok()) v = check_alignments(p, al_a, al_b, al_c, al_d);
  if (v.ok() && algo != nullptr) {
    // An algorithm chosen for better-aligned operands than these is "in conflict".
    if (algo->data[0] != kAlgoMagic)
      v = {CUBLAS_STATUS_INVALID_VALUE, "algo did not come from cublasLtMatmulAlgoGetHeuristic"};
    else if (al_a < algo->data[1] || al_b < algo->data[2] || al_c < algo->data[3] ||
             al_d < algo->data[4])
      v = {CUBLAS_STATUS_INVALID_VALUE,
           "the algorithm was chosen for operands aligned as the preference's "
           "MIN_ALIGNMENT_*_BYTES, and these pointers are less aligned"};
  }
  if (v.ok()) v = check_pointers(p, a_ptr, b_ptr, c_ptr, d_ptr, workspace, workspace_bytes);
  if (!v.ok()) return finish(record, v);
  compute(p, record.alpha, record.beta, a_ptr, b_ptr, c_ptr, d_ptr);
  return finish(record, v);
}

}  // extern "C"
