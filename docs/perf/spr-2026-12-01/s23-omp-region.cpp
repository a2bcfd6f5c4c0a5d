#include <omp.h>
#include <chrono>
#include <cstdio>
int main(){ volatile int s=0; for(int rep=0;rep<5;++rep){ auto t0=std::chrono::steady_clock::now(); for(int i=0;i<20000;++i){
#pragma omp parallel
{ s+=1; } }
 auto t1=std::chrono::steady_clock::now(); for(int i=0;i<20000;++i){
#pragma omp parallel
{
#pragma omp for
for(int j=0;j<2;++j) s+=j;
} }
auto t2=std::chrono::steady_clock::now();
printf("region %.2f us, region+for %.2f us\n", std::chrono::duration<double,std::micro>(t1-t0).count()/20000, std::chrono::duration<double,std::micro>(t2-t1).count()/20000);} }
