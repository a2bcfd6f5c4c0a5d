// tests/dist/run_testing.h: what the data-parallel training tests share: a short `tiny` run
// on the synthetic corpus at a given global batch, its record (losses, norms, the gathered
// master, the FP8 scales, the ZeRO 2 buckets started), and the largest relative difference
// of two loss sequences.
// defines: tiny_run, RunResult, run_trainer, kFp32LossTolerance, max_rel
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "train/trainer.h"

namespace octet::dist::testing {

// 6 steps of `tiny` at `global_batch` sequences of 32 tokens, split over `ranks` and
// `accum` micro-batches, with clipping exercised and two evaluations.
inline train::TrainConfig tiny_run(nn::Precision precision, int64_t global_batch, int64_t ranks,
                                   int64_t accum = 1) {
  train::TrainConfig c;
  c.model = "tiny";
  c.precision = precision;
  c.seq_len = 32;
  c.batch = global_batch / ranks / accum;
  c.grad_accum = accum;
  c.steps = 6;
  c.warmup = 2;
  c.lr = 1e-2;
  c.grad_clip = 0.5;  // below the gradients' norm in these steps: clipping is exercised
  c.eval_every = 3;
  c.eval_batches = 2;
  c.quiet = true;
  c.data.markov_vocab = 64;
  c.data.train_tokens = 1 << 15;
  c.data.val_tokens = 1 << 12;
  return c;
}

struct RunResult {
  std::vector<double> loss, grad_norm, val;
  std::vector<float> master;  // gathered from the shards under ZeRO >= 1
  std::vector<float> scales;  // the FP8 delayed-scaling scales
  int64_t buckets = 0;        // ZeRO 2: the reduce-scatters started during backward
};

inline RunResult run_trainer(const train::TrainConfig& c, std::shared_ptr<Comm> comm) {
  train::Trainer trainer(c, std::move(comm));
  RunResult out;
  for (const train::StepRecord& r : trainer.run()) {
    out.loss.push_back(r.loss);
    out.grad_norm.push_back(r.grad_norm);
    if (r.val_loss) out.val.push_back(*r.val_loss);
  }
  out.master.resize(static_cast<size_t>(trainer.model().parameter_count()));
  const Tensor m(out.master.data(), DType::f32, {static_cast<int64_t>(out.master.size())});
  if (DataParallel* dp = trainer.data_parallel()) {
    dp->gather_master(m);  // under ZeRO >= 1 each rank holds one shard of it
    out.buckets = dp->buckets_started();
  } else {
    copy_bytes(m.data, m.device, trainer.model().master().data, m.device, out.master.size() * 4);
  }
  for (const auto& [name, t] : trainer.model().scaling_state_tensors())
    if (name == "fp8.scale") out.scales.assign(t.as<float>(), t.as<float>() + t.numel());
  return out;
}

// fp32: one process sums each weight gradient over the T = 8 x 32 = 256 tokens of the step
// in one GEMM; two ranks sum 128 each and then add the two. Reordering a sum of n fp32
// terms moves it by at most (n - 1) u sum|terms| (u = 2^-24), here < 2^-16 relative to
// sum|terms|; AdamW's update m / sqrt(v) is scale-free and the clip factor is computed
// from that same gradient, so over 6 steps the losses stay within 1e-5 relative (measured:
// about 1e-7), far below bf16's 2^-9.
inline constexpr double kFp32LossTolerance = 1e-5;

// The largest relative difference of two loss sequences, element by element.
inline double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

}  // namespace octet::dist::testing
