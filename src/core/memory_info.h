// core/memory_info.h: how much memory a device has left for a new run: the host's
// available memory (/proc/meminfo MemAvailable + SwapFree, else sysconf) or a GPU's free
// memory (cudaMemGetInfo).
// defines: MemoryInfo, memory_info
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/device.h"

namespace octet {

struct MemoryInfo {
  uint64_t available = 0;  // bytes a new allocation can still get
  uint64_t total = 0;      // bytes the device has
  std::string source;      // where the numbers come from ("/proc/meminfo", "cudaMemGetInfo")
};

// nullopt where the device cannot say (the emulated CUDA device).
std::optional<MemoryInfo> memory_info(Device device);

}  // namespace octet
