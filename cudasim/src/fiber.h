// cudasim/src/fiber.h: one emulated CUDA thread's flow of execution: a boost.context fcontext
// on its own mmap'ed stack (guard page below), with the AddressSanitizer and ThreadSanitizer
// fiber annotations, so both sanitizers follow the switches.
// defines: cudasim::detail::{Stack, Fiber, to_fiber, to_scheduler, finish_fiber}
#pragma once

#include <boost/context/detail/fcontext.hpp>

#include <cstddef>

namespace cudasim::detail {

namespace bctx = boost::context::detail;

struct Stack {
  void* base = nullptr;  // lowest usable address
  size_t bytes = 0;
  void* tsan_fiber = nullptr;
  bool abandoned = false;  // a fiber was dropped mid-run on it: frames' redzones left behind
};
Stack& stack_for(unsigned linear);  // a pool, reused across blocks and launches

struct Fiber {
  bctx::fcontext_t ctx = nullptr;
  Stack* stack = nullptr;
  void (*entry)(void*) = nullptr;
  void* arg = nullptr;
};

// Scheduler side: start or resume `f`; returns when it yields or finishes.
void to_fiber(Fiber& f);
// Fiber side: back to the scheduler (resumes here later).
void to_scheduler();
// Fiber side, last: back to the scheduler for good.
[[noreturn]] void finish_fiber();
// Prepares `f` to run entry(arg) on its stack.
void make_fiber(Fiber& f, unsigned linear, void (*entry)(void*), void* arg);

}  // namespace cudasim::detail
