// fp8/scaling.cpp
#include "fp8/scaling.h"

#include "core/error.h"
#include "kernels/scaling.h"

namespace octet::fp8 {
DelayedScalingState::DelayedScalingState(Device device, const DelayedScaling& options)
    : options_(options), device_(device) {
  OCTET_CHECK(options.history_len >= 1, "delayed scaling", "history_len must be >= 1, got ",
              options.history_len);
}

DelayedScalingState::DelayedScalingState(Device device, const DelayedScaling& options,
                                         const std::vector<DType>& formats)
    : DelayedScalingState(device, options) {
  for (DType f : formats) add_slot(f);
  allocate();
}

int DelayedScalingState::add_slot(DType format) {
  OCTET_CHECK(!allocated_, "delayed scaling",
              "add_slot after allocate(): every tensor takes its slot before the state is "
              "allocated");
  OCTET_CHECK(is_fp8(format), "delayed scaling", "tensor formats must be e4m3 or e5m2, got ",
              dtype_name(format));
  formats_.push_back(format);
  return size() - 1;
}

void DelayedScalingState::allocate() {
  OCTET_CHECK(!allocated_, "delayed scaling", "allocate() called twice");
  allocated_ = true;
  if (formats_.empty()) return;
  const int64_t n = size(), len = options_.history_len;
  storage_ = Arena(device_);
  history_ = storage_.add("amax history", DType::f32, {n, len});
  scale_ = storage_.add("scale", DType::f32, {n});
  scale_inv_ = storage_.add("scale_inv", DType::f32, {n});
  fp8_max_ = storage_.add("fp8_max", DType::f32, {n});
  nonfinite_ = storage_.add("nonfinite", DType::i32, {1});
  storage_.allocate();

  // Initial state: empty histories, scale 1 (as Transformer Engine starts).
  std::vector<float> fp8_max(formats_.size());
  for (size_t i = 0; i < fp8_max.size(); ++i) {
    fp8_max[i] = static_cast<float>(dtype_info(formats_[i]).max_finite);
  }
  copy_bytes(storage_.tensor(fp8_max_).data, device_, fp8_max.data(), Device::cpu(),
             fp8_max.size() * 4);
  restore(std::vector<float>(fp8_max.size(), 1.0f),
          std::vector<float>(fp8_max.size() * static_cast<size_t>(len), 0.0f));
  const int32_t zero = 0;
  copy_bytes(nonfinite().data, device_, &zero, Device::cpu(), 4);
}

std::vector<std::pair<std::string, Tensor>> DelayedScalingState::checkpoint_tensors() const {
  if (size() == 0) return {};
  return {{"fp8.amax_history", history()}, {"fp8.scale", scale_all()}};
}

Tensor DelayedScalingState::whole(Arena::Region region) const {
  OCTET_CHECK(allocated_ && size() > 0, "delayed scaling",
              "the state is used before allocate() or has no slots: allocate it once every "
              "tensor has its slot");
  return storage_.tensor(region);
}

Tensor DelayedScalingState::element(Arena::Region region, int slot, int64_t stride) const {
  OCTET_CHECK(slot >= 0 && slot < size(), "delayed scaling", "slot ", slot, " out of ", size());
  whole(region);
  return storage_.view(region, DType::f32, {1}, 4 * static_cast<size_t>(slot * stride));
}

Tensor DelayedScalingState::scale(int slot) const {
  return element(scale_, slot, 1);
}
Tensor DelayedScalingState::scale_inv(int slot) const {
  return element(scale_inv_, slot, 1);
}
Tensor DelayedScalingState::amax_slot(int slot) const {
  return element(history_, slot, options_.history_len);
}
Tensor DelayedScalingState::history() const {
  return whole(history_);
}
Tensor DelayedScalingState::scale_all() const {
  return whole(scale_);
}

void DelayedScalingState::refresh_scale_inv() {
  restore(scales_host(), history_host());
}

Tensor DelayedScalingState::nonfinite() const {
  return whole(nonfinite_);
}

void DelayedScalingState::update() {
  if (size() == 0) return;
  kernels::delayed_scaling_update(
      history(), whole(scale_), whole(scale_inv_), whole(fp8_max_), nonfinite(),
      options_.compute == AmaxCompute::max ? kernels::AmaxReduce::max
                                           : kernels::AmaxReduce::most_recent,
      options_.margin);
}

std::vector<float> DelayedScalingState::scales_host() const {
  std::vector<float> out(formats_.size());
  copy_bytes(out.data(), Device::cpu(), whole(scale_).data, device_, out.size() * 4);
  return out;
}

std::vector<float> DelayedScalingState::history_host() const {
  std::vector<float> out(formats_.size() * options_.history_len);
  copy_bytes(out.data(), Device::cpu(), history().data, device_, out.size() * 4);
  return out;
}

int DelayedScalingState::nonfinite_count() const {
  int32_t count = 0;
  copy_bytes(&count, Device::cpu(), nonfinite().data, device_, 4);
  return count;
}

void DelayedScalingState::restore(const std::vector<float>& scales,
                                  const std::vector<float>& history_values) {
  const size_t n = formats_.size();
  OCTET_CHECK(scales.size() == n && history_values.size() == n * options_.history_len,
              "delayed scaling", "expected ", n, " scales and ", n * options_.history_len,
              " history values, got ", scales.size(), " and ", history_values.size());
  std::vector<float> inv(n);
  for (size_t i = 0; i < n; ++i) inv[i] = 1.0f / scales[i];
  const Device d = device_;
  copy_bytes(whole(scale_).data, d, scales.data(), Device::cpu(), n * 4);
  copy_bytes(whole(scale_inv_).data, d, inv.data(), Device::cpu(), n * 4);
  copy_bytes(history().data, d, history_values.data(), Device::cpu(), history_values.size() * 4);
}

}  // namespace octet::fp8
