// cudasim/src/ptx.cpp: the PTX twins that act as an emulated thread or warp: cp.async
// and its groups, ldmatrix and mma (see cudasim/ptx.h for what each guarantees).
#include "cudasim/ptx.h"

#include <cstring>
#include <string>

#include "cudasim/device.h"
#include "cudasim/thread.h"
#include "state.h"

namespace cudasim::ptx {
namespace {

// The calling emulated thread's cp.async copies, created at its first cp.async of a block.
CpAsyncQueue& thread_cp_async_queue() {
  std::shared_ptr<void>& slot = detail::self().ptx;
  if (!slot) slot = std::make_shared<CpAsyncQueue>();
  return *static_cast<CpAsyncQueue*>(slot.get());
}

// The bytes at shared offset `address`, checked against the block's dynamic arena.
uint8_t* shared_at(uint32_t address, size_t bytes, size_t align, const char* op) {
  if (address % align != 0)
    fault(cudaErrorMisalignedAddress, std::string(op) + ": shared address " +
                                          std::to_string(address) + " is not " +
                                          std::to_string(align) + "-byte aligned");
  if (size_t{address} + bytes > dynamic_shared_bytes())
    fault(cudaErrorIllegalAddress, std::string(op) + ": shared bytes [" + std::to_string(address) +
                                       ", " + std::to_string(address + bytes) +
                                       ") past the dynamic shared arena of " +
                                       std::to_string(dynamic_shared_bytes()) + " bytes");
  return static_cast<uint8_t*>(dynamic_shared_base()) + address;
}

}  // namespace

// ---- twins -----------------------------------------------------------------------------

void cp_async(uint32_t dst, const void* src, int cp_size, int src_size) {
  if (cp_size != 4 && cp_size != 8 && cp_size != 16)
    fault(cudaErrorInvalidValue, "cp.async: cp-size " + std::to_string(cp_size) + " (4, 8 or 16)");
  if (src_size < 0 || src_size > cp_size)
    fault(cudaErrorInvalidValue, "cp.async: src-size " + std::to_string(src_size) +
                                     " outside [0, " + std::to_string(cp_size) + "]");
  uint8_t* to =
      shared_at(dst, static_cast<size_t>(cp_size), static_cast<size_t>(cp_size), "cp.async");
  if (src_size > 0) {
    if (reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(cp_size) != 0)
      fault(cudaErrorMisalignedAddress,
            "cp.async: global source not " + std::to_string(cp_size) + "-byte aligned");
    if (detail::registry().find(src, static_cast<size_t>(src_size)) == nullptr)
      fault(cudaErrorIllegalAddress, "cp.async: source is not device memory");
  }
  thread_cp_async_queue().issue(to, src, cp_size, src_size);
}

void cp_async_commit_group() {
  thread_cp_async_queue().commit();
}

void cp_async_wait_group(int n) {
  thread_cp_async_queue().wait(n);
}

std::array<uint32_t, 4> ldmatrix_x4(uint32_t address, bool trans) {
  const std::array<uint32_t, 32> addresses = warp_gather(0xFFFFFFFFu, address);
  std::array<const uint8_t*, 32> rows{};
  for (unsigned l = 0; l < 32; ++l)
    rows[l] = shared_at(addresses[l], 16, 16, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4");
  return ldmatrix_lane(rows, lane(), trans);
}

void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  MmaOperands mine{};
  std::memcpy(mine.a, a, sizeof mine.a);
  mine.b[0] = b0;
  mine.b[1] = b1;
  const std::array<MmaOperands, 32> all = warp_gather(0xFFFFFFFFu, mine);
  mma_lane(all, lane(), d);
}

}  // namespace cudasim::ptx
