// docs/perf/zen4-2026-11-29/onednn-brgemm-vs-jit.cpp: oneDNN 2.6 bf16 matmul per call, brgemm (no output
// scales) against gemm:jit (run-time output scales), on the tiny, 256-wide and small models' GEMM shapes
// (T = 2048 tokens). Build: g++ -O2 -std=c++17 onednn-brgemm-vs-jit.cpp -ldnnl; run with
// OMP_NUM_THREADS=1 and 2. The eighth session's outputs: onednn-brgemm-vs-jit.txt.
#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>
using namespace dnnl; using dt=memory::data_type;
// ta: A given as [k,m] (transposed); tb: B given as [n,k]
double run(int64_t m,int64_t n,int64_t k,bool rt,bool ta,bool tb,dt cdt,float beta){
  engine eng(engine::kind::cpu,0); stream s(eng);
  memory::desc a({m,k},dt::bf16,ta?memory::dims{1,m}:memory::dims{k,1});
  memory::desc b({k,n},dt::bf16,tb?memory::dims{1,k}:memory::dims{n,1});
  memory::desc c({m,n},cdt,memory::dims{n,1});
  primitive_attr attr; if(rt) attr.set_output_scales(0,{DNNL_RUNTIME_F32_VAL});
  if(beta!=0){post_ops p; p.append_sum(beta); attr.set_post_ops(p);}
  attr.set_scratchpad_mode(scratchpad_mode::user);
  matmul::primitive_desc pd(matmul::desc(a,b,c),attr,eng);
  printf("%-20s ", pd.impl_info_str());
  matmul mm(pd);
  memory A(a,eng),B(b,eng),C(c,eng),S(memory::desc({1},dt::f32,memory::dims{1}),eng),SP(pd.scratchpad_desc(),eng);
  *(float*)S.get_data_handle()=1.0f;
  memset(A.get_data_handle(),0x3f,m*k*2); memset(B.get_data_handle(),0x3f,k*n*2); memset(C.get_data_handle(),0,m*n*(cdt==dt::f32?4:2));
  std::unordered_map<int,memory> args={{DNNL_ARG_SRC,A},{DNNL_ARG_WEIGHTS,B},{DNNL_ARG_DST,C},{DNNL_ARG_SCRATCHPAD,SP}};
  if(rt) args[DNNL_ARG_ATTR_OUTPUT_SCALES]=S;
  double best=1e9;
  for(int r=0;r<30;r++){auto t0=std::chrono::steady_clock::now(); mm.execute(s,args); s.wait(); double d=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count(); if(r>3&&d<best)best=d;}
  return best*1e6;
}
int main(){ setvbuf(stdout,nullptr,_IONBF,0);
  // fwd: y[T,N] = x[T,K] W[N,K]^T (tb); dgrad: dx[T,K]=dy[T,N] W[N,K] (no tb); wgrad: dW[N,K] += dy^T[N,T] x[T,K] (ta, beta 1, f32)
  struct S {
    int64_t m, n, k;
    bool ta, tb;
    int c;
    float beta;
    const char* name;
  } sh[] = {
      {2048, 128, 64, 0, 1, 0, 0, "tiny fwd qkv"},
      {2048, 64, 128, 0, 0, 0, 0, "tiny dgrad qkv"},
      {128, 64, 2048, 1, 0, 1, 1, "tiny wgrad qkv"},
      {2048, 352, 64, 0, 1, 0, 0, "tiny fwd gateup"},
      {2048, 64, 352, 0, 0, 0, 0, "tiny dgrad gateup"},
      {352, 64, 2048, 1, 0, 1, 1, "tiny wgrad gateup"},
      {2048, 64, 176, 0, 1, 0, 0, "tiny fwd down"},
      {2048, 176, 64, 0, 0, 0, 0, "tiny dgrad down"},
      {64, 176, 2048, 1, 0, 1, 1, "tiny wgrad down"},
      {2048, 256, 64, 0, 1, 0, 0, "tiny fwd lmhead"},
      {2048, 64, 256, 0, 0, 0, 0, "tiny dgrad lmhead"},
      {256, 64, 2048, 1, 0, 1, 1, "tiny wgrad lmhead"},
      {2048, 512, 256, 0, 1, 0, 0, "w256 fwd qkv"},
      {2048, 256, 512, 0, 0, 0, 0, "w256 dgrad qkv"},
      {512, 256, 2048, 1, 0, 1, 1, "w256 wgrad qkv"},
      {2048, 1376, 256, 0, 1, 0, 0, "w256 fwd gateup"},
      {2048, 256, 1376, 0, 0, 0, 0, "w256 dgrad gateup"},
      {1376, 256, 2048, 1, 0, 1, 1, "w256 wgrad gateup"},
      {2048, 256, 688, 0, 1, 0, 0, "w256 fwd down"},
      {2048, 688, 256, 0, 0, 0, 0, "w256 dgrad down"},
      {256, 688, 2048, 1, 0, 1, 1, "w256 wgrad down"},
      {2048, 1024, 256, 0, 1, 0, 0, "w256 fwd lmhead"},
      {2048, 256, 1024, 0, 0, 0, 0, "w256 dgrad lmhead"},
      {1024, 256, 2048, 1, 0, 1, 1, "w256 wgrad lmhead"},
      {2048, 1024, 512, 0, 1, 0, 0, "small fwd qkv"},
      {2048, 512, 1024, 0, 0, 0, 0, "small dgrad qkv"},
      {1024, 512, 2048, 1, 0, 1, 1, "small wgrad qkv"},
      {2048, 2752, 512, 0, 1, 0, 0, "small fwd gateup"},
      {2048, 512, 2752, 0, 0, 0, 0, "small dgrad gateup"},
      {2752, 512, 2048, 1, 0, 1, 1, "small wgrad gateup"},
      {2048, 512, 1376, 0, 1, 0, 0, "small fwd down"},
      {2048, 1376, 512, 0, 0, 0, 0, "small dgrad down"},
      {512, 1376, 2048, 1, 0, 1, 1, "small wgrad down"},
      {2048, 8192, 512, 0, 1, 0, 0, "small fwd lmhead"},
      {2048, 512, 8192, 0, 0, 0, 0, "small dgrad lmhead"},
      {8192, 512, 2048, 1, 0, 1, 1, "small wgrad lmhead"}};
  for(auto&x:sh) for(int rt=0;rt<2;rt++){ printf("%-18s %ldx%ldx%ld rt=%d: ",x.name,x.m,x.n,x.k,rt); double us=run(x.m,x.n,x.k,rt,x.ta,x.tb,x.c?dt::f32:dt::bf16,x.beta); printf("%8.1f us  %6.1f GFLOP/s\n",us,2.0*x.m*x.n*x.k/us/1e3);}
}
