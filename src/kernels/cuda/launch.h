// kernels/cuda/launch.h: the one way octet launches a kernel. Under nvcc it is the <<<>>>
// launch; in the emulated-device build (OCTET_CUDASIM, see docs/cuda-without-gpu.md) the same
// call runs the kernel on cudasim. Also the declaration of a kernel's dynamic shared memory,
// the one construct the host compiler cannot take as CUDA writes it.
// defines: launch_kernel, OCTET_DYNAMIC_SHARED
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#if defined(OCTET_CUDASIM)
#include "cudasim/launch.h"
#include "cudasim/thread.h"
#endif

namespace octet::kernels::cuda {

// kernel<<<grid, block, dynamic_smem, stream>>>(args...)
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem,
                   cudaStream_t stream, Args&&... args) {
#if defined(OCTET_CUDASIM)
  cudasim::launch(kernel, grid, block, dynamic_smem, stream, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, dynamic_smem, stream>>>(std::forward<Args>(args)...);
#endif
}

}  // namespace octet::kernels::cuda

// `extern __shared__ __align__(16) T name[];`: the block's dynamic shared memory as T[].
#if defined(OCTET_CUDASIM)
#define OCTET_DYNAMIC_SHARED(T, name) \
  T* const name = static_cast<T*>(::cudasim::dynamic_shared_base())
#else
#define OCTET_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
