// docs/perf/emr-2026-11-30/s20-gemm-ab.cpp: the twentieth session's scratch program (a record of
// how s20-gemm-ab.txt was measured, not part of the build): the twelve GEMMs of one 256-wide layer
// at 8 x 256 tokens in nn::Linear's layouts, oneDNN's bf16 GEMM and the row recipe's FP8 GEMM
// (scales 1.37 and 0.71: not powers of two, so the AMX kernel runs) alternating call by call; the
// fastest of the calls after three. Build against a tree's build-cpu/liboctet.a:
//   g++ -std=c++20 -O2 -fopenmp -Isrc s20-gemm-ab.cpp build-cpu/liboctet.a -ldnnl -lsleef \
//       -lsentencepiece_train -lsentencepiece $(mpicxx --showme:link) -lpthread -o gb
//   OMP_NUM_THREADS=2 ./gb [NAME-FILTER [CALLS [fp8-only]]]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "kernels/gemm.h"
using namespace octet;
using namespace octet::kernels;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
#include <cstring>
int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : nullptr;
  int reps = argc > 2 ? atoi(argv[2]) : 30;
  bool skip_b = argc > 3;
  struct S {
    int64_t m, n, k;
    bool ta, tb;
    const char* what;
  };
  // C[m,n] = op(A) op(B)
  S shapes[] = {{2048, 512, 256, false, true, "fwd qkv"},
                {2048, 256, 256, false, true, "fwd o"},
                {2048, 1376, 256, false, true, "fwd gate/up"},
                {2048, 256, 688, false, true, "fwd down"},
                {2048, 256, 512, false, false, "dgrad qkv"},
                {2048, 256, 256, false, false, "dgrad o"},
                {2048, 256, 1376, false, false, "dgrad gate/up"},
                {2048, 688, 256, false, false, "dgrad down"},
                {512, 256, 2048, true, false, "wgrad qkv"},
                {256, 256, 2048, true, false, "wgrad o"},
                {1376, 256, 2048, true, false, "wgrad gate/up"},
                {256, 688, 2048, true, false, "wgrad down"}};
  double sum_b = 0, sum_8 = 0;
  for (auto s : shapes) {
    if (only && !strstr(s.what, only)) continue;
    std::vector<uint16_t> a(s.m * s.k, 0x3f80), b(s.n * s.k, 0x3f80), c(s.m * s.n);
    std::vector<uint8_t> a8(s.m * s.k, 0x38), b8(s.n * s.k, 0x38);
    std::vector<float> sa(s.m, 1.37f), sb(s.n, 0.71f);
    Shape as = s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k};
    Shape bs = s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
    Tensor A(a.data(), DType::bf16, as), B(b.data(), DType::bf16, bs),
        C(c.data(), DType::bf16, {s.m, s.n});
    GemmOptions o;
    o.trans_a = s.ta;
    o.trans_b = s.tb;
    std::vector<uint8_t> ws(gemm_workspace_bytes(A, B, C, o) + 64);
    o.workspace = Tensor(ws.data(), DType::u8, {(int64_t)ws.size()});
    Tensor A8(a8.data(), DType::e4m3, as), B8(b8.data(), DType::e4m3, bs);
    GemmOptions f;
    f.trans_a = s.ta;
    f.trans_b = s.tb;
    f.a_grid = ScaleGrid{1, 0, false};
    f.b_grid = ScaleGrid{1, 0, false};
    f.a_scale_inv = Tensor(sa.data(), DType::f32, {s.m, 1});
    f.b_scale_inv = Tensor(sb.data(), DType::f32, {s.n, 1});
    std::vector<uint8_t> ws8(gemm_workspace_bytes(A8, B8, C, f) + 64);
    f.workspace = Tensor(ws8.data(), DType::u8, {(int64_t)ws8.size()});
    double tb = 1e9, t8 = 1e9;
    for (int rep = 0; rep < reps; ++rep) {
      double t0 = now();
      if (!skip_b) gemm(A, B, C, o);
      double t1 = now();
      gemm(A8, B8, C, f);
      double t2 = now();
      if (rep >= 3) {
        tb = std::min(tb, t1 - t0);
        t8 = std::min(t8, t2 - t1);
      }
    }
    sum_b += tb;
    sum_8 += t8;
    double fl = 2.0 * s.m * s.n * s.k;
    std::printf(
        "%-36s %5ld %5ld %5ld  bf16 oneDNN %7.3f ms (%5.2f TF/s)  fp8 row %7.3f ms (%5.2f TF/s)\n",
        s.what, s.m, s.n, s.k, tb * 1e3, fl / tb / 1e12, t8 * 1e3, fl / t8 / 1e12);
  }
  std::printf("per layer: bf16 %.3f ms, fp8 row %.3f ms\n", sum_b * 1e3, sum_8 * 1e3);
}
