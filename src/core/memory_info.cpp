// core/memory_info.cpp: host memory from /proc/meminfo (or sysconf), GPU memory through
// the CUDA backend.
#include "core/memory_info.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/device_backend.h"

namespace octet {
namespace {

std::optional<MemoryInfo> host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  uint64_t available = 0, swap_free = 0, total = 0;
  bool have_available = false, have_total = false;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "MemAvailable:") available = kib * 1024, have_available = true;
    if (key == "SwapFree:") swap_free = kib * 1024;
    if (key == "MemTotal:") total = kib * 1024, have_total = true;
  }
  if (have_available && have_total) {
    return MemoryInfo{available + swap_free, total, "/proc/meminfo MemAvailable + SwapFree"};
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), all = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || all <= 0 || page <= 0) return std::nullopt;
  return MemoryInfo{static_cast<uint64_t>(pages) * static_cast<uint64_t>(page),
                    static_cast<uint64_t>(all) * static_cast<uint64_t>(page),
                    "sysconf(_SC_AVPHYS_PAGES)"};
}

}  // namespace

std::optional<MemoryInfo> memory_info(Device device) {
  if (device.is_cpu()) return host_memory();
  size_t free_bytes = 0, total_bytes = 0;
  if (!detail::cuda_mem_info(device.index, &free_bytes, &total_bytes)) return std::nullopt;
  return MemoryInfo{free_bytes, total_bytes, "cudaMemGetInfo"};
}

}  // namespace octet
