// kernels/cpu/convert_cpu.cpp: array conversions on the CPU. Encoding loops are
// plain loops over the branch-free scalar functions of core/convert.h, compiled
// once per x86 instruction-set level and picked at run time (no -march=native);
// FP8 decoding reads 256-entry tables built from the scalar decoders. Big arrays
// are split over OpenMP threads in contiguous chunks.

// GCC sinks the float operations of the scalar converters into branches and,
// under the default -ftrapping-math, will not if-convert them back without AVX-512
// masks, which would leave the AVX2 and baseline loops scalar. octet never enables
// FP traps and the flag changes no result (the tests compare every bit). It has to
// come before the includes so that the inline converters are compiled with it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "kernels/backends.h"
#include "kernels/cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

// One conversion loop: which one is decided once per call, outside the loop.
enum class Route : uint8_t {
  f32_to_e4m3,
  f32_to_e5m2,
  bf16_to_e4m3,
  bf16_to_e5m2,
  f16_to_e4m3,
  f16_to_e5m2,
  f32_to_bf16,
  f32_to_f16,
  bf16_to_f32,
  f16_to_f32,
  byte_to_u32,  // table lookup: FP8 -> f32
  byte_to_u16,  // table lookup: FP8 -> bf16 / f16
};

struct Job {
  Route route;
  bool saturate;
  const void* table;  // for the table routes: 256 entries of the output type
};

// Decoding tables, one per (FP8 format, output type), built from the scalar
// decoders so that the array kernel is bit-identical to them by construction.
struct DecodeTables {
  std::array<uint32_t, 256> e4m3_f32, e5m2_f32;
  std::array<uint16_t, 256> e4m3_bf16, e5m2_bf16, e4m3_f16, e5m2_f16;
};

const DecodeTables& decode_tables() {
  static const DecodeTables tables = [] {
    DecodeTables t;
    for (int v = 0; v < 256; ++v) {
      const auto code = static_cast<uint8_t>(v);
      const float e4m3 = e4m3_to_f32(code), e5m2 = e5m2_to_f32(code);
      t.e4m3_f32[v] = f32_bits(e4m3);
      t.e5m2_f32[v] = f32_bits(e5m2);
      t.e4m3_bf16[v] = f32_to_bf16(e4m3);
      t.e5m2_bf16[v] = f32_to_bf16(e5m2);
      t.e4m3_f16[v] = f32_to_f16(e4m3);
      t.e5m2_f16[v] = f32_to_f16(e5m2);
    }
    return t;
  }();
  return tables;
}

// ---- the loops (inlined into each instruction-set variant below) ----------

template <typename In, typename Out, typename Fn>
[[gnu::always_inline]] inline void map(const void* src, void* dst, int64_t n, Fn fn) {
  const In* __restrict s = static_cast<const In*>(src);
  Out* __restrict d = static_cast<Out*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = fn(s[i]);
}

// The encoder with the overflow mode fixed at compile time.
template <bool kSaturate, bool kE4M3>
[[gnu::always_inline]] inline uint8_t encode(float x) {
  constexpr Overflow overflow = kSaturate ? Overflow::saturate : Overflow::nonfinite;
  return kE4M3 ? f32_to_e4m3(x, overflow) : f32_to_e5m2(x, overflow);
}

template <bool kSaturate>
[[gnu::always_inline]] inline void run_encode(Route route, const void* s, void* d, int64_t n) {
  switch (route) {
    case Route::f32_to_e4m3:
      return map<float, uint8_t>(s, d, n, [](float x) { return encode<kSaturate, true>(x); });
    case Route::f32_to_e5m2:
      return map<float, uint8_t>(s, d, n, [](float x) { return encode<kSaturate, false>(x); });
    case Route::bf16_to_e4m3:
      return map<uint16_t, uint8_t>(
          s, d, n, [](uint16_t x) { return encode<kSaturate, true>(bf16_to_f32(x)); });
    case Route::bf16_to_e5m2:
      return map<uint16_t, uint8_t>(
          s, d, n, [](uint16_t x) { return encode<kSaturate, false>(bf16_to_f32(x)); });
    case Route::f16_to_e4m3:
      return map<uint16_t, uint8_t>(
          s, d, n, [](uint16_t x) { return encode<kSaturate, true>(f16_to_f32(x)); });
    case Route::f16_to_e5m2:
      return map<uint16_t, uint8_t>(
          s, d, n, [](uint16_t x) { return encode<kSaturate, false>(f16_to_f32(x)); });
    default:
      return;
  }
}

