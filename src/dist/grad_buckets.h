// dist/grad_buckets.h: ZeRO 2's gradient buckets: which parameters' gradients are
// reduce-scattered together, when the backward completes them, and the memory the backward
// writes them into instead of a gradient buffer of all P parameters (model::Llama::
// place_grads). In backward's order: the LM head, groups of consecutive layers' matrices of
// at most `bucket_bytes` (a layer larger than that is a bucket alone), the embedding; they
// take turns in two slots, so that one bucket's reduce-scatter overlaps the backward of the
// next. The norm weights (and an embedding tied to the LM head), which take gradients
// throughout the backward, have memory of their own, reduced at the end.
// defines: GradBucket, GradBuckets, kDefaultBucketBytes
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/llama.h"

namespace octet::dist {

// DDP's default bucket size: 25 MiB.
inline constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

struct GradBucket {
  int64_t lo, hi;   // parameters [lo, hi)
  int slot;         // 0 or 1 (in turn, in backward's order); -1: memory of its own
  int64_t done_at;  // the backward hook's argument after which its gradients are final
  int64_t first_layer = -1, last_layer = -1;  // the layers whose matrices it holds, if any
};

class GradBuckets {
 public:
  // Allocates the slots and the norms' memory (zeroed) on the model's device.
  GradBuckets(const model::Llama& model, int64_t bucket_bytes);

  // In backward's order, the two-slot buckets first, then those with memory of their own.
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  int64_t slotted() const { return slotted_; }  // how many buckets take turns in the slots
  // The bucket's gradients, f32 [hi - lo] (in its slot or its own memory).
  Tensor storage(const GradBucket& b) const;
  // For model::Llama::place_grads: every parameter's range and its memory.
  std::vector<model::Llama::GradRange> placement() const;
  // The gradient bytes held here (the two slots and the own memory).
  size_t bytes() const;

 private:
  std::vector<GradBucket> buckets_;
  int64_t slotted_ = 0;
  Buffer slots_[2];
  std::vector<Buffer> own_;  // one per bucket with slot -1, in order
  Device device_;
};

}  // namespace octet::dist
