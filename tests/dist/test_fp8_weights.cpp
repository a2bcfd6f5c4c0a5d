// tests/dist/test_fp8_weights.cpp: the FP8 all-gather of the block linears' weights
// (--fp8-comm weights) over 2 MPI ranks: the copies every rank's linears read (codes,
// scales, the transposed copy and its scales, which linears that widen do not get) equal one
// process quantizing each whole weight, bit for bit, under every scaling mode, with a shard
// boundary inside a weight; the aligned partition's boundaries; and 2-rank training with it against
// the run without.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "dist/fp8_comm.h"
#include "dist/fp8_weights.h"
#include "dist_testing.h"
#include "fp8/quantized_tensor.h"
#include "fp8/scaling.h"
#include "model/llama.h"
#include "run_testing.h"

namespace octet::dist {
namespace {

using testing::world;

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// Block linears with partial 128x128 and 32-row blocks: gate_up [704, 128] (5.5 blocks of
// rows), down [128, 352] (2.75 blocks of columns).
model::LlamaConfig gather_config() {
  model::LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 128;
  c.intermediate_size = 352;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  return c;
}

TEST(Fp8Weights, GatheredCopiesEqualOneProcessQuantizingEachWholeWeight) {
  Comm& comm = *world();
  const int n = comm.size();
  for (const char* text :
       {"tensor-current", "tensor-current:pow2", "tensor-delayed", "row", "block", "mx"}) {
    const fp8::Recipe recipe = fp8::Recipe::parse(text);
    model::ModelOptions o;
    o.precision = nn::Precision::fp8;
    o.recipe = recipe;
    o.batch = 1;
    model::Llama m(gather_config(), o);
    m.init_weights(7);  // the same weights on every rank
    const int64_t p = m.parameter_count();
    m.shard_master(0, p);  // the block linears get their bf16 working copy
    const std::vector<model::BlockWeight> ws = m.block_weights();
    ASSERT_EQ(ws.size(), 4u);
    // Shards cut inside gate_up at row 256 (a multiple of 128 and 32 rows), and at an odd
    // element under per-tensor scaling, which needs no alignment; more ranks: aligned cuts.
    const model::BlockWeight& gate_up = ws[2];
    const int64_t align = weight_row_alignment(recipe);
    Partition part = aligned_partition(p, n, ws, align);
    if (n == 2) {
      const int64_t cut = gate_up.offset + 256 * gate_up.cols + (align == 0 ? 77 : 0);
      part = Partition(std::vector<int64_t>{0, cut, p});
    }
    // The quantization every rank's linears would make of each whole weight.
    std::vector<fp8::QuantizedTensor> want;
    fp8::DelayedScalingState fresh(Device::cpu(), recipe.delayed);  // scales 1, as m's
    for (const model::BlockWeight& w : ws) {
      want.emplace_back(Device::cpu(), w.rows, w.cols, recipe, fp8::Role::weight, true);
      want.back().use_scaling_state(fresh);
    }
    fresh.allocate();
    const Tensor working = m.working();
    for (size_t i = 0; i < ws.size(); ++i) {
      const Tensor w(static_cast<uint16_t*>(working.data) + ws[i].offset, working.dtype,
                     {ws[i].rows, ws[i].cols});
      fp8::quantize(w, want[i], recipe);
    }

    WeightAllGather gather(world(), m, part);
    gather.run();
    ASSERT_EQ(gather.copies().size(), ws.size());
    for (size_t i = 0; i < ws.size(); ++i) {
      const std::string what = std::string(text) + " weight " + std::to_string(i);
      const nn::QuantizedWeight& got = gather.copies()[i];
      EXPECT_TRUE(ws[i].linear->uses_quantized_weight()) << what;
      EXPECT_EQ(bytes_of(got.data), bytes_of(want[i].data)) << what << " codes";
      EXPECT_EQ(bytes_of(got.scale_inv), bytes_of(want[i].scale_inv)) << what << " scales";
      if (fp8::QuantizedTensor::widens(Device::cpu(), recipe, fp8::Role::weight)) {
        // The linear widens data and reads it either way: no transposed copy is made.
        EXPECT_TRUE(got.data_t.empty() && got.scale_inv_t.empty()) << what << " transposed copy";
      } else {
        EXPECT_EQ(bytes_of(got.data_t), bytes_of(want[i].data_t)) << what << " transposed codes";
        EXPECT_EQ(bytes_of(got.scale_inv_t), bytes_of(want[i].scale_inv_t))
            << what << " transposed scales";
      }
      if (recipe.stateful()) {
        // Each rank wrote its shard's amax into the weight's history slot; the max over
        // ranks (what DataParallel::update all-reduces) is the whole weight's.
        const fp8::DelayedScalingState* state = ws[i].linear->config().scaling_state;
        float amax = state->amax_slot(ws[i].linear->weight_scaling_slot()).as<float>()[0];
        comm.all_reduce(Tensor(&amax, DType::f32, {1}), ReduceOp::max);
        EXPECT_EQ(amax, want[i].amax.as<float>()[0]) << what << " amax";
      }
    }
    // Bytes: per-tensor and 128x128 scales add next to nothing to half of bf16's bytes;
    // mx moves a second, column-scaled copy (more than bf16), row the bf16 weights besides.
    const double ratio = static_cast<double>(gather.bytes_received()) /
                         static_cast<double>(gather.bf16_bytes_received());
    if (comm.rank() == 0)
      std::printf("[ measured ] %s: bytes received %lld, bf16 gather %lld (%.3f)\n", text,
                  static_cast<long long>(gather.bytes_received()),
                  static_cast<long long>(gather.bf16_bytes_received()), ratio);
    if (recipe.mode == fp8::ScalingMode::mx) {
      EXPECT_NEAR(ratio, 1.0 + 1.0 / 32.0, 0.01) << text;  // 2 x (1 + 1/32) bytes vs 2
    } else if (recipe.mode == fp8::ScalingMode::row) {
      EXPECT_GT(ratio, 1.5) << text;
    } else {
      EXPECT_LT(ratio, 0.51) << text;
    }
  }
}

TEST(Fp8Weights, AlignedPartitionCutsOnTheRecipesRowBlocks) {
  model::ModelOptions o;
  o.precision = nn::Precision::fp8;
  model::Llama m(gather_config(), o);
  const std::vector<model::BlockWeight> ws = m.block_weights();
  const int64_t p = m.parameter_count();
  for (int ranks : {2, 3, 5, 7}) {
    for (int64_t align : {0, 1, 32, 128}) {
      const Partition part = aligned_partition(p, ranks, ws, align);
      ASSERT_EQ(part.ranks(), ranks);
      EXPECT_EQ(part.total(), p);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_LE(part.begin(r), part.end(r));
        for (const model::BlockWeight& w : ws) {
          const int64_t c = part.begin(r);
          if (align == 0 || c <= w.offset || c >= w.offset + w.rows * w.cols) continue;
          EXPECT_EQ((c - w.offset) % (align * w.cols), 0)
              << ranks << " ranks, " << align << " rows: cut " << c;
        }
      }
      if (align == 0) {
        EXPECT_EQ(part, Partition(p, ranks));
      }
    }
  }
}

// The 2-rank fp8 run with --fp8-comm weights against the same run without it: the linears
// read FP8 weights equal bit for bit to those they quantize themselves (the test above), so
// the runs are equal, under ZeRO 1 and 2, except where the partition moved (below).
TEST(Fp8Weights, TrainingWithFp8WeightsFollowsTheRunWithout) {
  const int n = world()->size();
  for (const char* text : {"tensor-delayed", "block", "mx"}) {
    // tensor-delayed and block with 2 micro-batches a step: the copies are filled once a step.
    const int64_t accum = std::string(text) != "mx" ? 2 : 1;
    train::TrainConfig c = testing::tiny_run(nn::Precision::fp8, 8, n, accum);
    c.recipe = fp8::Recipe::parse(text);
    c.guard.enabled = false;
    for (int zero : {1, 2}) {
      // Against the same ZeRO mode without the flag (ZeRO 2 sums the micro-batches in
      // another order than ZeRO 1).
      c.zero = zero;
      c.fp8_comm = Fp8Comm::none;
      const testing::RunResult none = testing::run_trainer(c, world());
      c.fp8_comm = Fp8Comm::weights;
      const testing::RunResult fp8 = testing::run_trainer(c, world());
      if (world()->rank() == 0) {
        std::printf(
            "[ measured ] %s zero %d: --fp8-comm weights vs none: max rel loss %.3g, "
            "gradient norm %.3g\n",
            text, zero, testing::max_rel(fp8.loss, none.loss),
            testing::max_rel(fp8.grad_norm, none.grad_norm));
      }
      // The master: bitwise where the partition is ceil(P/N)'s; where the recipe's alignment
      // moved a cut, the global gradient norm is summed over other shards (fp32 sums in
      // another order: measured 1 ulp apart), so the clipping factor, and through AdamW the
      // updates, differ in their last bits, which can flip a bf16 rounding of a working
      // weight (2^-8 of it) and spread from there.
      double worst = 0;
      int64_t differ = 0;
      for (size_t i = 0; i < none.master.size(); ++i) {
        const double d = std::abs(double(fp8.master[i]) - double(none.master[i]));
        differ += d != 0;
        worst = std::max(worst, d / std::max(1e-3, std::abs(double(none.master[i]))));
      }
      if (world()->rank() == 0)
        std::printf("[ measured ] %s zero %d: master: %lld of %zu differ, max rel %.3g\n", text,
                    zero, static_cast<long long>(differ), none.master.size(), worst);
      model::ModelOptions o;  // the tiny model's partition with and without the alignment
      o.precision = nn::Precision::fp8;
      model::Llama tiny(model::LlamaConfig{}, o);
      const int64_t p = tiny.parameter_count();
      const bool moved = aligned_partition(p, n, tiny.block_weights(),
                                           weight_row_alignment(c.recipe)) != Partition(p, n);
      if (!moved) {
        EXPECT_EQ(fp8.loss, none.loss) << text << " zero " << zero;
        EXPECT_EQ(fp8.master, none.master) << text << " zero " << zero;
      } else {
        // Within the fp8 tolerance of dist.DataParallel (2^-7 relative loss); measured: the
        // same losses, bit for bit, under block (2 micro-batches) and mx.
        EXPECT_LE(testing::max_rel(fp8.loss, none.loss), 0x1p-7) << text << " zero " << zero;
      }
      EXPECT_EQ(fp8.scales, none.scales) << text << " zero " << zero;
    }
  }
}

// --fp8-comm weights+grads over 30 steps: the weights the linears read are those of the run
// without the FP8 weight gather, so under tensor-delayed (one scale per weight: no partition
// moved) the run is the --fp8-comm grads run bit for bit, and it follows the one-process run
// within grads' bound: 2^-5 relative per step (tests/dist/test_fp8_grads_training.cpp derives it).
TEST(Fp8Weights, WeightsAndGradsIsTheGradsRunWithinItsBound) {
  const int n = world()->size();
  train::TrainConfig c = testing::tiny_run(nn::Precision::fp8, 8, 1);
  c.recipe = fp8::Recipe::parse("tensor-delayed");
  c.steps = 30;
  c.warmup = 5;
  c.eval_every = 0;
  c.grad_clip = 1.0;
  c.guard.enabled = false;
  const testing::RunResult single = testing::run_trainer(c, single_process());
  c.batch = 8 / n;
  c.fp8_comm = Fp8Comm::grads;
  const testing::RunResult grads = testing::run_trainer(c, world());
  c.fp8_comm = Fp8Comm::weights_grads;
  const testing::RunResult both = testing::run_trainer(c, world());
  if (world()->rank() == 0) {
    std::printf(
        "[ measured ] weights+grads vs one process: max rel loss %.3g (grads %.3g); "
        "step 30: %.6f (one process %.6f)\n",
        testing::max_rel(both.loss, single.loss), testing::max_rel(grads.loss, single.loss),
        both.loss.back(), single.loss.back());
  }
  EXPECT_EQ(both.loss, grads.loss);
  EXPECT_EQ(both.master, grads.master);
  EXPECT_LE(testing::max_rel(both.loss, single.loss), 0x1p-5);
}

// A --fp8-comm weights checkpoint (mx: the partition moved; tensor-delayed: the amax history
// carried) resumes with it bit for bit, and without it (ceil(P/N) shards read from the
// moved layout) within the fp8 tolerance of test_dist_checkpoint.cpp (2^-7 relative).
TEST(Fp8Weights, CheckpointResumesWithAndWithoutIt) {
  Comm& comm = *world();
  for (const char* text : {"tensor-delayed", "mx"}) {
    testing::SharedTempDir dir;
    train::TrainConfig c = testing::tiny_run(nn::Precision::fp8, 8, comm.size());
    c.recipe = fp8::Recipe::parse(text);
    c.guard.enabled = false;
    c.eval_every = 0;
    c.checkpoint_every = 3;
    c.out_dir = dir.path() + "/run";
    c.fp8_comm = Fp8Comm::weights;
    const testing::RunResult straight = testing::run_trainer(c, world());
    ASSERT_EQ(straight.loss.size(), 6u);
    for (Fp8Comm resume_with : {Fp8Comm::weights, Fp8Comm::none}) {
      comm.barrier();
      if (comm.rank() == 0) std::ofstream(c.out_dir + "/latest") << "step_00000003\n";
      comm.barrier();
      train::TrainConfig rc = c;
      rc.resume = true;
      rc.checkpoint_every = 0;
      rc.fp8_comm = resume_with;
      const testing::RunResult resumed = testing::run_trainer(rc, world());
      ASSERT_EQ(resumed.loss.size(), 3u) << text;
      for (size_t i = 0; i < 3; ++i) {
        if (resume_with == Fp8Comm::weights) {
          EXPECT_EQ(resumed.loss[i], straight.loss[3 + i]) << text << " step " << 4 + i;
        } else {
          EXPECT_NEAR(resumed.loss[i], straight.loss[3 + i], 0x1p-7 * straight.loss[3 + i])
              << text << " step " << 4 + i;
        }
      }
    }
  }
}

TEST(Fp8Weights, RefusedWithoutFp8OrUnderZeroZero) {
  train::TrainConfig c = testing::tiny_run(nn::Precision::bf16, 8, world()->size());
  c.fp8_comm = Fp8Comm::weights;
  EXPECT_THROW({ train::Trainer t(c, world()); }, octet::Error);
  c.precision = nn::Precision::fp8;
  c.zero = 0;
  EXPECT_THROW({ train::Trainer t(c, world()); }, octet::Error);
  // A recipe whose forward or dgrad runs in bf16 reads the bf16 weights, which the flag
  // does not gather; wgrad in bf16 reads x and dY only.
  c.zero = 1;
  for (const char* text : {"tensor-current:bf16=forward", "block:bf16=dgrad"}) {
    c.recipe = fp8::Recipe::parse(text);
    try {
      train::Trainer t(c, world());
      ADD_FAILURE() << text << " was not refused";
    } catch (const octet::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bf16=forward/dgrad"), std::string::npos) << e.what();
    }
  }
  c.recipe = fp8::Recipe::parse("tensor-current:bf16=wgrad");
  EXPECT_NO_THROW({ train::Trainer t(c, world()); });
}

}  // namespace
}  // namespace octet::dist
