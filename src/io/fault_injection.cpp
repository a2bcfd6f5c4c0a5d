// io/fault_injection.cpp: the test-only write faults, read from the environment once.
#include "io/fault_injection.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

namespace octet {
namespace {

struct Faults {
  int64_t enospc_after = -1;  // bytes; -1: never
  int64_t delay_ms = 0;
  bool any = false;
};

const Faults& faults() {
  static const Faults f = [] {
    Faults out;
    if (const char* v = std::getenv("OCTET_TEST_ENOSPC_AFTER_BYTES"); v != nullptr && *v) {
      out.enospc_after = std::strtoll(v, nullptr, 10);
    }
    if (const char* v = std::getenv("OCTET_TEST_WRITE_DELAY_MS"); v != nullptr && *v) {
      out.delay_ms = std::strtoll(v, nullptr, 10);
    }
    out.any = out.enospc_after >= 0 || out.delay_ms > 0;
    return out;
  }();
  return f;
}

std::atomic<int64_t> g_written{0};

}  // namespace

int io_fault_before_write(size_t bytes) {
  const Faults& f = faults();
  if (!f.any) return 0;
  if (f.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.delay_ms));
  const int64_t before = g_written.fetch_add(static_cast<int64_t>(bytes));
  if (f.enospc_after >= 0 && before + static_cast<int64_t>(bytes) > f.enospc_after) return ENOSPC;
  return 0;
}

}  // namespace octet
