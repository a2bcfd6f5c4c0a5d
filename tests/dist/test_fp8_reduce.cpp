// tests/dist/test_fp8_reduce.cpp: Comm::all_to_all, and the gradient reduce-scatter with
// an FP8 range (dist::GradReduceScatter) against the fp32 reduce-scatter within the bound
// its shared scale gives, over MPI (2 ranks in CI, any count works).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/fp8_reduce.h"
#include "dist_testing.h"

namespace octet::dist {
namespace {

using testing::world;

TEST(Comm, AllToAllSendsEachRankItsChunk) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  // Rank r sends q + 1 elements to rank q, valued 100 r + q + i / 8 (exact in fp32).
  std::vector<int64_t> send_at{0}, recv_at{0};
  for (int q = 0; q < n; ++q) {
    send_at.push_back(send_at.back() + q + 1);
    recv_at.push_back(recv_at.back() + r + 1);
  }
  std::vector<float> send(static_cast<size_t>(send_at.back()));
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i <= q; ++i)
      send[static_cast<size_t>(send_at[static_cast<size_t>(q)] + i)] = 100.0f * r + q + i / 8.0f;
  std::vector<float> recv(static_cast<size_t>(recv_at.back()), -1.0f);
  c.all_to_all(Tensor(send.data(), DType::f32, {send_at.back()}), send_at,
               Tensor(recv.data(), DType::f32, {recv_at.back()}), recv_at);
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i <= r; ++i)
      EXPECT_EQ(recv[static_cast<size_t>(recv_at[static_cast<size_t>(q)] + i)],
                100.0f * q + r + i / 8.0f);
  std::vector<int64_t> short_at{0, 1};  // one offset pair for n ranks: refused
  if (n > 1) {
    EXPECT_THROW(c.all_to_all(Tensor(send.data(), DType::f32, {1}), short_at,
                              Tensor(recv.data(), DType::f32, {1}), short_at),
                 Error);
  }
}

// Rank r's gradient i: signs and magnitudes spread over 2^-30 .. 2^2, so that the FP8
// range holds normals, subnormals and values that flush to zero at the shared scale.
float gradient(int r, int64_t i) {
  const uint64_t h =
      (static_cast<uint64_t>(i) * 2654435761u + static_cast<uint64_t>(r) * 40503u) % 1000003u;
  const float mantissa = 1.0f + static_cast<float>(h % 1000) / 1000.0f;
  const int exponent = -static_cast<int>((h / 1000) % 33) + 2;
  return ((h / 7) % 2 ? -1.0f : 1.0f) * std::ldexp(mantissa, exponent);
}

