// cudasim/cublaslt/rules.h: the documented sm_90 rules a cuBLASLt matmul must satisfy,
// checked before the emulation computes anything. Each rule returns the status the real
// library answers and a reason naming the cuBLAS documentation section it comes from.
// Internal to cudasim/cublaslt.
// defines: cudasim::lt::Problem, Verdict, make_problem, check_problem, check_alignments,
//          check_pointers, scale_count, emulated_version
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "objects.h"

namespace cudasim::lt {

// One matmul in cuBLASLt's column-major terms: D [m, n] = op(A) [m, k] op(B) [k, n].
struct Problem {
  const Desc* desc = nullptr;
  const Layout *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  int64_t m = 0, n = 0, k = 0;
  bool fp8 = false;  // A and B are FP8
};

struct Verdict {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string reason;
  bool ok() const { return status == CUBLAS_STATUS_SUCCESS; }
};

// Fills m, n, k from the layouts and the descriptor's transposes (INVALID_VALUE when a
// handle is missing or the shapes do not chain).
Verdict make_problem(const Desc* desc, const Layout* a, const Layout* b, const Layout* c,
                     const Layout* d, Problem& out);

// Everything that can be judged without the data: types, transposes, scale modes, epilogue,
// dimensions and leading dimensions.
Verdict check_problem(const Problem& p);

// Whether an algorithm exists for operands aligned to these byte counts (the heuristic's
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, or the actual pointers' alignment).
Verdict check_alignments(const Problem& p, uint64_t a, uint64_t b, uint64_t c, uint64_t d);

// The matmul's pointers: A, B, C, D, bias, scales and workspace in device memory, scale
// and workspace alignment.
Verdict check_pointers(const Problem& p, const void* a, const void* b, const void* c, const void* d,
                       const void* workspace, size_t workspace_bytes);

// Number of f32 scale factors `mode` needs for an operand whose D dimension is `outer`
// (m for A, n for B) and inner dimension k.
int64_t scale_count(int32_t mode, int64_t outer, int64_t k);

// The cuBLAS version being emulated (cudasim::cublaslt_set_version).
int emulated_version();

}  // namespace cudasim::lt
