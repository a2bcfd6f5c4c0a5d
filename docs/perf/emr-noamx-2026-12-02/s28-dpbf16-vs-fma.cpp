#include <immintrin.h>
#include <chrono>
#include <cstdio>
int main(){
  __m512 acc[16]; for(int i=0;i<16;i++) acc[i]=_mm512_setzero_ps();
  __m512bh a=(__m512bh)_mm512_set1_epi32(0x3f803f80), b=(__m512bh)_mm512_set1_epi32(0x3f803f80);
  long n=200000000/16;
  auto t0=std::chrono::steady_clock::now();
  for(long i=0;i<n;i++){
#pragma GCC unroll 16
    for(int j=0;j<16;j++) acc[j]=_mm512_dpbf16_ps(acc[j],a,b);
    asm volatile(""::"v"(a));
  }
  double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
  float sum=0; for(int i=0;i<16;i++) sum+=_mm512_reduce_add_ps(acc[i]);
  printf("dpbf16: %.3f G/s  (%.1f GFLOP/s) %g\n", n*16/s/1e9, n*16*64/s/1e9, sum);
  __m512 f[16]; for(int i=0;i<16;i++) f[i]=_mm512_set1_ps(i);
  __m512 x=_mm512_set1_ps(1.0000001f);
  t0=std::chrono::steady_clock::now();
  for(long i=0;i<n;i++){
#pragma GCC unroll 16
    for(int j=0;j<16;j++) f[j]=_mm512_fmadd_ps(f[j],x,x);
    asm volatile(""::"v"(x));
  }
  s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
  sum=0; for(int i=0;i<16;i++) sum+=_mm512_reduce_add_ps(f[i]);
  printf("fma512: %.3f G/s %g\n", n*16/s/1e9, sum);
}
