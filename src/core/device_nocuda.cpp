// core/device_nocuda.cpp: the device backend of a build without CUDA: there is
// no CUDA device, and asking for one is an error that says how to get one.
#include "core/device_backend.h"
#include "core/error.h"

namespace octet::detail {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  OCTET_FAIL(op,
             "this octet was built without CUDA (no nvcc at configure time); "
             "reconfigure on a machine with the CUDA toolkit to use --device cuda");
}
}  // namespace

void* cuda_alloc(int, size_t) {
  no_cuda("buffer");
}
void cuda_free(int, void*) noexcept {}
void cuda_copy(int, void*, bool, const void*, bool, size_t) {
  no_cuda("copy");
}
void cuda_zero(int, void*, size_t) {
  no_cuda("zero");
}
int cuda_count() noexcept {
  return 0;
}
void cuda_sync() {}
void* cuda_stream() noexcept {
  return nullptr;
}
void cuda_set_stream(void*) noexcept {}
bool cuda_in_build() noexcept {
  return false;
}
bool cuda_mem_info(int, size_t*, size_t*) noexcept {
  return false;
}

}  // namespace octet::detail
