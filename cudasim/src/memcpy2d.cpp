// cudasim/src/memcpy2d.cpp: cudaMemcpy2DAsync, row by row through cudaMemcpyAsync (which
// checks each row's kind against the device-memory registry). gemm_cuda.cpp pads FP8
// GEMM outputs with it.
#include <cuda_runtime_api.h>

#include <cstddef>

extern "C" cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                         size_t width, size_t height, cudaMemcpyKind kind,
                                         cudaStream_t stream) {
  if (height > 0 && (width > dpitch || width > spitch)) return cudaErrorInvalidPitchValue;
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e =
        cudaMemcpyAsync(static_cast<char*>(dst) + r * dpitch,
                        static_cast<const char*>(src) + r * spitch, width, kind, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
