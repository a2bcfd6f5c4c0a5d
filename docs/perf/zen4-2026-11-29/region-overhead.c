#include <omp.h>
#include <stdio.h>
#include <time.h>
static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9; }
static volatile double sink;
static void work(double us){ double t0=now(); while((now()-t0)*1e6<us) {} }
int main(){
  double gaps[]={0,5,20,100,400};
  for(int g=0; g<5; g++){
    for (int split=0; split<2; split++){
    int N=2000; double t0=now();
    for(int i=0;i<N;i++){
      if (split) {
        #pragma omp parallel
        { work(10); }
        #pragma omp parallel
        { work(10); }
      } else {
        #pragma omp parallel
        { work(20); }
      }
      work(gaps[g]);
    }
    double per=(now()-t0)/N*1e6 - 20 - gaps[g];
    printf("gap %5.0f us  %s: overhead %.1f us per iteration\n", gaps[g], split?"2 regions of 10us":"1 region of 20us", per);
    }
  }
}
