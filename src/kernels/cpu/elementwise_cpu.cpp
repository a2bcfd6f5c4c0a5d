// kernels/cpu/elementwise_cpu.cpp: elementwise operations on the CPU. The residual add runs in
// AVX-512 or AVX2 lanes where the CPU has them (OCTET_CPU_ISA caps the level), bit for bit the
// scalar loop: one fp32 addition, rounded once (core/convert.h's f32_to_bf16 for bf16).
#include <algorithm>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/bf16_round_avx2.h"
#include "kernels/cpu/bf16_round_avx512.h"
#include "kernels/cpu/intrinsics.h"
#define OCTET_ADD_VECTOR 1
#define OCTET_ADD_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define OCTET_ADD_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace octet::kernels::cpu {
namespace {

// Each thread takes whole chunks of this many elements (a multiple of every vector width).
constexpr int64_t kChunk = int64_t{1} << 14;

template <typename A>
void add_scalar(const A* a, const A* b, A* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_f32<A>(to_f32(a[i]) + to_f32(b[i]));
}

#if defined(OCTET_ADD_VECTOR)
// Whole vectors, then the tail in the scalar loop (plain loads and stores: a masked tail store
// is slow on the AMD Zen 4 measured, and every chunk but a tensor's last is whole vectors).
template <typename A>
OCTET_ADD_AVX512 void add_avx512(const A* a, const A* b, A* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    avx512::store(out + i, _mm512_add_ps(avx512::load(a + i), avx512::load(b + i)));
  add_scalar(a + i, b + i, out + i, n - i);
}
template <typename A>
OCTET_ADD_AVX2 void add_avx2(const A* a, const A* b, A* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    avx2::store(out + i, _mm256_add_ps(avx2::load(a + i), avx2::load(b + i)));
  add_scalar(a + i, b + i, out + i, n - i);
}
#endif

// One chunk at the level `isa` (the OpenMP loop stays outside the target functions: clang
// outlines a parallel region without its function's target features).
template <typename A>
void add_chunk(Isa isa, const A* a, const A* b, A* out, int64_t n) {
#if defined(OCTET_ADD_VECTOR)
  if (isa == Isa::avx512) return add_avx512(a, b, out, n);
  if (isa == Isa::avx2) return add_avx2(a, b, out, n);
#endif
  add_scalar(a, b, out, n);
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = a.numel();
  const Isa isa = usable_isa("add");
  with_activation(a.dtype, [&](auto tag) {
    using A = decltype(tag);
    const A* pa = a.as<const A>();
    const A* pb = b.as<const A>();
    A* po = out.as<A>();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelElements)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunk;
      add_chunk(isa, pa + begin, pb + begin, po + begin, std::min(kChunk, n - begin));
    }
  });
}

}  // namespace octet::kernels::cpu
