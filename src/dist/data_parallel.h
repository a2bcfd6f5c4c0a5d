// dist/data_parallel.h: data parallelism over a Comm for one model: the gradient
// reduction (ZeRO 0: all-reduce; ZeRO 1: reduce-scatter, AdamW moments and the fp32 master
// sharded, each rank updating its shard, then an all-gather of the working weights), the global
// gradient norm over all shards, the loss summed over ranks, the FP8 scaling state kept
// equal on every rank, and the moments gathered for checkpoints and resharded on resume.
// defines: AdamWConfig, DataParallel
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "dist/comm.h"
#include "dist/fp8_reduce.h"
#include "dist/grad_buckets.h"
#include "model/llama.h"

namespace octet::dist {

class WeightAllGather;  // dist/fp8_weights.h

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global gradient norm; 0 disables clipping
};

// Every rank holds the whole model's working weights and gradients (and under ZeRO 0 its
// whole master; under ZeRO 1 only its shard of the master, model::Llama::shard_master); each
// computes the gradients of its own micro-batches, scaled for the global mean (grad_scale
// 1 / (tokens per rank x ranks x accumulation steps)). Under ZeRO 2 no rank holds the
// gradients of all P parameters: the backward writes them into buckets (GradBuckets, at most
// bucket_bytes of layers each), reduce-scattered into this rank's shard as each completes.
// Buffers are allocated here once; step() allocates nothing. The model must not run a
// backward after this is destroyed (under ZeRO 2 its gradients live here).
class DataParallel {
 public:
  // zero: 0, 1 or 2.
  // fp8_weights (--fp8-comm weights; fp8, ZeRO 1 or 2): the block linears' weights travel
  // as FP8 codes (dist/fp8_weights.h), the partition's boundaries inside them aligned to the
  // recipe's scale blocks, and the bf16 all-gather after each update skips them.
  DataParallel(std::shared_ptr<Comm> comm, model::Llama& model, int zero, const AdamWConfig& adamw,
               bool fp8_weights = false, int64_t bucket_bytes = kDefaultBucketBytes);
  // A byte count where fp8_weights goes would convert to `true`: refused at compile time.
  DataParallel(std::shared_ptr<Comm> comm, model::Llama& model, int zero, const AdamWConfig& adamw,
               int64_t bucket_bytes) = delete;
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // ZeRO 2: every backward reduce-scatters its buckets as it completes them (Llama's backward
  // hook) into this rank's shard; with accumulation each micro-batch's sum is added to the
  // earlier ones' (as DeepSpeed's ZeRO 2 does: one reduce-scatter of the gradients per
  // micro-batch), and a backward waits for its buckets at its end. The next backward is the
  // step's last micro-batch: it leaves its last buckets in flight, and reduce_gradients()
  // waits for them. A no-op under ZeRO 0 and 1.
  void last_micro_batch();
  // ZeRO 2: buckets started by backward hooks so far (tests).
  int64_t buckets_started() const { return buckets_started_; }
  const GradBuckets* grad_buckets() const { return buckets_.get(); }
  // The f32 gradient bytes this rank holds: the model's buffer (ZeRO 0 and 1: all P), the
  // reduced shard (ZeRO 1 and 2), the buckets (ZeRO 2).
  size_t gradient_bytes() const;
  // The AdamW moments' bytes this rank holds (ZeRO 0: 2 x 4P; ZeRO 1 and 2: its shard's).
  size_t moment_bytes() const { return m_.bytes() + v_.bytes(); }

