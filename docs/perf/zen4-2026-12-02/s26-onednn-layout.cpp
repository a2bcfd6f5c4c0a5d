// s26-onednn-layout.cpp: see README.md (twenty-sixth session).
#include "s26-onednn-time.h"

int main() {
  Cpu cpu;
  engine& eng = cpu.eng;
  stream& s = cpu.s;
  for (Gemm sh : {Gemm{256, 256, 2048, dt::f32}, Gemm{512, 256, 2048, dt::f32},
                  Gemm{1376, 256, 2048, dt::f32}, Gemm{256, 688, 2048, dt::f32},
                  Gemm{2048, 256, 1376, dt::f32}, Gemm{2048, 1376, 256, dt::f32}}) {
    int M = sh.m, N = sh.n, K = sh.k;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        memory::desc a_md({M, K}, dt::bf16, ta ? memory::dims{1, M} : memory::dims{K, 1});
        memory::desc b_md({K, N}, dt::bf16, tb ? memory::dims{1, K} : memory::dims{N, 1});
        memory::desc c_md({M, N}, sh.cdt, memory::dims{N, 1});
        std::vector<uint16_t> A(M * K, 0x3f80), B(N * K, 0x3f80);
        std::vector<float> C(M * N, 0);
        primitive_attr attr;
        attr.set_scratchpad_mode(scratchpad_mode::library);
        matmul::primitive_desc pd(matmul::desc(a_md, b_md, c_md), attr, eng);
        matmul mm(pd);
        memory a(a_md, eng, A.data()), b(b_md, eng, B.data()), c(c_md, eng, C.data());
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
        const double best = best_ms(mm, s, args);
        printf("%dx%dx%d A%s B%s %s: %.3f ms\n", M, N, K, ta ? "^T(stored KxM)" : "(MxK)",
               tb ? "(NxK, K-major)" : "(KxN)", pd.impl_info_str(), best);
        fflush(stdout);
      }
  }
}
