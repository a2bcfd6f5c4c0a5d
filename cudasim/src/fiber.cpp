// cudasim/src/fiber.cpp: fibers for emulated threads (see fiber.h).
#include "fiber.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(CUDASIM_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace cudasim::detail {

namespace {
#if defined(__SANITIZE_ADDRESS__) || defined(CUDASIM_TSAN)
constexpr size_t kStackBytes = 512 * 1024;  // sanitizers grow frames (redzones, shadow)
#else
constexpr size_t kStackBytes = 128 * 1024;
#endif
constexpr size_t kGuard = 4096;

struct Pool {
  std::vector<std::unique_ptr<Stack>> stacks;
};
thread_local Pool t_pool;

// The scheduler's context while a fiber runs, and what the sanitizers need to switch back.
thread_local bctx::fcontext_t t_scheduler = nullptr;
#if defined(__SANITIZE_ADDRESS__)
thread_local const void* t_sched_bottom = nullptr;
thread_local size_t t_sched_size = 0;
#endif
#if defined(CUDASIM_TSAN)
thread_local void* t_sched_tsan = nullptr;
#endif

void trampoline(bctx::transfer_t t) {
  t_scheduler = t.fctx;
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &t_sched_bottom, &t_sched_size);
#endif
  const Fiber& f = *static_cast<const Fiber*>(t.data);
  f.entry(f.arg);
  finish_fiber();
}
}  // namespace

Stack& stack_for(unsigned linear) {
  auto& stacks = t_pool.stacks;
  while (stacks.size() <= linear) stacks.push_back(nullptr);
  if (!stacks[linear]) {
    auto s = std::make_unique<Stack>();
    void* m = mmap(nullptr, kStackBytes + kGuard, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "cudasim: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(m, kGuard, PROT_NONE);  // a stack overflow faults instead of corrupting
    s->base = static_cast<char*>(m) + kGuard;
    s->bytes = kStackBytes;
#if defined(CUDASIM_TSAN)
    s->tsan_fiber = __tsan_create_fiber(0);
#endif
    stacks[linear] = std::move(s);
  }
  return *stacks[linear];
}

void make_fiber(Fiber& f, unsigned linear, void (*entry)(void*), void* arg) {
  f.stack = &stack_for(linear);
#if defined(__SANITIZE_ADDRESS__)
  // A fiber abandoned after a fault leaves its frames' redzones behind (a fiber that ran to
  // its end has unpoisoned its frames on the way out).
  if (f.stack->abandoned) __asan_unpoison_memory_region(f.stack->base, f.stack->bytes);
#endif
  f.stack->abandoned = false;
  f.ctx = bctx::make_fcontext(static_cast<char*>(f.stack->base) + f.stack->bytes, f.stack->bytes,
                              trampoline);
  f.entry = entry;
  f.arg = arg;
}

void to_fiber(Fiber& f) {
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack->base, f.stack->bytes);
#endif
#if defined(CUDASIM_TSAN)
  if (t_sched_tsan == nullptr) t_sched_tsan = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f.stack->tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
  const bctx::transfer_t t = bctx::jump_fcontext(f.ctx, &f);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  f.ctx = t.fctx;
}

void to_scheduler() {
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t_sched_bottom, t_sched_size);
#endif
#if defined(CUDASIM_TSAN)
  __tsan_switch_to_fiber(t_sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
  const bctx::transfer_t t = bctx::jump_fcontext(t_scheduler, nullptr);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, &t_sched_bottom, &t_sched_size);
#endif
  t_scheduler = t.fctx;
}

void finish_fiber() {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(nullptr, t_sched_bottom, t_sched_size);
#endif
#if defined(CUDASIM_TSAN)
  __tsan_switch_to_fiber(t_sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
  bctx::jump_fcontext(t_scheduler, nullptr);
  std::abort();  // never resumed
}

}  // namespace cudasim::detail
