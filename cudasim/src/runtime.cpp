// cudasim/src/runtime.cpp: the CUDA runtime functions octet calls, on the emulated device:
// memory (host heap allocations registered as device memory), copies and sets (immediate, on
// the calling thread, kinds checked against the registry), devices, streams, events, errors.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <unordered_map>

#include "state.h"

#if defined(__SANITIZE_ADDRESS__) || defined(CUDASIM_TSAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace cudasim::detail {

void Registry::add(const void* p, size_t bytes, int device, bool symbol) {
  std::lock_guard lock(mutex_);
  map_[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, device, symbol};
}

bool Registry::remove(const void* p) {
  std::lock_guard lock(mutex_);
  const auto it = map_.find(reinterpret_cast<uintptr_t>(p));
  if (it == map_.end() || it->second.symbol) return false;
  map_.erase(it);
  return true;
}

std::vector<void*> Registry::remove_device(int device) {
  std::lock_guard lock(mutex_);
  std::vector<void*> freed;
  for (auto it = map_.begin(); it != map_.end();) {
    if (!it->second.symbol && it->second.device == device) {
      freed.push_back(reinterpret_cast<void*>(it->first));
      it = map_.erase(it);
    } else {
      ++it;
    }
  }
  return freed;
}

const Allocation* Registry::find(const void* p, size_t bytes, bool end_ok) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(mutex_);
  auto it = map_.upper_bound(a);
  if (it == map_.begin()) return nullptr;
  --it;
  const uintptr_t offset = a - it->first;
  const size_t size = it->second.bytes;
  if (offset < size && bytes <= size - offset) return &it->second;
  if (end_ok && offset == size && bytes == 0) return &it->second;
  return nullptr;
}

Registry& registry() {
  static Registry r;
  return r;
}

namespace {
thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
std::atomic<cudaError_t> g_sticky{cudaSuccess};
}  // namespace

cudaError_t set_last_error(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}
cudaError_t take_last_error() {
  const cudaError_t s = g_sticky.load();
  if (s != cudaSuccess) return s;
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}
cudaError_t sticky_error() {
  return g_sticky.load();
}
void set_sticky(cudaError_t e) {
  cudaError_t expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, e);
}
void clear_sticky() {
  g_sticky.store(cudaSuccess);
}

int device_count() {
  static const int n = [] {
    const char* s = std::getenv("CUDASIM_DEVICES");
    return s != nullptr ? std::atoi(s) : 1;
  }();
  return n;
}
int current_device() {
  return t_device;
}

uint64_t seed() {
  static const uint64_t s = [] {
    const char* env = std::getenv("CUDASIM_SEED");
    if (env != nullptr) return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    return static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
  }();
  return s;
}

std::string kernel_name(const void* kernel) {
#if defined(__SANITIZE_ADDRESS__) || defined(CUDASIM_TSAN)
  char buf[512] = {};
  // The symbolizer wants a return address; +1 lands inside the function's first instruction.
  __sanitizer_symbolize_pc(const_cast<char*>(static_cast<const char*>(kernel)) + 1, "%f", buf,
                           sizeof buf);
  if (buf[0] != '\0' && std::strcmp(buf, "??") != 0) return buf;
#endif
  char addr[32];
  std::snprintf(addr, sizeof addr, "kernel@%p", kernel);
  return addr;
}

namespace {
std::mutex g_attr_mutex;
std::unordered_map<const void*, int> g_max_dynamic;  // cudaFuncAttributeMaxDynamicSharedMemorySize
}  // namespace

constexpr int kMaxOptInShared = 227 * 1024;  // sm_90: 227 KB of dynamic shared memory per block

int max_dynamic_smem(const void* kernel) {
  std::lock_guard lock(g_attr_mutex);
  const auto it = g_max_dynamic.find(kernel);
  return it == g_max_dynamic.end() ? 48 * 1024 : it->second;
}

cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  if (kernel == nullptr) return set_last_error(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > kMaxOptInShared) return set_last_error(cudaErrorInvalidValue);
    std::lock_guard lock(g_attr_mutex);
    g_max_dynamic[kernel] = value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return set_last_error(cudaErrorInvalidValue);
}

cudaError_t symbol_address(void** address, const void* symbol, size_t bytes) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  if (address == nullptr) return set_last_error(cudaErrorInvalidValue);
  if (registry().find(symbol, bytes) == nullptr) registry().add(symbol, bytes, -1, true);
  *address = const_cast<void*>(symbol);
  return cudaSuccess;
}

}  // namespace cudasim::detail

