// kernels/cuda/cublaslt.cpp: cuBLASLt matmuls with cached plans (see cublaslt.h).
//
// Row-major C [m, n] = op(A) op(B) is column-major Cᵀ [n, m] = op(B)ᵀ op(A)ᵀ, so
// cuBLASLt's A is our B, its B our A, its m our n and its n our m; FP8's required "TN"
// (cuBLASLt's A transposed, its B not) is our K-major layout.
#include "kernels/cuda/cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "kernels/cuda/check.h"

namespace octet::kernels::cuda {
namespace {

constexpr const char* kGemmOp = "gemm";

#define OCTET_CUBLASLT_CHECK(expr, ...)                                                     \
  do {                                                                                      \
    const cublasStatus_t octet_lt_status_ = (expr);                                         \
    OCTET_CHECK(octet_lt_status_ == CUBLAS_STATUS_SUCCESS, kGemmOp, #expr,                  \
                " failed: ", cublasLtGetStatusName(octet_lt_status_), " (",                 \
                cublasLtGetStatusString(octet_lt_status_), ")" __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::e4m3:
      return CUDA_R_8F_E4M3;
    case DType::e5m2:
      return CUDA_R_8F_E5M2;
    default:
      OCTET_FAIL(kGemmOp, "no cuBLASLt type for ", dtype_name(t));
  }
}

// Largest power of two (up to cuBLASLt's default 256) dividing the address.
uint32_t alignment_of(const void* p) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && x % a != 0) a /= 2;
  return a;
}

// Everything the heuristic's choice depends on.
struct PlanKey {
  int device;
  int64_t m, n, k, ldc;
  DType a_type, b_type, c_type;
  int32_t a_mode, b_mode;
  bool trans_a, trans_b, fast_accum, beta_nonzero;
  uint32_t align_a, align_b, align_c;
  size_t workspace_bytes;
  friend bool operator==(const PlanKey&, const PlanKey&) = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = 0;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001B3ull + (h >> 29); };
    mix(static_cast<uint64_t>(key.device));
    mix(static_cast<uint64_t>(key.m));
    mix(static_cast<uint64_t>(key.n));
    mix(static_cast<uint64_t>(key.k));
    mix(static_cast<uint64_t>(key.ldc));
    mix(static_cast<uint64_t>(key.a_type) | static_cast<uint64_t>(key.b_type) << 8 |
        static_cast<uint64_t>(key.c_type) << 16);
    mix(static_cast<uint64_t>(static_cast<uint32_t>(key.a_mode)) << 32 |
        static_cast<uint32_t>(key.b_mode));
    mix(static_cast<uint64_t>(key.trans_a) | key.trans_b << 1 | key.fast_accum << 2 |
        key.beta_nonzero << 3);
    mix(static_cast<uint64_t>(key.align_a) | static_cast<uint64_t>(key.align_b) << 16 |
        static_cast<uint64_t>(key.align_c) << 32);
    mix(key.workspace_bytes);
    return h;
  }
};

const char* scale_mode_name(int32_t mode) {
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F:
      return "SCALAR_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
      return "OUTER_VEC_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
      return "VEC128_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
      return "BLK128x128_32F";
    default:
      return "another scale mode";
  }
}

std::string describe(const PlanKey& key) {
  std::ostringstream os;
  os << dtype_name(key.a_type) << " x " << dtype_name(key.b_type) << " -> "
     << dtype_name(key.c_type) << ", M=" << key.m << " N=" << key.n << " K=" << key.k
     << " ldc=" << key.ldc << ", trans_a=" << key.trans_a << " trans_b=" << key.trans_b;
  if (key.a_mode != kUnscaled)
    os << ", scales A " << scale_mode_name(key.a_mode) << " B " << scale_mode_name(key.b_mode)
       << ", fast_accum " << key.fast_accum;
  os << ", beta " << (key.beta_nonzero ? "!= 0" : "0") << ", alignments " << key.align_a << "/"
     << key.align_b << "/" << key.align_c << " bytes, workspace " << key.workspace_bytes;
  return os.str();
}

// The matmul descriptor, the three layouts (cuBLASLt's A = our B, its B = our A, and
// C = D) and the algorithm the heuristic chose, for one PlanKey; or, for a scaled FP8 problem
// cuBLASLt has no algorithm for, the decision to emulate it (`emulate`, nothing else set).
struct Plan {
  bool emulate = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (lt_c != nullptr) cublasLtMatrixLayoutDestroy(lt_c);
    if (lt_b != nullptr) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a != nullptr) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { OCTET_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, T value) {
    OCTET_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attribute, &value, sizeof value));
  }
};

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, T value) {
  OCTET_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

// One per device, made on first use (with that device current) and never destroyed: a
// destructor at exit could run after the CUDA runtime has shut down.
cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  // Never destroyed either (so the handles stay reachable until the process ends).
  static auto& handles = *new std::unordered_map<int, cublasLtHandle_t>;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(device);
  if (it == handles.end()) {
    int current = 0;  // restored: making a handle leaves the caller's device current
    OCTET_CUDA_CHECK(kGemmOp, cudaGetDevice(&current));
    OCTET_CUDA_CHECK(kGemmOp, cudaSetDevice(device));
    cublasLtHandle_t h = nullptr;
    const cublasStatus_t status = cublasLtCreate(&h);
    OCTET_CUDA_CHECK(kGemmOp, cudaSetDevice(current));
    OCTET_CUBLASLT_CHECK(status, " on cuda:", device);
    it = handles.emplace(device, h).first;
  }
  return it->second;
}

void set_scale_pointers(cublasLtMatmulDesc_t desc, const LtCall& call) {
  set_attribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, call.b_scale);  // cuBLASLt's A: our B
  set_attribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, call.a_scale);
}

