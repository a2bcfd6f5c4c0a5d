// core/device.cpp
#include "core/device.h"

#include <atomic>
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
void* cuda_stream() {
  return detail::cuda_stream();
}
void set_cuda_stream(void* stream) {
  detail::cuda_set_stream(stream);
}

namespace {
constexpr int kTrackedDevices = 17;  // the CPU and cuda:0..15
struct MemoryCounter {
  std::atomic<size_t> in_use{0}, peak{0};
};
MemoryCounter& counter(Device device) {
  static MemoryCounter counters[kTrackedDevices];
  const int i = device.is_cpu() ? 0 : 1 + device.index;
  OCTET_CHECK(i >= 0 && i < kTrackedDevices, "device", "device ", device_name(device),
              " is beyond the ", kTrackedDevices - 1, " CUDA devices octet tracks");
  return counters[i];
}
}  // namespace

namespace detail {
void count_allocation(Device device, size_t bytes) {
  MemoryCounter& c = counter(device);
  const size_t now = c.in_use.fetch_add(bytes) + bytes;
  size_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}
void count_release(Device device, size_t bytes) noexcept {
  counter(device).in_use.fetch_sub(bytes);
}
}  // namespace detail

size_t device_bytes_in_use(Device device) {
  return counter(device).in_use.load();
}
size_t device_peak_bytes(Device device) {
  return counter(device).peak.load();
}
void reset_device_peak_bytes(Device device) {
  MemoryCounter& c = counter(device);
  c.peak.store(c.in_use.load());
}

}  // namespace octet
