// cudasim/src/scheduler.cpp: running a grid. Blocks run one at a time in a seeded random order;
// each thread of a block is a fiber, and the block's fibers run on the launching OS thread in a
// seeded random order, each until it reaches a barrier, a warp collective or its end. Barriers
// and collectives check that the right threads arrive; when no fiber can run, the deadlock is
// reported with who waits where. Faults stop the kernel and become the sticky error.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "fiber.h"
#include "state.h"

#if defined(CUDASIM_TSAN)
#include <sanitizer/tsan_interface.h>
#define CUDASIM_RELEASE(p) __tsan_release(p)
#define CUDASIM_ACQUIRE(p) __tsan_acquire(p)
#else
#define CUDASIM_RELEASE(p) (void)(p)
#define CUDASIM_ACQUIRE(p) (void)(p)
#endif

namespace cudasim::detail {

int max_dynamic_smem(const void* kernel);  // runtime.cpp

namespace {

constexpr int kSyncRing = 64;  // ThreadSanitizer sync objects per barrier / warp, by generation

enum class Wait : uint8_t { ready, barrier, collective, done };

struct Thread {
  ThreadState st;
  Fiber fiber;
  Wait wait = Wait::ready;
  std::source_location where;  // of the barrier or collective it waits at
  const char* kind = "";
  unsigned mask = 0;
  const void* value = nullptr;
  void* out = nullptr;
  int predicate = 0;  // __syncthreads_or: in, then out
  unsigned generation = 0;
};

struct Warp {
  unsigned arrived = 0;
  unsigned exited = 0;  // lanes that have returned (a collective naming one faults)
  unsigned mask = 0;
  size_t size = 0;
  const char* kind = "";
  unsigned generation = 0;
  char sync[kSyncRing] = {};
};

struct Block {
  const Launch* launch = nullptr;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  std::vector<unsigned> ready;
  unsigned done = 0;
  // the barrier
  unsigned arrived = 0;
  int predicate = 0;
  const char* barrier_kind = "";
  std::source_location barrier_where;
  unsigned barrier_generation = 0;
  char barrier_sync[kSyncRing] = {};
  // dynamic shared memory
  void* smem = nullptr;
  size_t smem_bytes = 0;
  uint64_t rng = 0;
  bool faulted = false;
};

thread_local Block* t_block = nullptr;
thread_local Thread* t_thread = nullptr;
char g_block_start, g_block_end;  // ThreadSanitizer: host -> block -> host
uint64_t g_launches = 0;
std::mutex g_launch_mutex;  // one grid at a time on the emulated device(s)

struct Abort {};  // unwinds a faulting thread to its fiber's entry

uint64_t next_random(uint64_t& s) {  // splitmix64
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Equal strings; one call site passes the same literal every time, so the pointers are
// compared first (strcmp under ASan's interceptor was 5% of an emulated training step).
bool same_text(const char* a, const char* b) {
  return a == b || std::strcmp(a, b) == 0;
}

std::string where_str(const std::source_location& w) {
  std::ostringstream s;
  const char* file = w.file_name();
  const char* slash = std::strrchr(file, '/');
  s << (slash != nullptr ? slash + 1 : file) << ":" << w.line();
  return s.str();
}

std::string dim_str(const uint3& d) {
  std::ostringstream s;
  s << "(" << d.x << "," << d.y << "," << d.z << ")";
  return s.str();
}

// Prints the fault and makes it sticky; the block stops.
void report(Block& b, const Thread* th, cudaError_t code, const std::string& what) {
  if (b.faulted) return;
  b.faulted = true;
  std::fprintf(stderr,
               "cudasim: device fault in kernel %s, block %s of grid %s, %s: %s\n"
               "cudasim: -> %s (%s); rerun with CUDASIM_SEED=0x%llx to replay the same "
               "schedule\n",
               kernel_name(b.launch->kernel).c_str(), dim_str(b.threads[0].st.block_idx).c_str(),
               dim_str(uint3{b.launch->grid.x, b.launch->grid.y, b.launch->grid.z}).c_str(),
               th != nullptr ? ("thread " + dim_str(th->st.thread_idx) + " (lane " +
                                std::to_string(th->st.lane) + ")")
                                   .c_str()
                             : "all threads",
               what.c_str(), cudaGetErrorName(code), cudaGetErrorString(code),
               static_cast<unsigned long long>(seed()));
  set_sticky(code);
}

std::string lane_list(unsigned bits) {
  std::ostringstream s;
  bool first = true;
  for (unsigned i = 0; i < 32; ++i)
    if ((bits >> i & 1u) != 0) {
      s << (first ? "" : ",") << i;
      first = false;
    }
  return first ? "none" : s.str();
}

std::string state_of(const Thread& t) {
  switch (t.wait) {
    case Wait::done:
      return "exited";
    case Wait::barrier:
      return std::string("waits at ") + t.kind + " " + where_str(t.where);
    case Wait::collective:
      return std::string("waits in ") + t.kind + " " + where_str(t.where);
    case Wait::ready:
      return "runnable";
  }
  return "?";
}

// No fiber can run and some have not finished: say who waits where.
void report_deadlock(Block& b) {
  std::ostringstream s;
  s << "deadlock: no thread can proceed.";
  if (b.arrived > 0) {
    s << " " << b.barrier_kind << " at " << where_str(b.barrier_where) << ": " << b.arrived
      << " of " << b.threads.size() << " threads arrived; missing:";
    int shown = 0;
    for (const Thread& t : b.threads)
      if (t.wait != Wait::barrier && shown++ < 8)
        s << " thread " << dim_str(t.st.thread_idx) << " " << state_of(t) << ";";
  }
  for (size_t w = 0; w < b.warps.size(); ++w) {
    const Warp& warp = b.warps[w];
    if (warp.arrived == 0) continue;
    s << " warp " << w << ": " << warp.kind << " with mask 0x" << std::hex << warp.mask << std::dec
      << ", lanes arrived " << lane_list(warp.arrived) << ", missing:";
    for (unsigned l = 0; l < 32; ++l)
      if ((warp.mask >> l & 1u) != 0 && (warp.arrived >> l & 1u) == 0) {
        const size_t i = w * 32 + l;
        s << " lane " << l << " "
          << (i < b.threads.size() ? state_of(b.threads[i]) : "does not exist") << ";";
      }
  }
  report(b, nullptr, cudaErrorLaunchFailure, s.str());
}

void thread_main(void* arg) {
  Thread& th = *static_cast<Thread*>(arg);
  Block& b = *t_block;
  CUDASIM_ACQUIRE(&g_block_start);
  try {
    b.launch->run(*b.launch);
  } catch (const Abort&) {
  }
  th.wait = Wait::done;
  CUDASIM_RELEASE(&g_block_end);
}

// After `th` exited: nobody may be waiting for it.
void check_exit(Block& b, Thread& th) {
  ++b.done;
  b.warps[th.st.linear / 32].exited |= 1u << th.st.lane;
  if (b.arrived > 0) {
    report(b, &th, cudaErrorLaunchFailure,
           std::string("exited while other threads wait at ") + b.barrier_kind + " " +
               where_str(b.barrier_where) + " (every thread of the block must reach it)");
    return;
  }
  const Warp& w = b.warps[th.st.linear / 32];
  if (w.arrived != 0 && (w.mask >> th.st.lane & 1u) != 0)
    report(
        b, &th, cudaErrorLaunchFailure,
        std::string("exited while lanes ") + lane_list(w.arrived) + " wait for it in " + w.kind +
            " at " +
            where_str(b.threads[th.st.linear / 32 * 32 + std::countr_zero(w.arrived)].where) +
            " with mask 0x" + [&] {
              char m[16];
              std::snprintf(m, sizeof m, "%x", w.mask);
              return std::string(m);
            }());
}

void run_block(Block& b, const uint3& block_idx) {
  const Launch& l = *b.launch;
  const unsigned n = l.block.x * l.block.y * l.block.z;
  b.ready.clear();
  b.done = b.arrived = 0;
  b.faulted = false;
  for (Warp& w : b.warps) w.arrived = w.exited = 0;
  if (b.smem_bytes > 0) std::memset(b.smem, 0xFF, b.smem_bytes);  // uninitialised: NaNs
  for (unsigned i = 0; i < n; ++i) {
    Thread& th = b.threads[i];
    th.st.block_idx = block_idx;
    th.st.ptx.reset();  // cp.async copies a thread of the previous block left in flight
    th.wait = Wait::ready;
    make_fiber(th.fiber, i, thread_main, &th);
    b.ready.push_back(i);
  }
  CUDASIM_RELEASE(&g_block_start);
  while (!b.ready.empty() && !b.faulted) {
    const size_t r = next_random(b.rng) % b.ready.size();
    const unsigned i = b.ready[r];
    b.ready[r] = b.ready.back();
    b.ready.pop_back();
    Thread& th = b.threads[i];
    current = &th.st;
    t_thread = &th;
    to_fiber(th.fiber);
    current = nullptr;
    t_thread = nullptr;
    if (th.wait == Wait::done && !b.faulted) check_exit(b, th);
  }
  if (!b.faulted && b.done != n) report_deadlock(b);
  for (unsigned i = 0; i < n; ++i)
    if (b.threads[i].wait != Wait::done) b.threads[i].fiber.stack->abandoned = true;
  CUDASIM_ACQUIRE(&g_block_end);
}

// The last lane's gather in a warp collective: the values of the lanes in `mask` into `mine`
// (by lane), then `mine` into the result of every other lane in `mask` (every shuffle moves 32
// values into each of 32 lanes: the emulator's hottest copies). By words of the values' size
// class, in one uninstrumented call: under AddressSanitizer a memcpy of a run-time size goes
// through its interceptor, which checked both ranges of every copy (about 14% of an emulated
// training step). Both buffers are the emulator's own (a lane's argument and its result array,
// never device memory), so no check is lost; GCC must not turn the loops back into memcpy calls
// (clang may: only slower, not wrong).
#if defined(__GNUC__) && !defined(__clang__)
#define CUDASIM_PLAIN_LOOPS \
  [[gnu::no_sanitize_address, gnu::optimize("no-tree-loop-distribute-patterns")]]
#else
#define CUDASIM_PLAIN_LOOPS [[gnu::no_sanitize_address]]
#endif
template <class Word>
CUDASIM_PLAIN_LOOPS void gather_words(Thread* lanes, unsigned mask, unsigned self, size_t bytes,
                                      char* mine) {
  for (unsigned l = 0; l < 32; ++l) {
    if ((mask >> l & 1u) == 0) continue;
    const auto* in = static_cast<const char*>(lanes[l].value);
    for (size_t i = 0; i < bytes; i += sizeof(Word)) {
      Word w;
      std::memcpy(&w, in + i, sizeof(Word));
      std::memcpy(mine + l * bytes + i, &w, sizeof(Word));
    }
  }
  for (unsigned l = 0; l < 32; ++l) {
    if ((mask >> l & 1u) == 0 || l == self) continue;
    auto* o = static_cast<char*>(lanes[l].out);
    for (size_t i = 0; i < 32 * bytes; i += sizeof(Word)) {
      Word w;
      std::memcpy(&w, mine + i, sizeof(Word));
      std::memcpy(o + i, &w, sizeof(Word));
    }
  }
}
#undef CUDASIM_PLAIN_LOOPS

void gather(Thread* lanes, unsigned mask, unsigned self, size_t size, char* mine) {
  if (size % 8 == 0) return gather_words<uint64_t>(lanes, mask, self, size, mine);
  if (size % 4 == 0) return gather_words<uint32_t>(lanes, mask, self, size, mine);
  if (size % 2 == 0) return gather_words<uint16_t>(lanes, mask, self, size, mine);
  gather_words<uint8_t>(lanes, mask, self, size, mine);
}

Block& running(const char* what) {
  if (t_block == nullptr || t_thread == nullptr) no_thread(what);
  return *t_block;
}

}  // namespace

void no_thread(const char* what) {
  std::fprintf(stderr, "cudasim: %s called outside a kernel\n", what);
  std::abort();
}

bool fail_launch(cudaError_t code) {
  set_last_error(code);
  return true;
}

void fail_execution(cudaError_t code) {
  if (sticky_error() == cudaSuccess) set_sticky(code);
}

void launch(const Launch& l) {
  if (sticky_error() != cudaSuccess) return;
  const dim3 g = l.grid, k = l.block;
  const uint64_t threads = uint64_t{k.x} * k.y * k.z;
  if (k.x == 0 || k.y == 0 || k.z == 0 || k.x > 1024 || k.y > 1024 || k.z > 64 || threads > 1024 ||
      g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    std::fprintf(stderr,
                 "cudasim: launch of %s with grid (%u,%u,%u) and block (%u,%u,%u): invalid "
                 "configuration (at most 1024 threads a block, block z <= 64, grid y and z <= "
                 "65535)\n",
                 kernel_name(l.kernel).c_str(), g.x, g.y, g.z, k.x, k.y, k.z);
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  const int max_smem = max_dynamic_smem(l.kernel);
  if (l.dynamic_smem > static_cast<size_t>(max_smem)) {
    std::fprintf(stderr,
                 "cudasim: launch of %s asks for %zu bytes of dynamic shared memory; the kernel "
                 "may use %d (cudaFuncAttributeMaxDynamicSharedMemorySize, at most 227 KB)\n",
                 kernel_name(l.kernel).c_str(), l.dynamic_smem, max_smem);
    set_last_error(cudaErrorInvalidValue);
    return;
  }

  std::lock_guard lock(g_launch_mutex);
  Block b;
  b.launch = &l;
  b.threads.resize(threads);
  b.warps.resize((threads + 31) / 32);
  for (unsigned i = 0; i < threads; ++i) {
    ThreadState& s = b.threads[i].st;
    s.thread_idx = uint3{i % k.x, i / k.x % k.y, i / (k.x * k.y)};
    s.block_dim = k;
    s.grid_dim = g;
    s.linear = i;
    s.lane = i % 32;
  }
  b.smem_bytes = l.dynamic_smem;
  if (b.smem_bytes > 0 && posix_memalign(&b.smem, 128, b.smem_bytes) != 0) std::abort();

  // Blocks in a seeded random order.
  const uint64_t blocks = uint64_t{g.x} * g.y * g.z;
  uint64_t rng = seed() ^ (++g_launches * 0x2545f4914f6cdd1dull);
  std::vector<uint32_t> order;
  const bool shuffle = blocks <= (uint64_t{1} << 32);
  if (shuffle) {
    order.resize(blocks);
    for (uint64_t i = 0; i < blocks; ++i) order[i] = static_cast<uint32_t>(i);
    for (uint64_t i = blocks; i > 1; --i) std::swap(order[i - 1], order[next_random(rng) % i]);
  }
  Block* outer = t_block;
  t_block = &b;
  for (uint64_t j = 0; j < blocks && !b.faulted; ++j) {
    const uint64_t id = shuffle ? order[j] : j;
    b.rng = next_random(rng);
    run_block(b, uint3{static_cast<unsigned>(id % g.x), static_cast<unsigned>(id / g.x % g.y),
                       static_cast<unsigned>(id / (uint64_t{g.x} * g.y))});
  }
  t_block = outer;
  std::free(b.smem);
}

void syncthreads(const char* kind, int* predicate, const std::source_location& where) {
  Block& b = running(kind);
  Thread& th = *t_thread;
  if (b.done > 0) {
    for (const Thread& t : b.threads)
      if (t.wait == Wait::done) {
        report(b, &th, cudaErrorLaunchFailure,
               std::string(kind) + " at " + where_str(where) + " is not reached by thread " +
                   dim_str(t.st.thread_idx) +
                   ", which exited (every thread of the block must "
                   "reach it)");
        throw Abort{};
      }
  }
  if (b.arrived == 0) {
    b.barrier_kind = kind;
    b.barrier_where = where;
    b.predicate = 0;
  } else if (b.barrier_where.line() != where.line() ||
             !same_text(b.barrier_where.file_name(), where.file_name()) ||
             !same_text(b.barrier_kind, kind)) {
    report(b, &th, cudaErrorLaunchFailure,
           std::string("divergent barriers: this thread is at ") + kind + " " + where_str(where) +
               " while " + std::to_string(b.arrived) + " thread(s) wait at " + b.barrier_kind +
               " " + where_str(b.barrier_where));
    throw Abort{};
  }
  const unsigned gen = b.barrier_generation;
  CUDASIM_RELEASE(&b.barrier_sync[gen % kSyncRing]);
  if (predicate != nullptr) b.predicate |= *predicate;
  if (++b.arrived == b.threads.size()) {  // the last one releases everybody
    for (unsigned i = 0; i < b.threads.size(); ++i) {
      Thread& t = b.threads[i];
      if (&t == &th) continue;
      t.predicate = b.predicate;
      t.wait = Wait::ready;
      b.ready.push_back(i);
    }
    if (predicate != nullptr) *predicate = b.predicate;
    b.arrived = 0;
    ++b.barrier_generation;
  } else {
    th.wait = Wait::barrier;
    th.kind = kind;
    th.where = where;
    to_scheduler();
    if (b.faulted) throw Abort{};
    if (predicate != nullptr) *predicate = th.predicate;
  }
  CUDASIM_ACQUIRE(&b.barrier_sync[gen % kSyncRing]);
}

void warp_collective(unsigned mask, const void* value, void* out, size_t size, const char* kind,
                     const std::source_location& where) {
  Block& b = running(kind);
  Thread& th = *t_thread;
  const unsigned warp_index = th.st.linear / 32;
  Warp& w = b.warps[warp_index];
  const unsigned me = 1u << th.st.lane;
  auto fail = [&](const std::string& what) {
    char m[16];
    std::snprintf(m, sizeof m, "0x%x", mask);
    report(b, &th, cudaErrorLaunchFailure,
           std::string(kind) + " at " + where_str(where) + " with mask " + m + ": " + what);
    throw Abort{};
  };
  if ((mask & me) == 0) fail("the mask does not name the calling lane");
  // Lanes past the block's last thread, then lanes that have exited (bit tests, not a loop:
  // shuffles are the emulator's hottest path).
  const size_t lanes_here = std::min<size_t>(32, b.threads.size() - warp_index * 32);
  const unsigned present = lanes_here == 32 ? ~0u : (1u << lanes_here) - 1;
  if ((mask & ~present) != 0)
    fail("the mask names lane " + std::to_string(std::countr_zero(mask & ~present)) +
         ", which the block does not have");
  if ((mask & w.exited) != 0)
    fail("the mask names lane " + std::to_string(std::countr_zero(mask & w.exited)) +
         ", which has exited");
  if (w.arrived == 0) {
    w.mask = mask;
    w.size = size;
    w.kind = kind;
  } else if (w.mask != mask || w.size != size || !same_text(w.kind, kind)) {
    char m[16];
    std::snprintf(m, sizeof m, "0x%x", w.mask);
    fail(std::string("lanes ") + lane_list(w.arrived) + " wait in " + w.kind + " at " +
         where_str(b.threads[warp_index * 32 + std::countr_zero(w.arrived)].where) + " with mask " +
         m + ": every lane of a mask must make the same call with the same mask");
  }
  const unsigned gen = w.generation;
  th.value = value;
  th.out = out;
  th.where = where;
  th.kind = kind;
  w.arrived |= me;
  if (w.arrived == mask) {  // the last lane gathers for everybody
    // ThreadSanitizer: the other lanes' values happen before the gather, the gather before
    // their return.
    CUDASIM_ACQUIRE(&w.sync[gen % kSyncRing]);
    Thread* lanes = &b.threads[warp_index * 32];
    gather(lanes, mask, th.st.lane, size, static_cast<char*>(out));
    for (unsigned l = 0; l < 32; ++l) {
      if ((mask >> l & 1u) == 0 || l == th.st.lane) continue;
      Thread& t = lanes[l];
      t.wait = Wait::ready;
      b.ready.push_back(warp_index * 32 + l);
    }
    w.arrived = 0;
    ++w.generation;
    CUDASIM_RELEASE(&w.sync[gen % kSyncRing]);
  } else {
    CUDASIM_RELEASE(&w.sync[gen % kSyncRing]);
    th.wait = Wait::collective;
    to_scheduler();
    if (b.faulted) throw Abort{};
  }
  CUDASIM_ACQUIRE(&w.sync[gen % kSyncRing]);
}

}  // namespace cudasim::detail

namespace cudasim {

unsigned lane() {
  return detail::self().lane;
}

void* dynamic_shared_base() {
  return detail::t_block != nullptr ? detail::t_block->smem : nullptr;
}
size_t dynamic_shared_bytes() {
  return detail::t_block != nullptr ? detail::t_block->smem_bytes : 0;
}

void fault(cudaError_t code, const std::string& what) {
  using namespace detail;
  if (t_block == nullptr || t_thread == nullptr) {
    std::fprintf(stderr, "cudasim: fault outside a kernel: %s\n", what.c_str());
    set_sticky(code);
    throw std::runtime_error("cudasim: " + what);
  }
  report(*t_block, t_thread, code, what);
  throw Abort{};
}

}  // namespace cudasim