// buckets: the FP8 range in three buckets started from the end (ZeRO 2's order), each at
// its own scale, the rest as started f32 reduce-scatters; else the one-call reduce-scatter.
void check_against_fp32(DType format, bool buckets) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  const int64_t p = 3001, fp8_begin = 400, fp8_end = 2700;  // uneven shards, three segments
  const Partition part(p, n);
  std::vector<float> full(static_cast<size_t>(p));
  for (int64_t i = 0; i < p; ++i) full[static_cast<size_t>(i)] = gradient(r, i);
  const Tensor full_t(full.data(), DType::f32, {p});
  const int64_t count = part.count(r);
  std::vector<float> want(static_cast<size_t>(std::max<int64_t>(1, count))), got = want;
  c.reduce_scatter(full_t, Tensor(want.data(), DType::f32, {count}), part);
  GradReduceScatter fp8(world(), part, fp8_begin, fp8_end, format, Device::cpu(), 3);
  const Tensor got_t(got.data(), DType::f32, {count});
  if (buckets) {
    for (auto [lo, hi] :
         {std::pair{int64_t{1900}, fp8_end}, std::pair{int64_t{1150}, int64_t{1900}},
          std::pair{fp8_begin, int64_t{1150}}})
      fp8.start_bucket(full_t, lo, hi);
    c.start_reduce_scatter(full_t, got_t, part, 0, fp8_begin);
    c.start_reduce_scatter(full_t, got_t, part, fp8_end, p);
    c.wait_started();
    fp8.finish_buckets(got_t);
  } else {
    fp8.run(full_t, got_t);
  }

  // The global amax over the FP8 range, and the scale: the power of two at or below
  // fp8_max / amax.
  double amax = 0;
  for (int q = 0; q < n; ++q)
    for (int64_t i = fp8_begin; i < fp8_end; ++i)
      amax = std::max(amax, std::abs(1.0 * gradient(q, i)));
  const DTypeInfo& info = dtype_info(format);
  // A bucket's scale is at least the range's: the bound with the range's holds for both.
  const double scale = std::exp2(std::floor(std::log2(info.max_finite / amax)));
  if (!buckets) {
    EXPECT_EQ(fp8.amax(), static_cast<float>(amax));
    EXPECT_EQ(fp8.scale(), static_cast<float>(scale));
  }

  // Per element: each rank's rounding to the format at `scale` is at most half an ulp:
  // 2^-(m+1) |g| for a normal, half the subnormal step 2^(e_min - m - 1) / scale below
  // (min_subnormal / 2 / scale); the fp32 sums (ours of exact dequantized terms, MPI's of
  // the originals) reorder by at most (n - 1) 2^-24 of the sum of magnitudes each.
  const double half_ulp = std::ldexp(1.0, -(info.mantissa_bits + 1));
  const double floor_err = info.min_subnormal / 2 / scale;
  int64_t differing = 0;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = part.begin(r) + k;
    const auto at = static_cast<size_t>(k);
    if (i < fp8_begin || i >= fp8_end) {
      // f32 segments: summed in rank order; at two ranks a + b is MPI's sum bit for bit.
      if (n == 2) {
        EXPECT_EQ(got[at], want[at]) << i;
      } else {
        double mag = 0;
        for (int q = 0; q < n; ++q) mag += std::abs(gradient(q, i));
        EXPECT_LE(std::abs(got[at] - want[at]), 2 * (n - 1) * 0x1p-24 * mag) << i;
      }
      continue;
    }
    double bound = 0, mag = 0;
    for (int q = 0; q < n; ++q) {
      const double g = std::abs(gradient(q, i));
      bound += std::max(half_ulp * g, floor_err);
      mag += 2 * g + floor_err;  // |g| and |dequantized g| <= |g| + its error
    }
    bound += (n - 1) * 0x1p-24 * mag;
    ASSERT_LE(std::abs(static_cast<double>(got[at]) - want[at]), bound) << "element " << i;
    differing += got[at] != want[at];
  }
  // The FP8 path did round: most of this rank's FP8-range elements differ from fp32.
  const int64_t fp8_mine =
      std::max<int64_t>(0, std::min(part.end(r), fp8_end) - std::max(part.begin(r), fp8_begin));
  EXPECT_GT(differing, fp8_mine / 2);
  // Bytes on the wire: the FP8 range's chunks for the other ranks as codes, the rest f32.
  int64_t fp8_others = 0, f32_others = 0;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    const int64_t lo = std::clamp(part.begin(q), fp8_begin, fp8_end),
                  hi = std::clamp(part.end(q), fp8_begin, fp8_end);
    fp8_others += hi - lo;
    f32_others += part.count(q) - (hi - lo);
  }
  if (buckets) return;
  EXPECT_EQ(fp8.bytes_sent(), fp8_others + 4 * f32_others + 4);
  EXPECT_EQ(fp8.f32_bytes_sent(), 4 * (fp8_others + f32_others));
}

TEST(Fp8Reduce, E5M2ReduceScatterIsWithinHalfAnUlpPerRankOfFp32) {
  check_against_fp32(DType::e5m2, false);
}

TEST(Fp8Reduce, E4M3ReduceScatterIsWithinHalfAnUlpPerRankOfFp32) {
  check_against_fp32(DType::e4m3, false);
}

TEST(Fp8Reduce, StartedBucketsAreWithinTheSameBound) {
  check_against_fp32(DType::e5m2, true);
  check_against_fp32(DType::e4m3, true);
}

