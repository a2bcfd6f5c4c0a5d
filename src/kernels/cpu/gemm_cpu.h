// kernels/cpu/gemm_cpu.h: the engines behind cpu::gemm (oneDNN's matmul, natively or on f32
// copies, and the portable reference GEMM) and the switch between them. Internal to kernels/
// (and tests).
// defines: cpu::Matmul, cpu::GemmImpl, gemm_impl, set_gemm_impl, gemm_impl_name,
//          gemm_reference, run_matmul, matmul_operand_dtype, matmul_staging_floats,
//          onednn_available,
//          onednn_bf16_available, onednn_gemm, onednn_gemm_widened, Fp8GemmPath,
//          fp8_gemm_path, set_fp8_gemm_path, Fp8FusedKind, fp8_gemm_fused_kind, Fp8Widen,
//          fp8_to_bf16, fp8_to_f32, Fp8BlockGemm, fp8_block_gemm_available,
//          fp8_block_gemm_uses_amx, fp8_block_gemm,
//          kAlign, align_up, kParallelMin
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/backends.h"

namespace octet::kernels::cpu {

// The FP8 GEMMs' workspace regions start on cache lines.
inline constexpr size_t kAlign = 64;
inline size_t align_up(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// Element-wise FP8 passes (the quantize, the GEMMs' widening and epilogues) over more elements
// than this run over the OpenMP team, smaller ones on the calling thread. Waking a team that spins
// between regions costs about 2 us on a 2-vCPU guest, an encode or widening of 8192 values about
// 4-5 (at `tiny` 8 x 64, whose operands are 512 x 64, a threshold of 65536 left each of them to
// one thread while the other spun: docs/perf/cpu-step.md, twenty-third session).
inline constexpr int64_t kParallelMin = int64_t{1} << 13;

// One f32 x f32 or bf16 x bf16 GEMM on plain row-major CPU memory, as every
// engine takes it: C [m, n] = alpha * op(A) op(B) + beta * C with fp32
// accumulation. op(A) is [m, k]: A is stored [m, k], or [k, m] when trans_a.
// op(B) is [k, n]: B is stored [k, n], or [n, k] when trans_b. C is f32 or bf16
// (bf16 from f32 operands on the reference and onednn-f32 engines only: the FP8 GEMMs widen
// into f32 for onednn-f32). beta == 0 means C is only written, never read.
struct Matmul {
  const void* a;
  const void* b;
  void* c;
  DType ab_dtype;  // f32 or bf16
  DType c_dtype;   // f32 or bf16
  int64_t m, n, k;
  bool trans_a, trans_b;
  float alpha, beta;
  // The onednn-f32 engine's f32 copies: matmul_staging_floats(...) floats, from the caller's
  // workspace (kernels never allocate); nullptr where that is 0.
  float* staging = nullptr;
};

enum class GemmImpl : uint8_t {
  onednn,      // oneDNN's matmul primitive, bf16 natively (where oneDNN has bf16 on this CPU)
  onednn_f32,  // oneDNN's f32 matmul, bf16 operands widened to f32 first (exact)
  reference,   // gemm_ref.cpp: cache-blocked, OpenMP, portable
};

// The engine cpu::gemm uses now. On first use it is taken from the environment,
// OCTET_CPU_GEMM=onednn|onednn-f32|reference, and otherwise is oneDNN where the build has it:
// `onednn` where oneDNN multiplies bf16 on this CPU and that is not slower than f32 (isa.h's
// f32_fma_outruns_bf16_dot), else `onednn-f32`.
GemmImpl gemm_impl();
// Chooses the engine for all later GEMMs (tests and `octet bench` use it); throws
// octet::Error when oneDNN is asked for and this build has none, or `onednn` on a CPU where
// oneDNN has no bf16 matmul.
void set_gemm_impl(GemmImpl impl);
const char* gemm_impl_name(GemmImpl impl);  // "onednn", "onednn-f32", "reference"

// The portable engine (gemm_ref.cpp). Never allocates.
void gemm_reference(const Matmul& mm);

// Runs mm on the engine gemm_impl() names (the reference for K = 0, which oneDNN refuses).
void run_matmul(const Matmul& mm);
// The dtype FP8 GEMMs widen their operands into for the engine now: f32 for onednn-f32 (which
// would widen bf16 once more), bf16 for the others. Both hold every FP8 value exactly.
DType matmul_operand_dtype();
// Floats of staging the engine now needs for a Matmul of these dtypes and sizes: on onednn-f32,
// f32 copies of bf16 A and B (m k + k n) and an f32 C for a bf16 one (m n); 0 elsewhere.
int64_t matmul_staging_floats(DType ab_dtype, DType c_dtype, int64_t m, int64_t n, int64_t k);

// FP8 GEMMs (gemm_fp8_cpu.cpp): widen to bf16 (or f32: matmul_operand_dtype) in the workspace,
// scale in fp32. The workspace depends on the engine chosen when it is asked for.
size_t fp8_gemm_workspace_bytes(GemmDims dims, const GemmOptions& options, DType c_dtype);
void fp8_gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options,
              GemmDims dims);

// How FP8 GEMMs run: `fused` (the default) as one full-K GEMM with the scales folded into
// the operands or applied after it, never in the engine's alpha (gemm_fp8_fused_cpu.cpp),
// falling back to `slices` where the scales' range does not allow it; `slices`: the reference
// path, one GEMM per K slice with the scales applied in fp32 after each, or per tensor one
// GEMM with the scales in the engine's alpha. On first use taken from
// OCTET_CPU_FP8_GEMM=fused|slices.
enum class Fp8GemmPath : uint8_t { fused, slices };
Fp8GemmPath fp8_gemm_path();
void set_fp8_gemm_path(Fp8GemmPath path);

// The fused path (gemm_fp8_fused_cpu.cpp): its workspace; which of its ways these operands
// take (none: their scales' range does not allow it); and the GEMM, which returns false
// without touching C where the kind is none (unless the block micro-kernel below takes
// finite scales that split K: fp8_block_gemm_available()).
// Widens FP8 codes into their bf16 encodings or f32 values (both exact), vectorised where the
// CPU allows: made once per kernel call (choosing the loop reads OCTET_CPU_ISA, a getenv that
// cost 0.5% of an fp8 step when it ran per row), then called per row, out[i] = value(in[i]).
// f32 for the engines that multiply f32 (matmul_operand_dtype()).
template <typename Out>
struct Fp8Widen {
  void (*loop)(const uint8_t*, Out*, int64_t, const float*, float, bool);
  const float* table;
  bool e4m3;
  void operator()(const uint8_t* in, Out* out, int64_t n) const {
    loop(in, out, n, table, 1.0f, e4m3);
  }
};
using Fp8ToBf16 = Fp8Widen<uint16_t>;
using Fp8ToF32 = Fp8Widen<float>;
Fp8ToBf16 fp8_to_bf16(DType dtype);
// |code| -> the bf16 bits of its value (128 entries; NaNs 0x7FC0), what fp8_to_bf16 looks up.
const uint16_t* fp8_bf16_table(DType dtype);
Fp8ToF32 fp8_to_f32(DType dtype);
// folded: power-of-two scales folded into the widened operands (bf16, or f32 on onednn-f32).
enum class Fp8FusedKind : uint8_t { none, folded, row_epilogue, scaled_f32 };
size_t fp8_gemm_fused_workspace_bytes(GemmDims dims, const GemmOptions& options, DType c_dtype);
Fp8FusedKind fp8_gemm_fused_kind(const Tensor& a, const Tensor& b, const GemmOptions& options,
                                 GemmDims dims);
bool fp8_gemm_fused(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options,
                    GemmDims dims);
// kernels::fp8_gemm_reads_k_first on the CPU: where the fused path's block micro-kernel takes
// operands of `grid` (its scales not powers of two) stored K-first.
bool fp8_gemm_reads_k_first(ScaleGrid grid);

// The fused path's way for f32 scales that split K on AVX512_BF16 (gemm_fp8_block_cpu.cpp):
// C [m, n] = alpha * sum_s a_scales[i, s] b_scales[j, s] sum_{k in slice s} a_ik b_jk
// + beta * C, the codes' products summed per slice in fp32 by vdpbf16ps, or by AMX's
// tdpbf16ps where fp8_block_gemm_uses_amx.
struct Fp8BlockGemm {
  const uint8_t* a;  // [m, k] FP8 codes
  DType a_dtype;
  const uint8_t* b;  // [n, k] FP8 codes
  DType b_dtype;
  int64_t m, n, k;
  int64_t slice;          // K columns per scale (even); slices = ceil(k / slice)
  const float* a_scales;  // [m, slices]
  const float* b_scales;  // [n, slices]
  void* c;                // [m, n], f32 or bf16
  DType c_dtype;
  float alpha, beta;  // beta == 0: C only written
  bool a_km = false;  // a stored [k, m] (GemmOptions::trans_a); a_scales as above
  bool b_kn = false;  // b stored [k, n] (GemmOptions::trans_b false); b_scales as above
  // Multiply as f32 FMAs rather than vdpbf16ps, with the same bits (the AVX-512 kernel; AMX's
  // ignores it): the workspace sized with f32 true. fp8_block_gemm_prefers_f32 says when.
  bool f32 = false;
};
// Whether this CPU has AVX512_BF16 and OCTET_CPU_ISA (read per call) allows AVX-512.
bool fp8_block_gemm_available();
// Whether a call with this slice runs on AMX: the CPU has AMX-BF16, OCTET_CPU_ISA is unset or
// amx, and the slice is a multiple of 32 (AMX's K step). Implies fp8_block_gemm_available().
bool fp8_block_gemm_uses_amx(int64_t slice);
// Whether the AVX-512 kernel should multiply as f32 (Fp8BlockGemm::f32) now: where the engine
// multiplies bf16 as f32 (onednn-f32, the default where f32_fma_outruns_bf16_dot), because
// there f32 FMAs make more products a cycle than vdpbf16ps.
bool fp8_block_gemm_prefers_f32();
size_t fp8_block_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, int64_t slice, bool f32);
// Needs fp8_block_gemm_available(); never allocates (workspace: the size above).
void fp8_block_gemm(const Fp8BlockGemm& gemm, void* workspace);

