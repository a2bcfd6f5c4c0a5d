// cuda_runtime.h (cudasim): stands in for CUDA's header of the same name when octet's CUDA
// sources are compiled with the host compiler. NVIDIA's own declarations, enums and types come
// from the toolkit's cuda_runtime_api.h; cudasim implements the functions octet calls, and adds
// the C++ templates of the real cuda_runtime.h, the device keywords and builtins.
// defines: cudaFuncSetAttribute (template), cudaGetSymbolAddress (template)
#pragma once

#include <cuda_runtime_api.h>

#include <vector_functions.h>

#include "cudasim/device.h"
#include "cudasim/launch.h"

namespace cudasim::detail {
cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value);
cudaError_t symbol_address(void** address, const void* symbol, size_t bytes);
}  // namespace cudasim::detail

template <class T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return cudasim::detail::func_set_attribute(reinterpret_cast<const void*>(entry), attr, value);
}

// The address of a __device__ variable; the variable joins the device-memory registry.
template <class T>
cudaError_t cudaGetSymbolAddress(void** address, const T& symbol) {
  return cudasim::detail::symbol_address(address, &symbol, sizeof(T));
}
