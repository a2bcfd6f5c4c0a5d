// s26-onednn-row-scales.cpp: see README.md (twenty-sixth session).
#include "s26-onednn-time.h"

int main() {
  Cpu cpu;
  engine& eng = cpu.eng;
  stream& s = cpu.s;
  for (Gemm sh : {Gemm{2048, 1376, 256, dt::bf16, 0.f}, Gemm{2048, 512, 256, dt::bf16, 0.f},
                  Gemm{2048, 256, 256, dt::bf16, 0.f}, Gemm{2048, 256, 1376, dt::bf16, 0.f},
                  Gemm{2048, 688, 256, dt::bf16, 0.f}, Gemm{1376, 256, 2048, dt::f32, 1.f},
                  Gemm{256, 256, 2048, dt::f32, 1.f}, Gemm{512, 352, 64, dt::bf16, 0.f},
                  Gemm{512, 64, 64, dt::bf16, 0.f}}) {
    int M = sh.m, N = sh.n, K = sh.k;
    std::vector<uint16_t> A(M * K, 0x3f80), B(N * K, 0x3f80);
    std::vector<float> C(M * N, 0), acc(M * N, 0);
    std::vector<float> cs(N, 0.5f), rs(M, 0.25f);
    for (int way = 0; way < 3; ++way) {
      // way 0: plain 2D bf16 (what bf16 does, beta as sum); way 1: 2D f32 acc (row today, without
      // its epilogue); way 2: 3D with per-N and per-M binary muls
      memory::desc a_md, b_md, c_md;
      primitive_attr attr;
      post_ops po;
      if (way < 2) {
        a_md = {{M, K}, dt::bf16, {K, 1}};
        b_md = {{K, N}, dt::bf16, {1, K}};
        c_md = {{M, N}, way == 1 ? dt::f32 : sh.cdt, {N, 1}};
        if (way == 0 && sh.beta != 0) po.append_sum(sh.beta);
      } else {
        a_md = {{1, M, K}, dt::bf16, {M * K, K, 1}};
        b_md = {{1, K, N}, dt::bf16, {N * K, 1, K}};
        c_md = {{1, M, N}, sh.cdt, {M * N, N, 1}};
        po.append_binary(algorithm::binary_mul, {{1, 1, N}, dt::f32, {N, N, 1}});
        po.append_binary(algorithm::binary_mul, {{1, M, 1}, dt::f32, {M, 1, 1}});
        if (sh.beta != 0) po.append_sum(sh.beta);
      }
      attr.set_post_ops(po);
      matmul::primitive_desc pd(matmul::desc(a_md, b_md, c_md), attr, eng);
      matmul mm(pd);
      memory a(a_md, eng, A.data()), b(b_md, eng, B.data()),
          c(c_md, eng, way == 1 ? acc.data() : C.data());
      memory csm({{1, 1, N}, dt::f32, {N, N, 1}}, eng, cs.data()),
          rsm({{1, M, 1}, dt::f32, {M, 1, 1}}, eng, rs.data());
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
      if (way == 2) {
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = csm;
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] = rsm;
      }
      const double best = best_ms(mm, s, args);
      printf("%dx%dx%d way %d %s: %.3f ms\n", M, N, K, way, pd.impl_info_str(), best);
      fflush(stdout);
    }
  }
}
