// cudasim/src/state.h: the emulator's shared internal state: the device-memory registry,
// errors (the launch error and the sticky fault), devices, and the running block.
// defines: cudasim::detail::{Registry, registry, set_last_error, sticky_error, set_sticky,
//          current_device, device_count, kernel_name, Block}
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cudasim::detail {

struct Allocation {
  size_t bytes;
  int device;
  bool symbol;  // a __device__ variable, not a cudaMalloc
};

// Every live device allocation by start address.
class Registry {
 public:
  void add(const void* p, size_t bytes, int device, bool symbol);
  bool remove(const void* p);  // false when p is not the start of a live cudaMalloc
  // Removes every cudaMalloc of `device` and returns their start addresses (cudaDeviceReset).
  std::vector<void*> remove_device(int device);
  // The allocation holding [p, p + bytes), or null. `end_ok`: p may be one past the end.
  const Allocation* find(const void* p, size_t bytes, bool end_ok = false) const;

 private:
  mutable std::mutex mutex_;
  std::map<uintptr_t, Allocation> map_;
};
Registry& registry();

cudaError_t set_last_error(cudaError_t e);  // returns e
cudaError_t take_last_error();
cudaError_t sticky_error();
void set_sticky(cudaError_t e);
void clear_sticky();
int device_count();
int current_device();
std::string kernel_name(const void* kernel);
uint64_t seed();

}  // namespace cudasim::detail
