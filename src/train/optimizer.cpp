// train/optimizer.cpp: one AdamW update over the model's contiguous buffers.
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/optimizer.h"

namespace octet::train {
Optimizer::Optimizer(model::Llama& model, const TrainConfig& config)
    : model_(model), config_(config) {
  const int64_t p = model.parameter_count();
  const Device device = model.options().device;
  m_ = Buffer::for_tensor(device, DType::f32, {p});
  v_ = Buffer::for_tensor(device, DType::f32, {p});
  zero_bytes(m_.data(), device, m_.bytes());
  zero_bytes(v_.data(), device, v_.bytes());
}

Tensor Optimizer::m() const {
  return m_.tensor(DType::f32, {model_.parameter_count()});
}
Tensor Optimizer::v() const {
  return v_.tensor(DType::f32, {model_.parameter_count()});
}

bool finite_step_or_undo(model::Llama& model, const Tensor& loss, const Tensor& grad_sum_sq) {
  float host[2] = {0.0f, 0.0f};
  copy_bytes(&host[0], Device::cpu(), loss.data, loss.device, 4);
  copy_bytes(&host[1], Device::cpu(), grad_sum_sq.data, grad_sum_sq.device, 4);
  if (std::isfinite(host[0]) && std::isfinite(host[1])) return true;
  // The step's quantizations wrote their amax into the histories' current slot, which
  // update() would have rolled and cleared: clear it, so the state is as before.
  for (const auto& [name, t] : model.scaling_state_tensors()) {
    if (name != "fp8.amax_history") continue;
    const size_t row = static_cast<size_t>(t.cols()) * 4;
    for (int64_t i = 0; i < t.rows(); ++i)
      zero_bytes(static_cast<char*>(t.data) + static_cast<size_t>(i) * row, t.device, 4);
  }
  return false;
}

bool Optimizer::step(int64_t step, double lr, const Tensor& grad_sum_sq, const Tensor& loss) {
  // Global gradient norm and clipping, read by AdamW on the device.
  const Tensor grads = model_.grads(), master = model_.master(), m = this->m(), v = this->v();
  kernels::sum_of_squares(grads, grad_sum_sq);
  if (!loss.empty() && !finite_step_or_undo(model_, loss, grad_sum_sq)) return false;
  kernels::AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.step = step;
  s.max_grad_norm = static_cast<float>(std::max(0.0, config_.grad_clip));
  s.weight_decay = static_cast<float>(config_.weight_decay);
  // AdamW writes the bf16 working weights in its pass over the master (one pass, not two).
  const auto part = [](const Tensor& t, int64_t begin, int64_t end) {
    return t.elements(begin, end);
  };
  for (const model::Llama::MasterRun& r : model_.master_runs()) {
    if (r.end <= r.first) continue;
    kernels::adamw_step_decayed_first(part(master, r.first, r.end), part(grads, r.first, r.end),
                                      part(m, r.first, r.end), part(v, r.first, r.end), r.first,
                                      model_.decayed_count(), s, grad_sum_sq, r.working);
  }
  model_.working_weights_written();
  model_.update_scaling();
  return true;
}

}  // namespace octet::train
