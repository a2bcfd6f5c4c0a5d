// kernels/cpu/scaling_cpu.cpp: the delayed-scaling update on the CPU.
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace octet::kernels::cpu {

void delayed_scaling_update(const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                            const Tensor& fp8_max, const Tensor& nonfinite, AmaxReduce reduce,
                            int margin) {
  const int64_t n = history.rows(), len = history.cols();
  float* h = history.as<float>();
  for (int64_t i = 0; i < n; ++i) {
    float* row = h + i * len;
    float amax = row[0];
    if (reduce == AmaxReduce::max) {
      // NaN must win, as torch.max does, so that it is seen and reported.
      for (int64_t j = 1; j < len; ++j)
        amax = (std::isnan(row[j]) || row[j] > amax) ? row[j] : amax;
    }
    const float current = row[0];
    for (int64_t j = 0; j + 1 < len; ++j) row[j] = row[j + 1];
    row[len - 1] = current;
    row[0] = 0.0f;
    if (!std::isfinite(amax)) {
      if (!nonfinite.empty()) ++nonfinite.as<int32_t>()[0];
      continue;  // keep the previous scale
    }
    if (amax > 0.0f) {
      scale.as<float>()[i] = scale_from_amax(amax, fp8_max.as<float>()[i], margin, false);
    }
    scale_inv.as<float>()[i] = 1.0f / scale.as<float>()[i];
  }
}

}  // namespace octet::kernels::cpu
