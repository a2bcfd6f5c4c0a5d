// cudasim/src/pointer_attributes.cpp: cudaPointerGetAttributes from the device-memory
// registry: device memory (with the device it was allocated on) or unregistered host memory.
// The emulated cuBLASLt uses it to refuse operands of another device.
#include <cuda_runtime_api.h>

#include "state.h"

extern "C" cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes,
                                                const void* ptr) {
  if (attributes == nullptr) return cudasim::detail::set_last_error(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  const cudasim::detail::Allocation* a = cudasim::detail::registry().find(ptr, 1);
  if (a == nullptr) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -1;
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  attributes->type = cudaMemoryTypeDevice;
  attributes->device = a->symbol ? cudasim::detail::current_device() : a->device;
  attributes->devicePointer = const_cast<void*>(ptr);
  return cudaSuccess;
}
