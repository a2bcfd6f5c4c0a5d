// cudasim/ptx.h: the emulated twins of the inline-PTX instructions octet's kernels use
// (cp.async and its groups, ldmatrix .x4 / .x4.trans, mma.sync m16n8k16 bf16 -> f32,
// ex2.approx.ftz.f32, cvt.rn.satfinite.e4m3x2 / e5m2x2.f32), and the per-lane layouts they
// are built from, exposed so the emulator's tests can check them against the PTX ISA.
// Sections cited are of the PTX ISA 9.1 ("Parallel Thread Execution ISA", NVIDIA).
// defines: cudasim::ptx::cp_async, cp_async_commit_group, cp_async_wait_group,
//          ldmatrix_x4, mma_m16n8k16_bf16, ex2_approx_ftz, cvt_satfinite_e4m3x2,
//          cvt_satfinite_e5m2x2, CpAsyncQueue, Coord, mma_a_coord, mma_b_coord,
//          mma_c_coord, ldmatrix_lane, mma_lane, MmaOperands, kPoison
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cudasim::ptx {

// ---- the twins (called from inside an emulated kernel) -----------------------------------

// cp.async.{ca,cg}.shared.global [dst], [src], cp_size, src_size (section 9.7.9.25.3.1,
// "cp.async"): cp_size bytes to the shared address `dst` (an offset of the block's dynamic
// shared arena, as __cvta_generic_to_shared gives), the first src_size of them read from
// `src` and the rest zero. The destination is poisoned (kPoison bytes) now; the copy and
// the zero fill happen when a cp_async_wait_group completes its group, so a read before
// the wait sees poison instead of a lucky early value.
void cp_async(uint32_t dst, const void* src, int cp_size, int src_size);
// cp.async.commit_group: the calling thread's copies since the last commit become a group.
void cp_async_commit_group();
// cp.async.wait_group n: completes all but the newest n committed groups of the thread.
void cp_async_wait_group(int n);

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (section 9.7.14.5.15): a warp
// collective (all 32 lanes); `address` is this lane's row address (shared offset).
std::array<uint32_t, 4> ldmatrix_x4(uint32_t address, bool trans);

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, d (sections 9.7.14.5.8 and
// 9.7.14.5.14): a warp collective; d += A B for this lane's fragments.
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

// ex2.approx.ftz.f32 (section 9.7.3.21): 2^x. The PTX ISA documents "maximum ulp error
// 2 ulp from the correctly rounded result across the full range" and that .ftz flushes
// subnormal inputs and results to sign-preserving zero. The twin is the host's exp2f
// (glibc: within 1 ulp) with the same flushes, so it is at least as accurate as the
// hardware: it shows the kernel's use of the instruction, not its last-bit results.
float ex2_approx_ftz(float x);

// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b (section 9.7.9.21, "cvt"): `a` goes to
// the upper byte of d, `b` to the lower one. Computed by NVIDIA's host code in cuda_fp8.h
// (__nv_cvt_float2_to_fp8x2 with __NV_SATFINITE), not by octet's encoder.
uint16_t cvt_satfinite_e4m3x2(float a, float b);
uint16_t cvt_satfinite_e5m2x2(float a, float b);

// ---- the pure parts (no emulated thread needed; tested directly) -------------------------

constexpr uint8_t kPoison = 0xFF;  // bf16 0xFFFF and f32 0xFFFFFFFF are NaNs

// One thread's outstanding cp.async copies: the open (uncommitted) ones and the committed
// groups, oldest first. `shared` is the base the destination offsets are relative to.
class CpAsyncQueue {
 public:
  struct Copy {
    uint8_t* dst;
    const uint8_t* src;
    int cp_size, src_size;
  };
  void issue(uint8_t* dst, const void* src, int cp_size, int src_size);
  void commit();
  void wait(int n);  // completes all but the newest n groups
  size_t groups() const { return committed_.size(); }
  size_t open() const { return open_.size(); }

 private:
  std::vector<Copy> open_;
  std::vector<std::vector<Copy>> committed_;  // oldest first
};

struct Coord {
  int row, col;
};
// Section 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16 with floating point type", with
// groupID = lane >> 2 and threadID_in_group = lane % 4:
//   A (16 x 16, .bf16, elements a0..a7, two per .b32 register, low half first):
//     row = groupID for a0, a1, a4, a5, groupID + 8 otherwise;
//     col = threadID_in_group * 2 + (i & 1), + 8 for i >= 4.
//   B (16 x 8, elements b0..b3): row = threadID_in_group * 2 + (i & 1), + 8 for i >= 2;
//     col = groupID.
//   C / D (16 x 8, .f32, c0..c3): row = groupID for i < 2, groupID + 8 otherwise;
//     col = threadID_in_group * 2 + (i & 1).
Coord mma_a_coord(unsigned lane, int i);
Coord mma_b_coord(unsigned lane, int i);
Coord mma_c_coord(unsigned lane, int i);

// The four registers lane `lane` receives from ldmatrix .x4 given the 32 row addresses
// (section 9.7.14.5.15, its address table and Figure 104 "ldmatrix fragment layout for
// one 8x8 Matrix with 16-bit elements"): lanes 8m .. 8m + 7 give the rows of matrix m,
// register m holds matrix m's row lane / 4, elements 2 (lane % 4) and 2 (lane % 4) + 1
// (low half first); with .trans the matrix is read column-major, so the register holds
// its column lane / 4, elements of rows 2 (lane % 4) and 2 (lane % 4) + 1.
std::array<uint32_t, 4> ldmatrix_lane(const std::array<const uint8_t*, 32>& rows, unsigned lane,
                                      bool trans);

// What one lane contributes to an mma: its A and B registers.
struct MmaOperands {
  uint32_t a[4];
  uint32_t b[2];
};
// d += A B for lane `lane`'s four accumulator elements, A and B assembled from every
// lane's operands. Each element is summed in fp32 over k = 0 .. 15 in order, one
// fused multiply-add per k, starting from d: bf16 products are exact in fp32, so only
// the additions round. Real tensor cores add in another order and with their own
// internal precision, so last bits can differ from hardware.
void mma_lane(const std::array<MmaOperands, 32>& ops, unsigned lane, float (&d)[4]);

}  // namespace cudasim::ptx
