// dist/grad_buckets.cpp: ZeRO 2's bucket plan and the memory the backward writes into.
#include "dist/grad_buckets.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace octet::dist {
namespace {

Buffer zeroed(Device device, int64_t n) {
  Buffer b = Buffer::for_tensor(device, DType::f32, {std::max<int64_t>(1, n)});
  zero_bytes(b.data(), device, b.bytes());
  return b;
}

}  // namespace

GradBuckets::GradBuckets(const model::Llama& model, int64_t bucket_bytes)
    : device_(model.options().device) {
  OCTET_CHECK(bucket_bytes >= 4, "dist", "the gradient bucket size must be at least 4 bytes, got ",
              bucket_bytes, " (--bucket-mb)");
  const model::LlamaConfig& c = model.config();
  const int64_t layers = c.num_hidden_layers, p = model.parameter_count();
  auto matrices = [&](int64_t l) {  // layer l's matrices: from its q_proj to its down_proj
    const std::string name = "model.layers." + std::to_string(l) + ".";
    const model::ParamInfo& down = model.param(name + "mlp.down_proj.weight");
    return std::pair{model.param(name + "self_attn.q_proj.weight").offset,
                     down.offset + down.shape.numel()};
  };
  const model::ParamInfo& embedding = model.param("model.embed_tokens.weight");
  const int64_t embedding_end = embedding.offset + embedding.shape.numel();
  const bool tied = c.tie_word_embeddings;
  // The LM head's gradient is final right after its backward (hook `layers`).
  if (!tied) {
    const model::ParamInfo& head = model.param("lm_head.weight");
    buckets_.push_back({head.offset, head.offset + head.shape.numel(), 0, layers});
  }
  // Consecutive layers, from the last, while the group fits in the bucket size (the layers'
  // matrices are adjacent: a group is one range).
  const int64_t cap = bucket_bytes / 4;
  for (int64_t l = layers - 1; l >= 0;) {
    const int64_t top = l;
    auto [lo, hi] = matrices(l--);
    while (l >= 0 && hi - matrices(l).first <= cap) lo = matrices(l--).first;
    buckets_.push_back({lo, hi, 0, l + 1, l + 1, top});
  }
  if (!tied) buckets_.push_back({embedding.offset, embedding_end, 0, -1});
  slotted_ = static_cast<int64_t>(buckets_.size());
  int64_t widest[2] = {0, 0};
  for (int64_t k = 0; k < slotted_; ++k) {
    GradBucket& b = buckets_[static_cast<size_t>(k)];
    b.slot = static_cast<int>(k % 2);
    widest[b.slot] = std::max(widest[b.slot], b.hi - b.lo);
  }
  for (int s = 0; s < 2; ++s) slots_[s] = zeroed(device_, widest[s]);
  // Memory of their own: an embedding the LM head shares, and the norm weights.
  if (tied) buckets_.push_back({embedding.offset, embedding_end, -1, -1});
  if (model.decayed_count() < p) buckets_.push_back({model.decayed_count(), p, -1, -1});
  for (size_t k = static_cast<size_t>(slotted_); k < buckets_.size(); ++k)
    own_.push_back(zeroed(device_, buckets_[k].hi - buckets_[k].lo));
}

Tensor GradBuckets::storage(const GradBucket& b) const {
  const int64_t n = b.hi - b.lo;
  if (b.slot >= 0) return slots_[b.slot].view(DType::f32, {n});
  const auto k = static_cast<size_t>(&b - buckets_.data() - slotted_);
  OCTET_CHECK(k < own_.size(), "dist", "storage(): not one of this plan's buckets");
  return own_[k].view(DType::f32, {n});
}

std::vector<model::Llama::GradRange> GradBuckets::placement() const {
  std::vector<model::Llama::GradRange> out;
  for (const GradBucket& b : buckets_) out.push_back({b.lo, b.hi, storage(b)});
  return out;
}

size_t GradBuckets::bytes() const {
  size_t total = slots_[0].bytes() + slots_[1].bytes();
  for (const Buffer& b : own_) total += b.bytes();
  return total;
}

}  // namespace octet::dist
