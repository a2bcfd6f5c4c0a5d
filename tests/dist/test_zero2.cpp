// tests/dist/test_zero2.cpp: ZeRO 2 over 2 MPI ranks: the non-blocking bucketed
// reduce-scatter equals the blocking one, and a ZeRO 2 run equals ZeRO 1 bit for bit
// (the same two partial gradients added per element) and follows one process at the same
// global batch within the fp32 reduction-order bound, with and without accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "dist_testing.h"
#include "run_testing.h"
#include "train/trainer.h"

namespace octet::dist {
namespace {

using testing::max_rel;
using testing::run_trainer;
using testing::tiny_run;
using testing::world;
using Result = testing::RunResult;

TEST(Comm, StartedReduceScattersEqualTheBlockingOne) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  const Partition p(1001, n);
  std::vector<float> full(1001);
  for (size_t i = 0; i < full.size(); ++i)
    full[i] = std::ldexp(1.0f + 0.001f * static_cast<float>((i * 37 + 11 * r) % 1000),
                         static_cast<int>(i % 13) - 6);
  const Tensor f(full.data(), DType::f32, {1001});
  std::vector<float> want(static_cast<size_t>(p.count(r))), got(want.size(), -1.0f);
  c.reduce_scatter(f, Tensor(want.data(), DType::f32, {p.count(r)}), p);
  // Buckets in backward's order (from the end), uneven, one crossing every shard boundary.
  const Tensor shard(got.data(), DType::f32, {p.count(r)});
  for (auto [lo, hi] : {std::pair{700, 1001}, std::pair{333, 700}, std::pair{1, 333},
                        std::pair{0, 1}, std::pair{5, 5}})
    c.start_reduce_scatter(f, shard, p, lo, hi);
  c.wait_started();
  // The same per-element sum of the same n operands: MPI reduces each element in one order
  // for a given count of ranks; at n = 2 a + b = b + a regardless.
  if (n == 2) {
    EXPECT_EQ(got, want);
  } else {
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 2 * (n - 1) * 0x1p-24 * n * 2 * std::abs(want[i]) + 1e-30);
  }
}

// The bound of tests/dist/test_data_parallel.cpp: reordering the sum of each weight
// gradient over 256 tokens (one GEMM on one process, two halves added on two ranks) moves
// it by < 2^-16 of the sum of magnitudes; over 6 AdamW steps the losses stay within 1e-5.
constexpr double kFp32LossTolerance = 1e-5;

TEST(Zero2, EqualsZeroOneBitForBitAndFollowsOneProcess) {
  const int n = world()->size();
  for (int64_t accum : {1, 2}) {
    const Result single = run_trainer(tiny_run(nn::Precision::fp32, 8, 1, accum), single_process());
    train::TrainConfig c = tiny_run(nn::Precision::fp32, 8, n, accum);
    c.zero = 1;
    const Result z1 = run_trainer(c, world());
    c.zero = 2;
    const Result z2 = run_trainer(c, world());
    // Every step's last backward started one bucket per layer (tiny: 2) and two for the
    // rest; the earlier micro-batches of an accumulated step started none.
    EXPECT_EQ(z2.buckets, 6 * (2 + 2)) << "accum " << accum;
    EXPECT_EQ(z1.buckets, 0);
    // At N = 2: the same per-element sums of the same two partial gradients (a + b = b + a
    // in whichever order MPI adds them), the same norm order and the same element-wise
    // AdamW: bit for bit. At N > 2 MPI may order the non-blocking sum differently: the
    // fp32 bound.
    if (n == 2) {
      EXPECT_EQ(z2.loss, z1.loss) << "accum " << accum;
      EXPECT_EQ(z2.grad_norm, z1.grad_norm) << "accum " << accum;
      EXPECT_EQ(z2.val, z1.val) << "accum " << accum;
      EXPECT_EQ(z2.master, z1.master) << "accum " << accum;
    } else {
      EXPECT_LE(max_rel(z2.loss, z1.loss), kFp32LossTolerance) << "accum " << accum;
    }
    EXPECT_LE(max_rel(z2.loss, single.loss), kFp32LossTolerance) << "accum " << accum;
    EXPECT_LE(max_rel(z2.val, single.val), kFp32LossTolerance) << "accum " << accum;
  }
}

}  // namespace
}  // namespace octet::dist