[[gnu::always_inline]] inline void run_span(const Job& job, const void* s, void* d, int64_t n) {
  switch (job.route) {
    case Route::f32_to_bf16:
      return map<float, uint16_t>(s, d, n, [](float x) { return f32_to_bf16(x); });
    case Route::f32_to_f16:
      return map<float, uint16_t>(s, d, n, [](float x) { return f32_to_f16(x); });
    case Route::bf16_to_f32:
      return map<uint16_t, float>(s, d, n, [](uint16_t x) { return bf16_to_f32(x); });
    case Route::f16_to_f32:
      return map<uint16_t, float>(s, d, n, [](uint16_t x) { return f16_to_f32(x); });
    case Route::byte_to_u32: {
      const auto* __restrict table = static_cast<const uint32_t*>(job.table);
      return map<uint8_t, uint32_t>(s, d, n, [table](uint8_t v) { return table[v]; });
    }
    case Route::byte_to_u16: {
      const auto* __restrict table = static_cast<const uint16_t*>(job.table);
      return map<uint8_t, uint16_t>(s, d, n, [table](uint8_t v) { return table[v]; });
    }
    default:
      return job.saturate ? run_encode<true>(job.route, s, d, n)
                          : run_encode<false>(job.route, s, d, n);
  }
}

// ---- instruction-set variants ------------------------------------------------

using SpanFn = void (*)(const Job&, const void*, void*, int64_t);

void span_baseline(const Job& job, const void* s, void* d, int64_t n) {
  run_span(job, s, d, n);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma,f16c,bmi2"))) void span_avx2(const Job& job, const void* s, void* d,
                                                             int64_t n) {
  run_span(job, s, d, n);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2"))) void span_avx512(
    const Job& job, const void* s, void* d, int64_t n) {
  run_span(job, s, d, n);
}
#endif

SpanFn pick_span() {
  const Isa isa = usable_isa("convert");
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::avx512) return span_avx512;
  if (isa == Isa::avx2) return span_avx2;
#endif
  return span_baseline;
}

Job make_job(DType from, DType to, Overflow overflow) {
  Job job{Route::f32_to_e4m3, overflow == Overflow::saturate, nullptr};
  const bool e4m3 = to == DType::e4m3;
  if (is_fp8(to)) {
    if (from == DType::f32) job.route = e4m3 ? Route::f32_to_e4m3 : Route::f32_to_e5m2;
    if (from == DType::bf16) job.route = e4m3 ? Route::bf16_to_e4m3 : Route::bf16_to_e5m2;
    if (from == DType::f16) job.route = e4m3 ? Route::f16_to_e4m3 : Route::f16_to_e5m2;
    return job;
  }
  if (is_fp8(from)) {
    const DecodeTables& t = decode_tables();
    const bool from_e4m3 = from == DType::e4m3;
    job.route = to == DType::f32 ? Route::byte_to_u32 : Route::byte_to_u16;
    if (to == DType::f32) job.table = from_e4m3 ? t.e4m3_f32.data() : t.e5m2_f32.data();
    if (to == DType::bf16) job.table = from_e4m3 ? t.e4m3_bf16.data() : t.e5m2_bf16.data();
    if (to == DType::f16) job.table = from_e4m3 ? t.e4m3_f16.data() : t.e5m2_f16.data();
    return job;
  }
  if (from == DType::f32 && to == DType::bf16) job.route = Route::f32_to_bf16;
  if (from == DType::f32 && to == DType::f16) job.route = Route::f32_to_f16;
  if (from == DType::bf16 && to == DType::f32) job.route = Route::bf16_to_f32;
  if (from == DType::f16 && to == DType::f32) job.route = Route::f16_to_f32;
  return job;
}

// Arrays up to this many elements run on one thread (faster than waking a team);
// bigger ones are cut into chunks of this size for the OpenMP threads.
constexpr int64_t kChunkElements = int64_t{1} << 16;

}  // namespace

void convert(const Tensor& src, const Tensor& dst, Overflow overflow) {
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype) {
    std::memcpy(dst.data, src.data, src.nbytes());
    return;
  }
  const Job job = make_job(src.dtype, dst.dtype, overflow);
  // Table lookups stay scalar: AVX2/AVX-512 gathers are slower than plain loads
  // from a 256-entry table that lives in L1.
  const bool table = job.route == Route::byte_to_u32 || job.route == Route::byte_to_u16;
  const SpanFn span = table ? span_baseline : pick_span();
  const auto* s = static_cast<const char*>(src.data);
  auto* d = static_cast<char*>(dst.data);
  const size_t in_size = dtype_size(src.dtype), out_size = dtype_size(dst.dtype);

  if (n <= kChunkElements || omp_get_max_threads() == 1 || omp_in_parallel()) {
    span(job, s, d, n);
    return;
  }
  // schedule(static) hands each thread one contiguous run of chunks.
  const int64_t chunks = (n + kChunkElements - 1) / kChunkElements;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunkElements;
    const int64_t count = std::min(kChunkElements, n - begin);
    span(job, s + begin * static_cast<int64_t>(in_size), d + begin * static_cast<int64_t>(out_size),
         count);
  }
}

}  // namespace octet::kernels::cpu
