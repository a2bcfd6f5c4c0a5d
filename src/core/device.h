// core/device.h: where a tensor lives (the CPU or one CUDA device) and what the
// machine has at run time.
// defines: DeviceType, Device, device_from_name, device_name, cuda_compiled,
//          cuda_device_count, cuda_available, cuda_synchronize
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace octet {

enum class DeviceType : unsigned char { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda", "cuda:1". Throws octet::Error on anything else.
Device device_from_name(std::string_view name);
std::string device_name(Device device);

// True when this build contains CUDA code (nvcc was found at configure time).
bool cuda_compiled();
// Number of usable CUDA devices now: 0 without CUDA in the build, without a
// driver or without a GPU. Never throws.
int cuda_device_count();
inline bool cuda_available() {
  return cuda_device_count() > 0;
}
// Waits for all work on the current CUDA device; a no-op without CUDA.
void cuda_synchronize();

// The CUDA stream (a cudaStream_t) on which every octet kernel, copy and GEMM of the
// current CUDA device is queued, one per device: the legacy default stream unless set for
// that device (a step captured into a CUDA graph sets its own).
void* cuda_stream();
void set_cuda_stream(void* stream);

// Bytes of Buffer memory allocated on a device now and at most since the last reset
// (what `octet bench` reports as peak memory: octet allocates everything as Buffers).
size_t device_bytes_in_use(Device device);
size_t device_peak_bytes(Device device);
void reset_device_peak_bytes(Device device);

}  // namespace octet
