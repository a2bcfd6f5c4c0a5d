// cudasim/src/arguments.cpp: kernel arguments checked at launch. A pointer argument must be
// null or device memory; a struct argument must not carry a host heap or stack address that is
// not device memory (the kernel would read the host's memory: a fault on a real GPU).
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "cudasim/launch.h"
#include "state.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace cudasim::detail {

namespace {

// Where a host address lives, or null when it is not recognisably host memory.
const char* host_kind(uintptr_t a) {
  thread_local uintptr_t lo = 0, hi = 0;
  if (hi == 0) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* base = nullptr;
      size_t size = 0;
      pthread_attr_getstack(&attr, &base, &size);
      lo = reinterpret_cast<uintptr_t>(base);
      hi = lo + size;
      pthread_attr_destroy(&attr);
    }
  }
  if (a >= lo && a < hi) return "the host thread's stack";
#if defined(__SANITIZE_ADDRESS__)
  char name[64];
  void* region = nullptr;
  size_t region_size = 0;
  const char* kind =
      __asan_locate_address(reinterpret_cast<void*>(a), name, sizeof name, &region, &region_size);
  if (kind != nullptr && (std::strcmp(kind, "heap") == 0 || std::strcmp(kind, "stack") == 0 ||
                          std::strcmp(kind, "global") == 0))
    return std::strcmp(kind, "heap") == 0    ? "the host heap"
           : std::strcmp(kind, "stack") == 0 ? "a host stack"
                                             : "a host global";
#endif
  return nullptr;
}

}  // namespace

bool check_pointer_arg(const Launch& l, int index, const void* p) {
  if (p == nullptr || registry().find(p, 0, true) != nullptr) return false;
  const char* kind = host_kind(reinterpret_cast<uintptr_t>(p));
  std::fprintf(stderr,
               "cudasim: launch of %s: argument %d is %p, which is not device memory (%s); a "
               "kernel reading it faults on a GPU\n",
               kernel_name(l.kernel).c_str(), index, p, kind != nullptr ? kind : "unknown memory");
  return true;
}

bool check_struct_arg(const Launch& l, int index, const void* bytes, size_t size) {
  bool bad = false;
  const auto* c = static_cast<const char*>(bytes);
  const size_t skew = reinterpret_cast<uintptr_t>(c) % 8;
  for (size_t off = skew == 0 ? 0 : 8 - skew; off + 8 <= size; off += 8) {
    uintptr_t w;
    std::memcpy(&w, c + off, 8);
    if (w < 4096 || registry().find(reinterpret_cast<const void*>(w), 0, true) != nullptr) continue;
    const char* kind = host_kind(w);
    if (kind == nullptr) continue;
    std::fprintf(stderr,
                 "cudasim: launch of %s: argument %d (a struct of %zu bytes) holds at byte %zu "
                 "the address %p, which is in %s, not device memory; a kernel reading it faults "
                 "on a GPU\n",
                 kernel_name(l.kernel).c_str(), index, size, off, reinterpret_cast<void*>(w), kind);
    bad = true;
  }
  return bad;
}

}  // namespace cudasim::detail