// bf16 GEMMs shaped as the weight gradient, dW = dyᵀ x: C [m, n] = alpha Aᵀ B + beta C with A
// bf16 stored [k, m] and B bf16 stored [k, n], on the AMX kernel of gemm_fp8_block_cpu.cpp with
// unit scales (A transposed by 32 x 32 words as it is copied, B packed by pairs of rows):
// products of bf16 exact in fp32 and summed there, as oneDNN's are, in another order.
// The same kernel takes the FP8 GEMMs' folded operands (MX), bf16 A [m, k] and B [n, k] that the
// caller widens into the workspace where bf16_amx_operands says, a and b then null.
struct Bf16AmxGemm {
  const uint16_t* a;  // [k, m], or null: A [m, k] in the workspace
  const uint16_t* b;  // [k, n], or null: B [n, k] in the workspace
  int64_t m, n, k;
  void* c;  // [m, n], f32 or bf16
  DType c_dtype;
  float alpha, beta;  // beta == 0: C only written
};
// Whether a call of this shape takes it on this CPU: AMX usable (fp8_block_gemm_uses_amx) and
// A the larger operand (m > n), where it beats oneDNN 2.6's brgemm (docs/perf/cpu-step.md,
// twenty-first session); and the size its workspace needs where the CPU has AMX (0 elsewhere).
bool bf16_amx_gemm_takes(int64_t m, int64_t n, int64_t k);
size_t bf16_amx_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k);
// Where A's rows (row stride lda) and B's (ldb) go in the workspace for a call with a and b null.
struct Bf16AmxOperands {
  uint16_t* a;
  int64_t lda;
  uint16_t* b;
  int64_t ldb;
};
Bf16AmxOperands bf16_amx_operands(int64_t m, int64_t n, int64_t k, void* workspace);
// Needs bf16_amx_gemm_takes; never allocates.
void bf16_amx_gemm(const Bf16AmxGemm& gemm, void* workspace);

// oneDNN (gemm_onednn.cpp, or gemm_noonednn.cpp where the build has none).
bool onednn_available();
// Whether oneDNN runs bf16 matmuls on this CPU: oneDNN 2.x does only with AVX-512 (a Zen 3
// or Haswell-to-Skylake client CPU has AVX2 alone). Asked of oneDNN once, so that its
// ONEDNN_MAX_CPU_ISA counts.
bool onednn_bf16_available();
// Runs mm with oneDNN; throws octet::Error when not available.
void onednn_gemm(const Matmul& mm);
// The onednn_f32 engine (gemm_cpu.cpp): bf16 A and B widened to f32 (exact) into mm.staging,
// oneDNN's f32 matmul with fp32 accumulation, a bf16 C computed in f32 there and rounded once at
// the end (as oneDNN rounds it): the same contract as the bf16 matmul.
void onednn_gemm_widened(const Matmul& mm);

}  // namespace octet::kernels::cpu
