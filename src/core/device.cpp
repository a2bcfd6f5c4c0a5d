// core/device.cpp
#include "core/device.h"

#include <charconv>

#include "core/device_backend.h"
#include "core/error.h"

namespace octet {

Device device_from_name(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.starts_with("cuda:")) {
    int index = -1;
    const char* first = name.data() + 5;
    const char* last = name.data() + name.size();
    auto [ptr, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && ptr == last && index >= 0) return Device::cuda(index);
  }
  OCTET_FAIL("device", "unknown device '", std::string(name), "'; expected cpu, cuda or cuda:N");
}

std::string device_name(Device device) {
  if (device.is_cpu()) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

bool cuda_compiled() {
  return detail::cuda_in_build();
}
int cuda_device_count() {
  return detail::cuda_count();
}
void cuda_synchronize() {
  detail::cuda_sync();
}

}  // namespace octet
