// tests/dist/test_zero2.cpp: ZeRO 2 over 2 MPI ranks: the non-blocking bucketed
// reduce-scatter equals the blocking one (from the whole buffer or from a bucket's own), a
// ZeRO 2 run equals ZeRO 1 bit for bit without accumulation (the same two partial gradients
// added per element) and within the fp32 bound with it, follows one process at the same
// global batch, is the same bit for bit at every bucket size, and holds the f32 gradients of
// its shard and its buckets only.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "dist/grad_buckets.h"
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
  // From buckets holding only their own elements, two in flight at a time (ZeRO 2's slots).
  std::vector<float> from_buckets(want.size(), -1.0f);
  const Tensor shard2(from_buckets.data(), DType::f32, {p.count(r)});
  for (auto [lo, hi] : {std::pair{700, 1001}, std::pair{333, 700}, std::pair{0, 333}}) {
    c.start_reduce_scatter(Tensor(full.data() + lo, DType::f32, {hi - lo}), shard2, p, lo, hi);
    c.wait_started_but(1);
  }
  c.wait_started();
  EXPECT_EQ(from_buckets, got);
  // The same per-element sum of the same n operands: MPI reduces each element in one order
  // for a given count of ranks; at n = 2 a + b = b + a regardless.
  if (n == 2) {
    EXPECT_EQ(got, want);
  } else {
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 2 * (n - 1) * 0x1p-24 * n * 2 * std::abs(want[i]) + 1e-30);
  }
}

// Per step and micro-batch at the default 25 MiB: the LM head, both layers' matrices, the
// embedding, the norm weights.
constexpr int64_t kBucketsPerBackward = 4;

TEST(Zero2, EqualsZeroOneAndFollowsOneProcess) {
  const int n = world()->size();
  for (int64_t accum : {1, 2}) {
    const Result single = run_trainer(tiny_run(nn::Precision::fp32, 8, 1, accum), single_process());
    train::TrainConfig c = tiny_run(nn::Precision::fp32, 8, n, accum);
    c.zero = 1;
    const Result z1 = run_trainer(c, world());
    c.zero = 2;
    const Result z2 = run_trainer(c, world());
    // Every backward (each micro-batch's) reduce-scattered its buckets.
    EXPECT_EQ(z2.buckets, 6 * accum * kBucketsPerBackward) << "accum " << accum;
    EXPECT_EQ(z1.buckets, 0);
    // Without accumulation at N = 2: the same per-element sums of the same two partial
    // gradients (a + b = b + a in whichever order MPI adds them), the same norm order and
    // the same element-wise AdamW: bit for bit. With accumulation ZeRO 2 sums over ranks per
    // micro-batch ((a1 + b1) + a2) + b2 where ZeRO 1 adds each rank's micro-batches first
    // (a1 + a2) + (b1 + b2): the fp32 reordering bound of 4 terms, far inside the bound of
    // the 256-token GEMM split against one process below. At N > 2 MPI may order the
    // non-blocking sum differently: the same bound.
    if (n == 2 && accum == 1) {
      EXPECT_EQ(z2.loss, z1.loss) << "accum " << accum;
      EXPECT_EQ(z2.grad_norm, z1.grad_norm) << "accum " << accum;
      EXPECT_EQ(z2.val, z1.val) << "accum " << accum;
      EXPECT_EQ(z2.master, z1.master) << "accum " << accum;
    } else {
      EXPECT_LE(max_rel(z2.loss, z1.loss), kFp32LossTolerance) << "accum " << accum;
      EXPECT_LE(max_rel(z2.val, z1.val), kFp32LossTolerance) << "accum " << accum;
    }
    EXPECT_LE(max_rel(z2.loss, single.loss), kFp32LossTolerance) << "accum " << accum;
    EXPECT_LE(max_rel(z2.val, single.val), kFp32LossTolerance) << "accum " << accum;
  }
}

