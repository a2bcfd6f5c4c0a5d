// tests/dist/test_data_parallel.cpp: the trainer data parallel over 2 MPI ranks against
// one process at the same global batch: ZeRO 0 and ZeRO 1 bit for bit alike, both within
// the fp32 reduction-order bound of one process; bf16 and fp8 within their tolerances;
// gradient accumulation; the FP8 delayed-scaling state equal on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "dist_testing.h"
#include "run_testing.h"
#include "train/trainer.h"

namespace octet::dist {
namespace {

using testing::kFp32LossTolerance;
using testing::max_rel;
using testing::run_trainer;
using testing::tiny_run;
using testing::world;
using Result = testing::RunResult;

double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

void report(const char* what, const Result& a, const Result& b) {
  if (world()->rank() != 0) return;
  std::printf("[ measured ] %s: max rel loss %.3g, grad norm %.3g, val %.3g; max abs master %.3g\n",
              what, max_rel(a.loss, b.loss), max_rel(a.grad_norm, b.grad_norm),
              max_rel(a.val, b.val), max_abs(a.master, b.master));
}

TEST(DataParallel, Fp32ZeroZeroAndOneAreBitwiseEqualAndFollowOneProcess) {
  const int n = world()->size();
  const Result single = run_trainer(tiny_run(nn::Precision::fp32, 8, 1), single_process());
  train::TrainConfig c = tiny_run(nn::Precision::fp32, 8, n);
  c.zero = 0;
  const Result z0 = run_trainer(c, world());
  c.zero = 1;
  const Result z1 = run_trainer(c, world());
  report("fp32 zero 1 vs one process", z1, single);
  // At N = 2 both modes add the same two partial gradients (a + b = b + a), compute the
  // norm shard by shard in the same order and apply the same element-wise AdamW.
  EXPECT_EQ(z0.loss, z1.loss);
  EXPECT_EQ(z0.grad_norm, z1.grad_norm);
  EXPECT_EQ(z0.val, z1.val);
  EXPECT_EQ(z0.master, z1.master);
  ASSERT_EQ(single.loss.size(), 6u);
  EXPECT_GT(single.grad_norm[0], 0.5) << "the test means to exercise clipping";
  EXPECT_LE(max_rel(z1.loss, single.loss), kFp32LossTolerance);
  EXPECT_LE(max_rel(z1.grad_norm, single.grad_norm), 1e-4);
  EXPECT_LE(max_rel(z1.val, single.val), kFp32LossTolerance);
  // Every rank ends with the same weights.
  std::vector<float> lo = z1.master, hi = z1.master;
  world()->all_reduce(Tensor(lo.data(), DType::f32, {static_cast<int64_t>(lo.size())}),
                      ReduceOp::max);
  for (float& x : hi) x = -x;
  world()->all_reduce(Tensor(hi.data(), DType::f32, {static_cast<int64_t>(hi.size())}),
                      ReduceOp::max);
  for (size_t i = 0; i < lo.size(); ++i) ASSERT_EQ(lo[i], -hi[i]) << "parameter " << i;
}

TEST(DataParallel, GradientAccumulationFollowsOneProcess) {
  const int n = world()->size();
  train::TrainConfig one = tiny_run(nn::Precision::fp32, 4, 1);
  one.grad_accum = 2;
  train::TrainConfig many = tiny_run(nn::Precision::fp32, 4, n);
  many.grad_accum = 2;  // each step: 2 micro-batches of 2 sequences on each of 2 ranks
  const Result single = run_trainer(one, single_process()), dp = run_trainer(many, world());
  report("fp32 grad-accum 2, zero 1 vs one process", dp, single);
  EXPECT_LE(max_rel(dp.loss, single.loss), kFp32LossTolerance);
  EXPECT_LE(max_rel(dp.val, single.val), kFp32LossTolerance);
}

// bf16 and fp8: the working weights are rounded from masters that differ by the fp32
// reduction order above; where a master sits near a bf16 rounding boundary one copy
// rounds the other way (a 2^-8 relative change of one weight). Under fp8 with
// tensor-current scaling each rank also scales its activations and gradients by the amax
// of its own half of the batch (one process: of the whole batch), so their E4M3/E5M2
// codes differ by up to one quantization step (2^-3 E4M3, 2^-2 E5M2, relative). The
// mean loss over 8 x 32 tokens averages these: bf16 within 2^-9 relative, fp8 within
// 2^-7. Under ZeRO 1 the fp32 master is sharded and the gathered working weights are
// bf16 (--fp8-comm none), so the block linears are quantized to FP8 from bf16 rather than
// from the f32 master as one process does: a second rounding (2^-9 relative) ahead of
// E4M3's 2^-4, which moves a code where the bf16 rounding crosses an E4M3 rounding
// boundary. Measured (max relative loss difference over 6 steps): bf16 3.9e-5, fp8
// tensor-current 1.4e-3 (the local scales; its gradient norms differ by up to 88% by
// step 6 as the trajectories part), tensor-delayed 2.6e-3, block 2.2e-3 (before the
// master was sharded, quantizing from the same f32 masters: 3.2e-6 and 3.5e-5).
TEST(DataParallel, Bf16AndFp8FollowOneProcessWithinTheirFormats) {
  const int n = world()->size();
  struct Case {
    nn::Precision precision;
    const char* recipe;
    double tolerance;
  };
  for (const Case& k :
       {Case{nn::Precision::bf16, "", 0x1p-9}, Case{nn::Precision::fp8, "tensor-current", 0x1p-7},
        Case{nn::Precision::fp8, "tensor-delayed", 0x1p-7},
        Case{nn::Precision::fp8, "block", 0x1p-7}}) {
    train::TrainConfig one = tiny_run(k.precision, 8, 1), many = tiny_run(k.precision, 8, n);
    if (*k.recipe) one.recipe = many.recipe = fp8::Recipe::parse(k.recipe);
    const Result single = run_trainer(one, single_process()), dp = run_trainer(many, world());
    const std::string what = std::string(nn::precision_name(k.precision)) + " " + k.recipe;
    report(what.c_str(), dp, single);
    EXPECT_LE(max_rel(dp.loss, single.loss), k.tolerance) << what;
    EXPECT_LE(max_rel(dp.val, single.val), k.tolerance) << what;
    // The delayed-scaling scales are the same on every rank (the amax histories were
    // reduced before each update; the final evaluation's amaxes are local until the next).
    std::vector<float> mine = dp.scales, root = dp.scales;
    if (!root.empty()) {
      world()->broadcast(Tensor(root.data(), DType::f32, {static_cast<int64_t>(root.size())}), 0);
      EXPECT_EQ(mine, root) << what;
    }
  }
}

}  // namespace
}  // namespace octet::dist