TEST(Fp8Reduce, NonFiniteGradientsArriveNonFinite) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  const Partition part(8, n);
  std::vector<float> full(8, 1.0f);
  if (r == 0) full[5] = INFINITY;  // the step will be skipped; the norm must see it
  std::vector<float> got(8);
  GradReduceScatter fp8(world(), part, 0, 8, DType::e5m2, Device::cpu());
  fp8.run(Tensor(full.data(), DType::f32, {8}), Tensor(got.data(), DType::f32, {part.count(r)}));
  EXPECT_FALSE(std::isfinite(fp8.amax()));
  for (int64_t i = part.begin(r); i < part.end(r); ++i) {
    const float v = got[static_cast<size_t>(i - part.begin(r))];
    if (i == 5) {
      EXPECT_FALSE(std::isfinite(v));
    } else {
      EXPECT_EQ(v, static_cast<float>(n));
    }
  }
}

// ZeRO 2's buckets compute their scale on the device, with no read-back to choose an f32
// fallback: a non-finite global amax gives scale 1 and codes encoded without saturation, so an
// Inf (from rank 0, reduced on the last rank) and a NaN still arrive non-finite; the finite
// values, exact at scale 1, sum exactly.
TEST(Fp8Reduce, NonFiniteBucketsArriveNonFinite) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  const Partition part(8, n);
  for (DType format : {DType::e5m2, DType::e4m3}) {
    std::vector<float> full(8, 1.0f);
    if (r == 0) {
      full[7] = INFINITY;
      full[1] = NAN;
    }
    std::vector<float> got(8, -1.0f);
    const Tensor shard(got.data(), DType::f32, {part.count(r)});
    GradReduceScatter fp8(world(), part, 0, 8, format, Device::cpu(), 2);
    fp8.start_bucket(Tensor(full.data() + 4, DType::f32, {4}), 4, 8);
    fp8.start_bucket(Tensor(full.data(), DType::f32, {8}), 0, 4);
    c.wait_started();
    fp8.finish_buckets(shard);
    for (int64_t i = part.begin(r); i < part.end(r); ++i) {
      const float v = got[static_cast<size_t>(i - part.begin(r))];
      if (i == 7 || i == 1) {
        EXPECT_FALSE(std::isfinite(v)) << dtype_name(format) << " element " << i;
      } else {
        EXPECT_EQ(v, static_cast<float>(n)) << dtype_name(format) << " element " << i;
      }
    }
  }
}

// ZeRO 2 with accumulation: a later micro-batch's buckets are added on receipt to what the
// shard holds. Small integers (exact in E5M2 at any power-of-two scale that keeps them
// normal, their sums exact in fp32) make the expected shard exact: the sum over ranks and
// micro-batches.
TEST(Fp8Reduce, AccumulatedBucketsAddToTheShard) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  const Partition part(12, n);
  auto value = [](int rank, int micro, int64_t i) {
    return static_cast<float>(((i + 3 * rank + 5 * micro) % 4) + 1) * (i % 2 ? 1.0f : -1.0f);
  };
  std::vector<float> got(12, -1.0f);
  const Tensor shard(got.data(), DType::f32, {part.count(r)});
  GradReduceScatter fp8(world(), part, 0, 12, DType::e5m2, Device::cpu(), 2);
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<float> full(12);
    for (int64_t i = 0; i < 12; ++i) full[static_cast<size_t>(i)] = value(r, micro, i);
    fp8.start_bucket(Tensor(full.data() + 7, DType::f32, {5}), 7, 12);
    fp8.start_bucket(Tensor(full.data(), DType::f32, {7}), 0, 7);
    c.wait_started();
    fp8.finish_buckets(shard, /*accumulate=*/micro > 0);
  }
  for (int64_t i = part.begin(r); i < part.end(r); ++i) {
    float want = 0;
    for (int micro = 0; micro < 2; ++micro)
      for (int q = 0; q < n; ++q) want += value(q, micro, i);
    EXPECT_EQ(got[static_cast<size_t>(i - part.begin(r))], want) << "element " << i;
  }
}

}  // namespace
}  // namespace octet::dist