// Buckets of one layer each (0.1 MiB < a tiny layer's 180 KiB of matrices: the LM head, layer
// 1, layer 0, the embedding take turns in the two slots, so the slots are reused while
// reduce-scatters are in flight) against the default 25 MiB (both layers in one bucket):
// every element is summed from the same operands in the same order, so the runs are the
// same bit for bit, with and without accumulation.
TEST(Zero2, BucketSizesGiveIdenticalRuns) {
  const int n = world()->size();
  for (int64_t accum : {1, 2}) {
    train::TrainConfig c = tiny_run(nn::Precision::fp32, 8, n, accum);
    c.zero = 2;
    const Result whole = run_trainer(c, world());
    c.bucket_mb = 0.1;
    const Result layers = run_trainer(c, world());
    EXPECT_EQ(whole.buckets, 6 * accum * kBucketsPerBackward) << "accum " << accum;
    EXPECT_EQ(layers.buckets, 6 * accum * (kBucketsPerBackward + 1)) << "accum " << accum;
    if (n == 2) {
      EXPECT_EQ(layers.loss, whole.loss) << "accum " << accum;
      EXPECT_EQ(layers.grad_norm, whole.grad_norm) << "accum " << accum;
      EXPECT_EQ(layers.master, whole.master) << "accum " << accum;
    } else {
      EXPECT_LE(max_rel(layers.loss, whole.loss), kFp32LossTolerance) << "accum " << accum;
    }
  }
}

// The memory: a rank's f32 gradients under ZeRO 2 are its shard (P / N) and the buckets (two
// slots of the largest bucket, and the norm weights), not all P parameters' as under ZeRO 1.
// 8 layers of tiny's width, buckets of one layer: at N = 2 about 0.73 P against ZeRO 1's
// 1.5 P (the whole buffer and the shard).
TEST(Zero2, GradientsHoldOnlyTheShardAndTheBuckets) {
  model::LlamaConfig config;
  config.num_hidden_layers = 8;
  model::ModelOptions options;
  options.precision = nn::Precision::bf16;
  options.seq_len = 32;
  const std::shared_ptr<Comm> comm = world();
  const int r = comm->rank();
  model::Llama zero1_model(config, options), zero2_model(config, options);
  const int64_t p = zero2_model.parameter_count();
  const DataParallel zero1(comm, zero1_model, 1, {});
  const int64_t layer_bytes =
      (config.qkv_size() + config.hidden_size + 3 * config.intermediate_size) * config.hidden_size *
      4;
  const DataParallel zero2(comm, zero2_model, 2, {}, false, layer_bytes);
  const int64_t shard = zero2.partition().count(r);
  EXPECT_EQ(zero1.gradient_bytes(), static_cast<size_t>(p + shard) * 4);
  // ZeRO 2: no buffer of all P in the model.
  EXPECT_EQ(zero2_model.grad_bytes(), 0u);
  const int64_t norms = (2 * config.num_hidden_layers + 1) * config.hidden_size;
  const GradBuckets& buckets = *zero2.grad_buckets();
  // LM head, 8 layers, embedding.
  EXPECT_EQ(buckets.slotted(), 10);
  EXPECT_EQ(buckets.bytes(), static_cast<size_t>(2 * layer_bytes + norms * 4));
  EXPECT_EQ(zero2.gradient_bytes(), static_cast<size_t>(shard * 4 + 2 * layer_bytes + norms * 4));
  if (comm->size() == 2) {
    EXPECT_LT(zero2.gradient_bytes(), static_cast<size_t>(p) * 4 * 3 / 4);
  }
  if (r == 0) {
    std::printf(
        "[ measured ] f32 gradient bytes per rank, %lld parameters over %d ranks: "
        "ZeRO 1 %zu, ZeRO 2 %zu (shard %lld + buckets %zu)\n",
        static_cast<long long>(p), comm->size(), zero1.gradient_bytes(), zero2.gradient_bytes(),
        static_cast<long long>(shard * 4), buckets.bytes());
  }
}

