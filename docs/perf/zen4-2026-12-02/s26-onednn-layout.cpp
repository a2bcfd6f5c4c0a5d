#include <chrono>
#include <cstdint>
#include <cstdio>
#include <dnnl.hpp>
#include <string>
#include <vector>
using namespace dnnl;
using dt = memory::data_type;
int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  struct Sh {
    int m, n, k;
    dt cdt;
  };
  for (Sh sh :
       {Sh{256, 256, 2048, dt::f32}, Sh{512, 256, 2048, dt::f32}, Sh{1376, 256, 2048, dt::f32},
        Sh{256, 688, 2048, dt::f32}, Sh{2048, 256, 1376, dt::f32}, Sh{2048, 1376, 256, dt::f32}}) {
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
        for (int w = 0; w < 3; w++) {
          mm.execute(s, args);
        }
        s.wait();
        double best = 1e9;
        for (int r = 0; r < 7; r++) {
          auto t0 = std::chrono::steady_clock::now();
          for (int w = 0; w < 5; w++) mm.execute(s, args);
          s.wait();
          double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                     5 * 1e3;
          if (t < best) best = t;
        }
        printf("%dx%dx%d A%s B%s %s: %.3f ms\n", M, N, K, ta ? "^T(stored KxM)" : "(MxK)",
               tb ? "(NxK, K-major)" : "(KxN)", pd.impl_info_str(), best);
        fflush(stdout);
      }
  }
}
