// fp8/stats.cpp
#include "fp8/stats.h"

#include <cmath>
#include <vector>

#include "core/convert.h"
#include "io/json.h"

namespace octet::fp8 {

TensorStats read_stats(const QuantizedTensor& q) {
  TensorStats s;
  s.numel = q.data.numel();
  const Device device = q.data.device;
  copy_bytes(&s.amax, Device::cpu(), q.amax.data, device, sizeof(float));
  int32_t counts[2] = {0, 0};
  copy_bytes(counts, Device::cpu(), q.counts.data, device, sizeof counts);
  s.saturated = counts[0];
  s.flushed = counts[1];
  const int64_t blocks = q.scale_inv.numel();
  if (blocks == 0) return s;
  std::vector<uint8_t> raw(q.scale_inv.nbytes());
  copy_bytes(raw.data(), Device::cpu(), q.scale_inv.data, device, raw.size());
  for (int64_t i = 0; i < blocks; ++i) {
    const float scale_inv =
        q.grid().e8m0 ? e8m0_to_f32(raw[i]) : reinterpret_cast<const float*>(raw.data())[i];
    const float scale = 1.0f / scale_inv;
    s.min_scale = i == 0 ? scale : std::fmin(s.min_scale, scale);
    s.max_scale = i == 0 ? scale : std::fmax(s.max_scale, scale);
  }
  return s;
}

void Fp8Stats::add(const TensorStats& s) {
  const bool first = tensors_ == 0;
  ++tensors_;
  numel_ += s.numel;
  saturated_ += s.saturated;
  flushed_ += s.flushed;
  if (!std::isfinite(s.amax)) ++nonfinite_;
  amax_ = first || std::isnan(s.amax) || s.amax > amax_ ? s.amax : amax_;
  min_scale_ = first ? s.min_scale : std::fmin(min_scale_, s.min_scale);
  max_scale_ = first ? s.max_scale : std::fmax(max_scale_, s.max_scale);
}

Json Fp8Stats::json() const {
  Json j = Json::object();
  j["amax"] = json_finite_or_null(amax_);
  j["min_scale"] = json_finite_or_null(min_scale_);
  j["max_scale"] = json_finite_or_null(max_scale_);
  j["saturated"] = saturated_share();
  j["flushed"] = flushed_share();
  j["nonfinite_amax"] = nonfinite_;
  return j;
}

}  // namespace octet::fp8
