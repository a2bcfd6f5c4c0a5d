// kernels/gemm.h: C = alpha * op(A) op(B) (* FP8 scale_inv factors) + beta * C with
// fp32 accumulation, on the device of the operands.
// defines: GemmOptions, gemm, gemm_workspace_bytes, gemm_cuda_plan_count, cpu_gemm_engine,
//          set_cpu_gemm_engine, cpu_gemm_engine_names
#pragma once

#include <cstddef>
#include <string_view>

#include "core/tensor.h"
#include "kernels/quantize.h"

namespace octet::kernels {

// Layout and scaling of one GEMM. Tensors are row-major; the default layout is
// the one Hopper's FP8 tensor cores take ("TN" in cuBLAS' column-major terms):
// A [M, K] and B [N, K], both K-major, giving C [M, N] = A Bᵀ.
struct GemmOptions {
  bool trans_a = false;  // A is stored [K, M] (op(A) = Aᵀ); FP8: true on the CPU only
  bool trans_b = true;   // B is stored [N, K] (op(B) = Bᵀ); FP8: false on the CPU only
  float alpha = 1.0f;
  float beta = 0.0f;  // beta != 0 accumulates into C (C must then hold valid values)
  // FP8 operands only: the factors that undo each operand's quantization, on the
  // operands' device, laid out on the scale grid of the operand as stored (A [M, K],
  // B [N, K]): f32, or E8M0 for MX grids, shaped scale_grid_shape(rows, K, grid).
  // Empty means 1. Grids that split K (1x128, 128x128, MX) must split it alike in A
  // and B; the scales then apply per K slice, as Hopper's block-scaled GEMMs do:
  //   C[i,j] = alpha * sum_s (sa(i,s) * sb(j,s)) * sum_{k in slice s} a_ik b_jk + beta * C[i,j]
  // Per tensor this is C = alpha * (sa * sb) * acc + beta * C.
  Tensor a_scale_inv;
  ScaleGrid a_grid;
  Tensor b_scale_inv;
  ScaleGrid b_grid;
  // FP8 on CUDA: cuBLASLt's fast accumulation (forward GEMMs only). The CPU
  // always accumulates exactly in fp32.
  bool fast_accum = false;
  // Scratch memory (u8) of at least gemm_workspace_bytes(...) on the operands'
  // device; kernels never allocate. May be empty when that size is 0. On CUDA that size
  // includes cuBLASLt's 32 MiB; less works too (down to the part this GEMM's scale
  // re-layouts, padding or emulation need), with a choice of slower algorithms. One
  // workspace can serve every GEMM on the stream: it is scratch for the call only.
  Tensor workspace;
};

// Bytes of workspace gemm() needs for these operands (validates them too).
size_t gemm_workspace_bytes(const Tensor& a, const Tensor& b, const Tensor& c,
                            const GemmOptions& options);

// Computes C as GemmOptions describes. Accepted operand/output dtypes:
//   f32 x f32 -> f32;  bf16 x bf16 -> f32 | bf16;
//   e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3 -> f32 | bf16 (E5M2 x E5M2 is refused);
// FP8 operands must be K-major (trans_a false, trans_b true) with K a multiple of 16; on
// the CPU A may also be stored [K, M] and B [K, N] (their scales stay on the grids of A as
// [M, K] and B as [N, K]): the column copies of 1xN grids (fp8::TransposedCopy::columns_on_cpu),
// which the CPU's block kernel packs as they are.
// K-splitting scale grids must split K into the same slices for A and B.
// All tensors must be on one device. Throws octet::Error naming the problem otherwise.
// On CUDA (cuBLASLt), FP8 operands and C must also start 16-byte aligned (B and C need
// not when N % 16 != 0: the GEMM then runs on padded copies); MX grids and block grids
// cuBLASLt cannot take there are emulated exactly, so is a row- or block-scaled GEMM the
// installed cuBLASLt refuses (said once on stderr), and OCTET_CUDA_FP8_EMULATE=1 sends every FP8
// GEMM that way (kernels/cuda/gemm_cuda.cpp).
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options = {});

// What gemm() asks of two FP8 formats and K (not E5M2 x E5M2, K a multiple of 16); throws
// octet::Error otherwise. fp8::gemm asks it of widened operands too (fp8/gemm.cpp), so that
// the CPU takes what the GPU takes.
void check_fp8_formats(DType a, DType b, int64_t k);

// Whether `device`'s FP8 GEMM multiplies operands of `grid` stored K-first (A [K, M], B [K, N])
// as they are, rather than making them K-major first: the CPU's block micro-kernel takes
// per-row and 1xN f32 grids with AVX512_BF16 (not MX: its powers of two fold into widened
// operands). Elsewhere such operands still multiply, transposed first. OCTET_CPU_ISA is
// read per call.
bool fp8_gemm_reads_k_first(Device device, ScaleGrid grid);

// CUDA: how many cuBLASLt plans (descriptors and chosen algorithm, one per problem
// shape, dtypes, layout, scale mode, fast_accum, beta and alignment) this process has
// made so far; a repeated call reuses its plan. 0 in a build without CUDA.
size_t gemm_cuda_plan_count();

// The engine behind CPU GEMMs: "onednn" (oneDNN's matmul, the default where the build has
// it and oneDNN multiplies bf16 on this CPU: AVX-512), "onednn-f32" (oneDNN's f32 matmul on
// bf16 widened to f32: the default on other CPUs) or "reference" (portable,
// cache-blocked); OCTET_CPU_GEMM sets the first choice.
const char* cpu_gemm_engine();
// Chooses the CPU engine for all later GEMMs by name; throws octet::Error for another name,
// for a oneDNN engine in a build without oneDNN, or for "onednn" where it has no bf16.
void set_cpu_gemm_engine(std::string_view name);
inline constexpr const char* cpu_gemm_engine_names[] = {"onednn", "onednn-f32", "reference"};

}  // namespace octet::kernels
