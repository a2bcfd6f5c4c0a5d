// model/llama_shard.cpp: a model whose fp32 master holds only one shard of the parameters
// (ZeRO 1): shard_master() and the views data parallelism updates and gathers; one whose
// gradients live in data parallelism's buckets (ZeRO 2): place_grads(); and the block
// linears' weights for the FP8 all-gather.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "model/llama_parts.h"

namespace octet::model {

void Llama::check_master_whole(const char* what) const {
  OCTET_CHECK(master_whole(), "model", what, ": the fp32 master holds only parameters [",
              master_begin_, ", ", master_end_, ") of ", params_count_,
              " (sharded under ZeRO 1); gather it first (dist::DataParallel::gather_master)");
}

Tensor Llama::master_shard() const {
  return Tensor(master_.data(), DType::f32, {master_end_ - master_begin_}, options_.device);
}

Tensor Llama::working() const {
  if (!working_.data()) return master_.tensor(DType::f32, {params_count_});
  OCTET_CHECK(master_only_end_ == master_only_begin_, "model",
              "working(): under fp8 the block linears have no working copy until shard_master()");
  return working_.tensor(working_dtype(), {params_count_});
}

void Llama::shard_master(int64_t begin, int64_t end) {
  OCTET_CHECK(0 <= begin && begin <= end && end <= params_count_, "model", "shard_master: [", begin,
              ", ", end, ") is not a range of the ", params_count_, " parameters");
  const Device device = options_.device;
  if (!working_.data()) return;  // fp32: the master is the working weights
  if (master_only_end_ > master_only_begin_) {
    // fp8: the block linears' working copy (bf16) joins the rest, then they are rebound.
    Buffer working = Buffer::for_tensor(device, working_dtype(), {params_count_});
    const size_t before = static_cast<size_t>(master_only_begin_) * 2;
    const size_t after = static_cast<size_t>(params_count_ - master_only_end_) * 2;
    auto* w = static_cast<uint16_t*>(working.data());
    const auto* old = static_cast<const uint16_t*>(working_.data());
    copy_bytes(w, device, old, device, before);
    copy_bytes(w + master_only_end_, device, old + master_only_begin_, device, after);
    const int64_t b = master_only_begin_, e = master_only_end_;
    working_ = std::move(working);
    master_only_begin_ = master_only_end_ = 0;
    OCTET_CHECK(master_begin_ <= b && e <= master_end_, "model",
                "shard_master under fp8: the block linears are not in the master held");
    master_to_working(static_cast<const float*>(master_.data()) + (b - master_begin_), b, e);
    bind_linears();
  }
  if (begin == master_begin_ && end == master_end_) return;
  Buffer master = Buffer::for_tensor(device, DType::f32, {std::max<int64_t>(1, end - begin)});
  // The values this model holds in [begin, end) are kept.
  const int64_t b = std::max(begin, master_begin_), e = std::min(end, master_end_);
  if (e > b) {
    copy_bytes(static_cast<float*>(master.data()) + (b - begin), device,
               static_cast<const float*>(master_.data()) + (b - master_begin_), device,
               static_cast<size_t>(e - b) * 4);
  }
  master_ = std::move(master);
  master_begin_ = begin;
  master_end_ = end;
}

void Llama::place_grads(std::vector<GradRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const GradRange& a, const GradRange& b) { return a.begin < b.begin; });
  int64_t at = 0;
  for (const GradRange& r : ranges) {
    OCTET_CHECK(r.begin == at && r.end > r.begin && r.at.dtype == DType::f32 &&
                    r.at.numel() == r.end - r.begin && r.at.device == options_.device,
                "model", "place_grads: the ranges must cover the ", params_count_,
                " parameters in order, each with f32 [end - begin] on ",
                device_name(options_.device), "; got [", r.begin, ", ", r.end, ") at ", r.at.str(),
                " after parameter ", at);
    at = r.end;
  }
  OCTET_CHECK(at == params_count_, "model", "place_grads: the ranges end at parameter ", at,
              ", not at ", params_count_);
  for (const ParamInfo& p : params_) {
    const auto r = std::upper_bound(ranges.begin(), ranges.end(), p.offset,
                                    [](int64_t o, const GradRange& g) { return o < g.begin; });
    OCTET_CHECK(p.offset + p.shape.numel() <= std::prev(r)->end, "model", "place_grads: ", p.name,
                " is cut by the end of a range at ", std::prev(r)->end);
  }
  grad_ranges_ = std::move(ranges);
  grads_ = Buffer();
  bind_linears();
}

Tensor Llama::placed_grad_view(const ParamInfo& p) const {
  // The range holding p's first element (p and a fused block linear lie within one range).
  const auto r =
      std::prev(std::upper_bound(grad_ranges_.begin(), grad_ranges_.end(), p.offset,
                                 [](int64_t o, const GradRange& g) { return o < g.begin; }));
  OCTET_CHECK(p.offset + p.shape.numel() <= r->end, "model", "the gradient of ", p.name,
              " crosses the end of a placed range at ", r->end);
  return Tensor(static_cast<float*>(r->at.data) + (p.offset - r->begin), DType::f32, p.shape,
                options_.device);
}

std::vector<BlockWeight> Llama::block_weights() {
  std::vector<BlockWeight> out;
  if (options_.precision != nn::Precision::fp8) return out;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    Layer& layer = layers_[l];
    for (auto [name, linear] : {std::pair{"self_attn.q_proj.weight", &layer.qkv},
                                std::pair{"self_attn.o_proj.weight", &layer.o},
                                std::pair{"mlp.gate_proj.weight", &layer.gate_up},
                                std::pair{"mlp.down_proj.weight", &layer.down}}) {
      const nn::LinearConfig& c = linear->config();
      out.push_back({param(prefix + name).offset, c.out_features, c.in_features, linear});
    }
  }
  return out;
}

}  // namespace octet::model