  // One optimizer step after the local backward passes: reduces the gradients, writes the
  // global sum of their squares into grad_sum_sq (f32[1]), clips, updates with AdamW at
  // `lr` (step `step`, 1 for the first), syncs the working weights and the FP8 scaling.
  void step(int64_t step, double lr, const Tensor& grad_sum_sq);
  // step() in two halves, for a caller that looks at the global norm in between (the
  // trainer skips a non-finite step): the gradients reduced and grad_sum_sq written...
  void reduce_gradients(const Tensor& grad_sum_sq);
  // ...then the clipped AdamW update of the reduced gradients, the weights gathered and
  // synced, and the FP8 scaling state updated from the amax over all ranks.
  void update(int64_t step, double lr, const Tensor& grad_sum_sq);
  // --fp8-comm grads: from now on reduce_gradients() moves the
  // block linears' gradients as FP8 codes (the recipe's gradient format) at a shared scale
  // and sums them in fp32 on receipt (GradReduceScatter); the rest stays f32.
  void use_fp8_gradients();
  const GradReduceScatter* fp8_gradients() const { return fp8_grads_.get(); }
  const WeightAllGather* fp8_weights() const { return fp8_weights_.get(); }
  // Sums a scalar over ranks (each rank's weighted loss sum: the global mean loss).
  void sum_over_ranks(const Tensor& scalar);

  Comm& comm() { return *comm_; }
  int zero() const { return zero_; }
  // The partition of the P parameters into shards (ZeRO 1; also ZeRO 0's norm order).
  const Partition& partition() const { return partition_; }

  // The moments m and v over all P parameters, f32 [P] each: ZeRO 0's own buffers, or under
  // ZeRO 1 every shard gathered into buffers allocated for the call (checkpoints), the
  // model's fp32 master then gathered whole too.
  std::pair<Tensor, Tensor> full_moments();
  // After full_moments()' tensors were overwritten (a checkpoint read at any rank count):
  // takes this rank's shard of them.
  void moments_loaded();
  // Frees the buffers full_moments() allocated (after a checkpoint was written) and shards
  // the master again.
  void drop_full_moments();
  // This rank's range of the partition for a checkpoint saved per shard: its first
  // parameter and views of its fp32 master, m and v there (f32 [count] each).
  struct Shard {
    int64_t begin;
    Tensor master, m, v;
  };
  Shard optimizer_shard() const;
  // After the master (this rank's part of it) was read in place: the working weights
  // rounded from it and, under ZeRO 1, gathered.
  void master_loaded();
  // The fp32 master made whole on every rank (the model's master() readable: a checkpoint's
  // model.safetensors), and afterwards sharded again (no-ops unless ZeRO 1).
  void gather_whole_master();
  void reshard_master();
  // The same on rank 0 only (the others keep their shard and send it): what a checkpoint's
  // model.safetensors needs; reshard_master() afterwards.
  void gather_master_on_root();
  // The whole fp32 master into full (f32 [P], e.g. another model's master): a copy, or
  // under ZeRO 1 each rank's shard gathered. Every rank calls it.
  void gather_master(const Tensor& full);

 private:
  void adamw(const Tensor& master, const Tensor& grads, const Tensor& m, const Tensor& v,
             int64_t first, double lr, int64_t step, const Tensor& grad_sum_sq);

  std::shared_ptr<Comm> comm_;
  model::Llama& model_;
  int zero_;
  AdamWConfig adamw_;
  Partition partition_;
  Buffer m_, v_;            // ZeRO 0: f32 [P]; ZeRO 1: f32 [this rank's shard]
  Buffer grad_shard_;       // ZeRO 1: the reduce-scattered gradients of this rank's shard
  Buffer full_m_, full_v_;  // ZeRO 1: only while a checkpoint is written or read
  Tensor shard_;            // this rank's reduced gradients, from reduce_gradients to update
  std::unique_ptr<GradReduceScatter> fp8_grads_;  // --fp8-comm grads
  // ZeRO 2: the buckets, and what the backward hook does with them.
  void on_backward(int64_t hook);
  void start_bucket(const GradBucket& b);
  void finish_started();  // waits for the started buckets; their sum is in the shard
  Tensor grad_shard() const;
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<WeightAllGather> fp8_weights_;  // --fp8-comm weights
  // The working weights all-gathered after an update (under --fp8-comm weights only those
  // around the block linears, over around_'s partitions of the two ranges).
  void gather_working();
  void plan_gather_around();  // around_, once at construction (the step allocates nothing)
  Partition around_[2];
  bool armed_ = false, started_ = false;
  int64_t micro_ = 0;  // the micro-batches of this step already in the shard
  int64_t buckets_started_ = 0;
};

}  // namespace octet::dist