// Marks a scaled FP8 problem's plan as emulated from now on, and says so once.
void emulate_from_now_on(Plan& plan, const PlanKey& key, cublasStatus_t status) {
  std::fprintf(stderr,
               "octet [gemm]: cuBLASLt has no algorithm for %s (%s); this GEMM is emulated "
               "(operands dequantized, then a bf16/f32 GEMM)\n",
               describe(key).c_str(), cublasLtGetStatusName(status));
  plan.emulate = true;
}

std::unique_ptr<Plan> make_plan(const PlanKey& key, const LtCall& call) {
  auto plan = std::make_unique<Plan>();
  OCTET_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (call.a_mode != kUnscaled) {
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                  static_cast<int8_t>(call.fast_accum ? 1 : 0));
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, call.b_mode);
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, call.a_mode);
    set_scale_pointers(plan->desc, call);
  }
  // Column-major views of the row-major operands: B stored [N, K] (trans_b) is K x N with
  // ld K, read transposed; stored [K, N] it is N x K with ld N. A likewise with M.
  const uint64_t m = call.m, n = call.n, k = call.k;
  OCTET_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->lt_a, cuda_type(call.b_type),
                                                  call.trans_b ? k : n, call.trans_b ? n : k,
                                                  call.trans_b ? call.k : call.n));
  OCTET_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->lt_b, cuda_type(call.a_type),
                                                  call.trans_a ? m : k, call.trans_a ? k : m,
                                                  call.trans_a ? call.m : call.k));
  OCTET_CUBLASLT_CHECK(
      cublasLtMatrixLayoutCreate(&plan->lt_c, cuda_type(call.c_type), n, m, call.ldc));

  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(call.workspace_bytes));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(key.device), plan->desc, plan->lt_a, plan->lt_b,
                                     plan->lt_c, plan->lt_c, pref.p, 1, &result, &found);
  const bool none =
      status == CUBLAS_STATUS_NOT_SUPPORTED ||
      (status == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS));
  // A scaled FP8 problem this cuBLASLt refuses: a scale mode, fast accumulation or a beta its
  // version or the GPU does not take, or a shape (cuBLASLt 13.1 on an H100 refused tensorwide
  // problems only with our N under 16, which gemm() pads away: docs/perf/gpu-h100.md).
  // gemm() emulates it exactly instead. Said once per problem, since the plan (this decision)
  // is cached.
  if (none && call.a_mode != kUnscaled) {
    emulate_from_now_on(*plan, key, status);
    return plan;
  }
  OCTET_CHECK(status == CUBLAS_STATUS_SUCCESS, kGemmOp,
              "cublasLtMatmulAlgoGetHeuristic failed: ", cublasLtGetStatusName(status), " (",
              cublasLtGetStatusString(status), ") for ", describe(key));
  OCTET_CHECK(!none, kGemmOp, "cuBLASLt has no algorithm for ", describe(key));
  plan->algo = result.algo;
  return plan;
}

struct PlanCache {
  std::mutex mutex;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

}  // namespace

namespace {

PlanKey key_of(const LtCall& call, int device) {
  return PlanKey{device,
                 call.m,
                 call.n,
                 call.k,
                 call.ldc,
                 call.a_type,
                 call.b_type,
                 call.c_type,
                 call.a_mode,
                 call.b_mode,
                 call.trans_a,
                 call.trans_b,
                 call.fast_accum,
                 call.beta != 0.0f,
                 alignment_of(call.a),
                 alignment_of(call.b),
                 alignment_of(call.c),
                 call.workspace_bytes};
}

// The plan of `key`, made on first use. Precondition: the cache's mutex is held.
Plan& find_plan(PlanCache& cache, const PlanKey& key, const LtCall& call) {
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) it = cache.plans.emplace(key, make_plan(key, call)).first;
  return *it->second;
}

}  // namespace

bool lt_native(const LtCall& call, int device) {
  PlanCache& cache = plan_cache();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  return !find_plan(cache, key_of(call, device), call).emulate;
}

bool lt_matmul(const LtCall& call, int device) {
  const PlanKey key = key_of(call, device);
  PlanCache& cache = plan_cache();
  // Held through the enqueue: the scale pointers are attributes of the shared descriptor.
  const std::lock_guard<std::mutex> lock(cache.mutex);
  Plan& plan = find_plan(cache, key, call);
  OCTET_CHECK(!plan.emulate, kGemmOp, "cuBLASLt has no algorithm for ", describe(key),
              " (lt_native said so; the caller should have emulated it)");
  if (call.a_mode != kUnscaled) set_scale_pointers(plan.desc, call);
  // alpha and beta are read from host memory during the call (the default pointer mode).
  const cublasStatus_t status =
      cublasLtMatmul(lt_handle(device), plan.desc, &call.alpha, call.b, plan.lt_a, call.a,
                     plan.lt_b, &call.beta, call.c, plan.lt_c, call.c, plan.lt_c, &plan.algo,
                     call.workspace, call.workspace_bytes, stream());
  // The heuristic's algorithm can still be refused at the call (an H100's cuBLASLt 13.1 did so
  // for every tensorwide FP8 GEMM whose scale was not 16-byte aligned, which gemm() now avoids):
  // nothing was enqueued, so a scaled FP8 call is emulated, now and from now on.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && call.a_mode != kUnscaled) {
    emulate_from_now_on(plan, key, status);
    return false;
  }
  OCTET_CUBLASLT_CHECK(status, " for ", describe(key));
  return true;
}

size_t lt_plan_count() {
  PlanCache& cache = plan_cache();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.plans.size();
}

}  // namespace octet::kernels::cuda
