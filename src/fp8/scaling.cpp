// fp8/scaling.cpp
#include "fp8/scaling.h"

#include "core/error.h"
#include "kernels/scaling.h"

namespace octet::fp8 {
namespace {
size_t align64(size_t x) {
  return (x + 63) / 64 * 64;
}
}  // namespace

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
  const Device device = device_;
  const std::vector<DType>& formats = formats_;
  const size_t n = formats.size(), len = static_cast<size_t>(options_.history_len);
  history_offset_ = 0;
  scale_offset_ = align64(n * len * 4);
  scale_inv_offset_ = scale_offset_ + align64(n * 4);
  fp8_max_offset_ = scale_inv_offset_ + align64(n * 4);
  nonfinite_offset_ = fp8_max_offset_ + align64(n * 4);
  storage_ = Buffer(device, nonfinite_offset_ + 64);

  // Initial state: empty histories, scale 1 (as Transformer Engine starts).
  std::vector<float> fp8_max(n);
  for (size_t i = 0; i < n; ++i) fp8_max[i] = static_cast<float>(dtype_info(formats[i]).max_finite);
  copy_bytes(view(DType::f32, static_cast<int64_t>(n), fp8_max_offset_).data, device,
             fp8_max.data(), Device::cpu(), n * 4);
  restore(std::vector<float>(n, 1.0f), std::vector<float>(n * len, 0.0f));
  const int32_t zero = 0;
  copy_bytes(nonfinite().data, device, &zero, Device::cpu(), 4);
}

std::vector<std::pair<std::string, Tensor>> DelayedScalingState::checkpoint_tensors() const {
  if (size() == 0) return {};
  return {{"fp8.amax_history", history()}, {"fp8.scale", scale_all()}};
}

Tensor DelayedScalingState::view(DType dtype, int64_t count, size_t offset) const {
  OCTET_CHECK(allocated_, "delayed scaling",
              "the state is used before allocate(): allocate it once every tensor has its slot");
  return storage_.view(dtype, {count}, offset);
}

Tensor DelayedScalingState::scale(int slot) const {
  OCTET_CHECK(slot >= 0 && slot < size(), "delayed scaling", "slot ", slot, " out of ", size());
  return view(DType::f32, 1, scale_offset_ + 4 * static_cast<size_t>(slot));
}
Tensor DelayedScalingState::scale_inv(int slot) const {
  OCTET_CHECK(slot >= 0 && slot < size(), "delayed scaling", "slot ", slot, " out of ", size());
  return view(DType::f32, 1, scale_inv_offset_ + 4 * static_cast<size_t>(slot));
}
Tensor DelayedScalingState::amax_slot(int slot) const {
  OCTET_CHECK(slot >= 0 && slot < size(), "delayed scaling", "slot ", slot, " out of ", size());
  return view(DType::f32, 1, 4 * static_cast<size_t>(slot) * options_.history_len);
}
Tensor DelayedScalingState::history() const {
  OCTET_CHECK(allocated_, "delayed scaling",
              "the state is used before allocate(): allocate it once every tensor has its slot");
  return storage_.view(DType::f32, {size(), options_.history_len}, history_offset_);
}
Tensor DelayedScalingState::scale_all() const {
  return view(DType::f32, size(), scale_offset_);
}

void DelayedScalingState::refresh_scale_inv() {
  restore(scales_host(), history_host());
}

Tensor DelayedScalingState::nonfinite() const {
  return view(DType::i32, 1, nonfinite_offset_);
}

void DelayedScalingState::update() {
  if (size() == 0) return;
  kernels::delayed_scaling_update(history(), view(DType::f32, size(), scale_offset_),
                                  view(DType::f32, size(), scale_inv_offset_),
                                  view(DType::f32, size(), fp8_max_offset_), nonfinite(),
                                  options_.compute == AmaxCompute::max
                                      ? kernels::AmaxReduce::max
                                      : kernels::AmaxReduce::most_recent,
                                  options_.margin);
}

std::vector<float> DelayedScalingState::scales_host() const {
  std::vector<float> out(formats_.size());
  copy_bytes(out.data(), Device::cpu(), view(DType::f32, size(), scale_offset_).data,
             storage_.device(), out.size() * 4);
  return out;
}

std::vector<float> DelayedScalingState::history_host() const {
  std::vector<float> out(formats_.size() * options_.history_len);
  copy_bytes(out.data(), Device::cpu(), history().data, storage_.device(), out.size() * 4);
  return out;
}

int DelayedScalingState::nonfinite_count() const {
  int32_t count = 0;
  copy_bytes(&count, Device::cpu(), nonfinite().data, storage_.device(), 4);
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
  const Device d = storage_.device();
  copy_bytes(view(DType::f32, size(), scale_offset_).data, d, scales.data(), Device::cpu(), n * 4);
  copy_bytes(view(DType::f32, size(), scale_inv_offset_).data, d, inv.data(), Device::cpu(), n * 4);
  copy_bytes(history().data, d, history_values.data(), Device::cpu(), history_values.size() * 4);
}

}  // namespace octet::fp8
