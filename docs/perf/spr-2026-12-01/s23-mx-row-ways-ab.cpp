// MX and row FP8 GEMMs (fwd/dgrad layout: A [m,k], B [n,k]) through the AMX kernel and through
// the folded/widened oneDNN way (OCTET_EXP_*_ONEDNN), alternating call by call; bf16 oneDNN beside.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <functional>
#include "kernels/gemm.h"
#include "kernels/cpu/gemm_cpu.h"
using namespace octet;
using namespace octet::kernels;
int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  struct D { int64_t m, n, k; } shapes[] = {{512, 64, 64}, {512, 128, 64}, {512, 352, 64}, {512, 64, 176}, {512, 176, 64},
     {2048, 512, 256}, {2048, 256, 256}, {2048, 1376, 256}, {2048, 256, 688}, {2048, 688, 256}, {2048, 256, 1376}, {2048, 256, 512}};
  const int reps = argc > 1 ? atoi(argv[1]) : 200;
  for (auto s : shapes) {
    std::vector<uint8_t> a8(s.m * s.k), b8(s.n * s.k), ea(s.m * 64, 127), eb(s.n * 64, 126);
    for (auto& v : a8) v = rand() % 0x70; for (auto& v : b8) v = rand() % 0x70;
    std::vector<float> ra(s.m, 0.37f), rb(s.n, 1.7f);
    std::vector<uint16_t> a16(s.m * s.k, 0x3f80), b16(s.n * s.k, 0x3f80), c(s.m * s.n);
    Device cpu = Device::cpu();
    Tensor A8(a8.data(), DType::e4m3, {s.m, s.k}, cpu), B8(b8.data(), DType::e4m3, {s.n, s.k}, cpu);
    Tensor A16(a16.data(), DType::bf16, {s.m, s.k}, cpu), B16(b16.data(), DType::bf16, {s.n, s.k}, cpu);
    Tensor C(c.data(), DType::bf16, {s.m, s.n}, cpu);
    GemmOptions mx; mx.a_grid = mx.b_grid = ScaleGrid{1, 32, true};
    mx.a_scale_inv = Tensor(ea.data(), DType::e8m0, {s.m, (s.k + 31) / 32}, cpu);
    mx.b_scale_inv = Tensor(eb.data(), DType::e8m0, {s.n, (s.k + 31) / 32}, cpu);
    GemmOptions row; row.a_grid = row.b_grid = ScaleGrid{1, 0, false};
    row.a_scale_inv = Tensor(ra.data(), DType::f32, {s.m, 1}, cpu);
    row.b_scale_inv = Tensor(rb.data(), DType::f32, {s.n, 1}, cpu);
    size_t wsb = std::max(gemm_workspace_bytes(A8, B8, C, mx), gemm_workspace_bytes(A8, B8, C, row));
    std::vector<uint8_t> ws(wsb + 64);
    mx.workspace = row.workspace = Tensor(ws.data(), DType::u8, {(int64_t)wsb}, cpu);
    GemmOptions bf;
    // ways: 0 mx amx, 1 mx onednn, 2 row amx, 3 row onednn, 4 bf16
    std::vector<double> t[5];
    for (int r = 0; r < reps; ++r) {
      for (int w0 = 0; w0 < 5; ++w0) {
        int w = (r & 1) ? 4 - w0 : w0;
        if (w == 1) setenv("OCTET_EXP_MX_ONEDNN", "1", 1); else unsetenv("OCTET_EXP_MX_ONEDNN");
        if (w == 3) setenv("OCTET_EXP_ROW_ONEDNN", "1", 1); else unsetenv("OCTET_EXP_ROW_ONEDNN");
        auto t0 = std::chrono::steady_clock::now();
        if (w < 2) gemm(A8, B8, C, mx); else if (w < 4) gemm(A8, B8, C, row); else gemm(A16, B16, C, bf);
        t[w].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    double med[5];
    for (int w = 0; w < 5; ++w) { std::sort(t[w].begin(), t[w].end()); med[w] = t[w][t[w].size() / 2]; }
    printf("%5ld %5ld %5ld | mx amx %7.1f onednn %7.1f (%.2f) | row amx %7.1f onednn %7.1f (%.2f) | bf16 %7.1f us\n", s.m, s.n, s.k,
           med[0], med[1], med[1] / med[0], med[2], med[3], med[3] / med[2], med[4]);
  }
}
