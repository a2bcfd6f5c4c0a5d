// cudasim/src/runtime_queries.cpp: the runtime's queries about streams and devices that
// octet asks: cudaStreamQuery (a launch runs to completion before it returns, so every
// stream is always idle) and cudaDeviceGetAttribute (the emulated device is a compute
// capability 9.0 part, as the kernels' sm_90a target).
#include <cuda_runtime_api.h>

#include "state.h"

using namespace cudasim::detail;

cudaError_t cudaStreamQuery(cudaStream_t) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  if (value == nullptr || device < 0 || device >= device_count())
    return set_last_error(device < 0 || device >= device_count() ? cudaErrorInvalidDevice
                                                                 : cudaErrorInvalidValue);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = 227 * 1024;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    default:
      return set_last_error(cudaErrorInvalidValue);  // not emulated: say so, never guess
  }
}
