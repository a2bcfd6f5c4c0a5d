// kernels/cpu/elementwise_cpu.cpp: elementwise operations on the CPU. The residual add runs in
// AVX-512 or AVX2 lanes where the CPU has them (OCTET_CPU_ISA caps the level), bit for bit the
// scalar loop: one fp32 addition, rounded once (core/convert.h's f32_to_bf16 for bf16).
#include <algorithm>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
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
OCTET_ADD_AVX512 inline __m512 load16_bf16(const uint16_t* x, __mmask16 m) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)), 16));
}

// Whole vectors plain, the tail masked (nothing past n is read or written).
OCTET_ADD_AVX512 void add_avx512(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 s = _mm512_add_ps(load16_bf16(a + i, 0xFFFF), load16_bf16(b + i, 0xFFFF));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), avx512::round_to_bf16(s));
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 s = _mm512_add_ps(load16_bf16(a + i, m), load16_bf16(b + i, m));
    _mm256_mask_storeu_epi16(out + i, m, avx512::round_to_bf16(s));
  }
}
OCTET_ADD_AVX512 void add_avx512(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(
        out + i, m,
        _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// 8 floats to bf16 as f32_to_bf16 rounds them (nearest even; a NaN quieted, sign and payload
// kept), in the low 128 bits.
OCTET_ADD_AVX2 inline __m128i round8_to_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  // |u| and Inf's bits are below 2^31: a signed compare orders them.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane <= 0xFFFF
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
OCTET_ADD_AVX2 inline __m256 load8_bf16(const uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Whole vectors, then the tail in the scalar loop.
OCTET_ADD_AVX2 void add_avx2(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 s = _mm256_add_ps(load8_bf16(a + i), load8_bf16(b + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), round8_to_bf16(s));
  }
  add_scalar(a + i, b + i, out + i, n - i);
}
OCTET_ADD_AVX2 void add_avx2(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
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
