// cudasim/thread.h: what an emulated CUDA thread can ask of the emulator (its lane, its
// block's dynamic shared arena, warp collectives, device faults, the device-memory registry).
// The PTX instruction twins and the device builtins are written on top of this.
// defines: cudasim::lane, cudasim::dynamic_shared_base, cudasim::dynamic_shared_bytes,
//          cudasim::warp_gather, cudasim::fault, cudasim::is_device_range
#pragma once

#include <driver_types.h>

#include <array>
#include <cstddef>
#include <source_location>
#include <string>
#include <type_traits>

namespace cudasim {

// Linear thread index % 32 of the calling emulated thread.
unsigned lane();
// This block's dynamic shared arena (a heap allocation of exactly the launch's size).
void* dynamic_shared_base();
size_t dynamic_shared_bytes();

namespace detail {
// Type-erased warp collective: stores `value` (size bytes) for this lane, waits for every lane
// of `mask`, then fills out[0..32*size) with the values by lane (lanes outside mask untouched).
void warp_collective(unsigned mask, const void* value, void* out, size_t size, const char* kind,
                     const std::source_location& where);
}  // namespace detail

// Warp collective: every lane named in `mask` calls it with its `value`; returns the 32 values
// by lane (lanes outside mask: value-initialised). A lane of `mask` that exits or waits
// elsewhere is a reported error (not a hang); so are lanes that disagree on the mask.
template <class T>
std::array<T, 32> warp_gather(unsigned mask, const T& value, const char* kind = "warp_gather",
                              const std::source_location& where = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "warp_gather moves values by their bytes");
  std::array<T, 32> out{};
  detail::warp_collective(mask, &value, out.data(), sizeof(T), kind, where);
  return out;
}

// A device fault: a message on stderr naming the kernel, block and thread, then the calling
// kernel stops and `code` becomes the sticky error the real runtime would report.
[[noreturn]] void fault(cudaError_t code, const std::string& what);

// True when [p, p + bytes) lies inside one live cudaMalloc allocation (or a __device__
// variable whose address was taken with cudaGetSymbolAddress).
bool is_device_range(const void* p, size_t bytes);

}  // namespace cudasim