// The trainer skips a step whose global gradient norm is not finite (finite_step_or_undo):
// under ZeRO 2 a NaN that one rank's backward writes into a bucket reaches that norm on every
// rank, through the slots, with and without accumulation; a clean step's norm is finite.
TEST(Zero2, ANonFiniteGradientReachesEveryRanksNorm) {
  const std::shared_ptr<Comm> comm = world();
  model::LlamaConfig config;
  model::ModelOptions options;
  options.precision = nn::Precision::fp32;  // the master is the working weights: poisonable
  options.seq_len = 16;
  for (int64_t accum : {1, 2}) {
    for (bool poison : {false, true}) {
      model::Llama model(config, options);
      model.init_weights(7);
      DataParallel dp(comm, model, 2, {}, false, 64 << 10);  // a bucket per layer and two slots
      // Rank 0's layer 1 down_proj (a middle bucket) gets a NaN weight: its gradient and
      // everything below it in the backward go NaN on rank 0 only.
      if (poison && comm->rank() == 0) {
        const model::ParamInfo& w = model.param("model.layers.1.mlp.down_proj.weight");
        model.master().as<float>()[w.offset + 3] = std::nanf("");
      }
      std::vector<int32_t> ids(16);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % 256);
      const Tensor t(ids.data(), DType::i32, {1, 16});
      model.zero_grads();
      for (int64_t micro = 0; micro < accum; ++micro) {
        model.forward(t, t, 1.0f / 32);
        if (micro + 1 == accum) dp.last_micro_batch();
        model.backward();
      }
      float sum_sq = -1;
      dp.reduce_gradients(Tensor(&sum_sq, DType::f32, {1}));
      EXPECT_EQ(std::isfinite(sum_sq), !poison) << "accum " << accum << " poison " << poison;
    }
  }
}

// An embedding tied to the LM head takes gradients at both ends of the backward: ZeRO 2 keeps
// it in memory of its own, reduced at the end. One step, tied and untied, per-layer buckets:
// the global norm and the updated master equal ZeRO 1's bit for bit at N = 2 (the same two
// partial gradients added per element).
TEST(Zero2, TiedEmbeddingStepEqualsZeroOne) {
  const std::shared_ptr<Comm> comm = world();
  for (bool tied : {false, true}) {
    model::LlamaConfig config;
    config.tie_word_embeddings = tied;
    model::ModelOptions options;
    options.precision = nn::Precision::fp32;
    options.seq_len = 16;
    std::vector<int32_t> ids(16);
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<int32_t>((i * 11 + 5 * comm->rank()) % 256);
    const Tensor t(ids.data(), DType::i32, {1, 16});
    std::vector<float> sum_sq(2), master[2];
    for (int zero : {1, 2}) {
      model::Llama model(config, options);
      model.init_weights(3);
      DataParallel dp(comm, model, zero, {}, false, 64 << 10);
      model.zero_grads();
      model.forward(t, t, 1.0f / 32);
      dp.last_micro_batch();
      model.backward();
      float* s = &sum_sq[static_cast<size_t>(zero - 1)];
      dp.step(1, 1e-2, Tensor(s, DType::f32, {1}));
      std::vector<float>& m = master[zero - 1];
      m.resize(static_cast<size_t>(model.parameter_count()));
      dp.gather_master(Tensor(m.data(), DType::f32, {model.parameter_count()}));
    }
    EXPECT_TRUE(std::isfinite(sum_sq[0]) && sum_sq[0] > 0) << "tied " << tied;
    if (comm->size() == 2) {
      EXPECT_EQ(sum_sq[1], sum_sq[0]) << "tied " << tied;
      EXPECT_TRUE(master[1] == master[0]) << "tied " << tied;
    } else {
      EXPECT_NEAR(sum_sq[1], sum_sq[0], 1e-5 * sum_sq[0]) << "tied " << tied;
    }
  }
}

}  // namespace
}  // namespace octet::dist