namespace cudasim {
bool is_device_range(const void* p, size_t bytes) {
  return p != nullptr && detail::registry().find(p, bytes) != nullptr;
}
}  // namespace cudasim

using namespace cudasim::detail;

namespace {
// Every API call but the error queries returns the sticky fault once there is one.
#define CUDASIM_STICKY()                                      \
  do {                                                        \
    if (sticky_error() != cudaSuccess) return sticky_error(); \
  } while (0)

bool on_device(const void* p, size_t bytes) {
  return registry().find(p, bytes) != nullptr;
}
}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return set_last_error(cudaErrorInvalidValue);
  *count = device_count();
  if (*count == 0) return set_last_error(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  CUDASIM_STICKY();
  if (device < 0 || device >= device_count()) return set_last_error(cudaErrorInvalidDevice);
  cudasim::detail::t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  CUDASIM_STICKY();
  if (device == nullptr) return set_last_error(cudaErrorInvalidValue);
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  CUDASIM_STICKY();
  if (ptr == nullptr) return set_last_error(cudaErrorInvalidValue);
  if (bytes == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  // 256-byte aligned as cudaMalloc's are; the exact size, so ASan sees one element past.
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return set_last_error(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, bytes);  // device memory starts as garbage (NaNs), not zeros
  registry().add(p, bytes, current_device(), false);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  CUDASIM_STICKY();
  if (ptr == nullptr) return cudaSuccess;
  if (!registry().remove(ptr)) return set_last_error(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  CUDASIM_STICKY();
  if (bytes == 0) return cudaSuccess;
  const bool d = on_device(dst, bytes), s = on_device(src, bytes);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !d && !s;
      break;
    case cudaMemcpyHostToDevice:
      ok = d && !s;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !d && s;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = d && s;
      break;
    case cudaMemcpyDefault:
      ok = true;
      break;
    default:
      ok = false;
  }
  if (!ok) {
    std::fprintf(stderr,
                 "cudasim: cudaMemcpy kind %d does not match the pointers (dst %p is %s, src %p "
                 "is %s, %zu bytes)\n",
                 static_cast<int>(kind), dst, d ? "device" : "host", src, s ? "device" : "host",
                 bytes);
    return set_last_error(cudaErrorInvalidValue);
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  CUDASIM_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (!on_device(dst, bytes)) {
    std::fprintf(stderr, "cudasim: cudaMemset of %zu bytes at %p: not device memory\n", bytes, dst);
    return set_last_error(cudaErrorInvalidValue);
  }
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(dst, value, bytes);
}

cudaError_t cudaDeviceSynchronize(void) {
  CUDASIM_STICKY();
  return cudaSuccess;
}

// As on hardware, the reset destroys the device's context: its allocations are freed.
cudaError_t cudaDeviceReset(void) {
  for (void* p : registry().remove_device(current_device())) std::free(p);
  clear_sticky();
  take_last_error();
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  CUDASIM_STICKY();
  if (stream == nullptr) return set_last_error(cudaErrorInvalidValue);
  static std::atomic<uintptr_t> next{0x1000};
  *stream = reinterpret_cast<cudaStream_t>(next.fetch_add(16));
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  return cudaStreamCreate(stream);
}
cudaError_t cudaStreamDestroy(cudaStream_t) {
  CUDASIM_STICKY();
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  CUDASIM_STICKY();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  CUDASIM_STICKY();
  if (event == nullptr) return set_last_error(cudaErrorInvalidValue);
  *event = reinterpret_cast<cudaEvent_t>(new double(0.0));
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  return cudaEventCreate(event);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<double*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  CUDASIM_STICKY();
  *reinterpret_cast<double*>(event) = static_cast<double>(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  CUDASIM_STICKY();
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  CUDASIM_STICKY();
  *ms = static_cast<float>(*reinterpret_cast<double*>(end) - *reinterpret_cast<double*>(start));
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
  CUDASIM_STICKY();
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  return take_last_error();
}
cudaError_t cudaPeekAtLastError(void) {
  const cudaError_t s = sticky_error();
  return s != cudaSuccess ? s : cudasim::detail::t_last;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidDeviceFunction:
      return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorIllegalInstruction:
      return "cudaErrorIllegalInstruction";
    case cudaErrorMisalignedAddress:
      return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    default:
      return "cudaErrorUnknown";
  }
}

// The real runtime's strings for the errors cudasim produces.
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorIllegalInstruction:
      return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    default:
      return "unknown error";
  }
}

}  // extern "C"
