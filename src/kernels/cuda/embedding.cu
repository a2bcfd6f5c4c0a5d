// kernels/cuda/embedding.cu: the embedding row gather and its scatter-add gradient on CUDA
// devices. The gradient is deterministic and bit-equal to the CPU kernel's: each dtable row
// is summed by one block, in increasing t, without atomics.
#include <cstdint>
#include <cstdio>
#include <limits>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_io.cuh"

namespace octet::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Scatter-add: a block owns up to kScatterThreads * kScatterCols columns of one row (gridDim.y
// covers wider rows) and compares kScanStep ids per step while it looks for its tokens.
constexpr int kScatterThreads = 256;
constexpr int kScatterCols = 16;
constexpr int kIdsPerThread = 4;
constexpr int kScanStep = kScatterThreads * kIdsPerThread;
constexpr int64_t kScatterBlockCols = int64_t{kScatterThreads} * kScatterCols;
// Tokens of one id whose dout rows a thread loads before it adds them.
constexpr int kRowBatch = 4;

// The device cannot throw: an id outside [0, V) is reported once per process on stdout (at
// the next synchronisation), its output row is NaN in the forward pass (so that the loss
// shows it) and its gradient is dropped in the backward pass. Memory outside the table is
// never touched.
__device__ int g_bad_id_reported;

__device__ void report_bad_id(const char* op, int64_t t, int32_t id, int64_t vocab) {
  if (atomicExch(&g_bad_id_reported, 1) == 0) {
    printf(
        "[%s] ids[%lld] = %d is outside the vocabulary [0, V=%lld); check the tokenizer "
        "against the model's vocab_size (reported once)\n",
        op, static_cast<long long>(t), id, static_cast<long long>(vocab));
  }
}

// Token t = blockIdx.x * blockDim.y + threadIdx.y (grid-stride); threads along x take the
// row's groups of 8 columns. vec: dim % 8 == 0 and both tables 16-byte aligned.
__global__ void gather_kernel(const int32_t* ids, const void* table, bool table_bf16, void* out,
                              bool out_bf16, int64_t tokens, int64_t vocab, int64_t dim, bool vec) {
  const int64_t groups = (dim + kGroup - 1) / kGroup;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int32_t id = ids[t];
    const bool bad = id < 0 || id >= vocab;
    if (bad && threadIdx.x == 0) report_bad_id("embedding_forward", t, id, vocab);
    const int64_t src = static_cast<int64_t>(id) * dim, dst = t * dim;
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[kGroup];
      if (bad) {
#pragma unroll
        for (int k = 0; k < kGroup; ++k) v[k] = f32_from_bits(0x7FC00000u);
      } else {
        load8(table, table_bf16, src + g * kGroup, src + dim, vec, v);
      }
      store8(out, out_bf16, dst + g * kGroup, dst + dim, vec, v);
    }
  }
}

// acc[c] += dout[rows[r], col0 + c * kScatterThreads] for r < count, in order: all the rows'
// loads are issued before the first addition, so a frequent id waits for memory once per
// kRowBatch tokens rather than once per token.
__device__ __forceinline__ void add_rows(const int64_t (&rows)[kRowBatch], int count,
                                         const void* dout, bool bf16, int64_t dim, int64_t col0,
                                         float (&acc)[kScatterCols]) {
  // Column c is col0 + c * kScatterThreads: a constant offset from the row's pointer, so
  // the loads need no 64-bit address arithmetic of their own.
  const int64_t valid = dim - col0;  // columns c with c * kScatterThreads < valid exist
  float v[kRowBatch][kScatterCols];
#pragma unroll
  for (int r = 0; r < kRowBatch; ++r) {
    const int64_t from = (r < count ? rows[r] : 0) * dim + col0;
    const uint16_t* h = static_cast<const uint16_t*>(dout) + from;
    const float* f = static_cast<const float*>(dout) + from;
#pragma unroll
    for (int c = 0; c < kScatterCols; ++c) {
      const int at = c * kScatterThreads;
      v[r][c] = r >= count || at >= valid ? 0.0f : bf16 ? bf16_to_f32(h[at]) : f[at];
    }
  }
#pragma unroll
  for (int r = 0; r < kRowBatch; ++r) {
    if (r >= count) break;
#pragma unroll
    for (int c = 0; c < kScatterCols; ++c) acc[c] = __fadd_rn(acc[c], v[r][c]);
  }
}

// Block (t, c): if t is the first token with its id, it adds the dout rows of every token
// with that id, in increasing t, onto dtable's row (columns of slice c), in registers, and
// writes the row once; any other block returns after finding an earlier token with its id.
// So every element is written by one thread, and summed in the CPU kernel's order with the
// same fp32 additions: the same bits. Cost: a first token scans all ids, the others scan up
// to their id's first token, O(T * distinct ids) comparisons, shared by a block's threads.
__global__ void __launch_bounds__(kScatterThreads)
    scatter_add_kernel(const int32_t* ids, const void* dout, bool bf16, float* dtable,
                       int64_t tokens, int64_t vocab, int64_t dim) {
  __shared__ unsigned matches[kScanStep / 32];
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  if (id < 0 || id >= vocab) {  // the same for the whole block: a uniform return
    if (threadIdx.x == 0 && blockIdx.y == 0) report_bad_id("embedding_backward", t, id, vocab);
    return;
  }
  for (int64_t base = 0; base < t; base += kScanStep) {
    bool seen = false;
#pragma unroll
    for (int q = 0; q < kIdsPerThread; ++q) {
      const int64_t k = base + q * kScatterThreads + threadIdx.x;
      seen |= k < t && ids[k] == id;
    }
    if (__syncthreads_or(seen)) return;  // uniform: every thread gets the same answer
  }

  const int64_t col0 = blockIdx.y * kScatterBlockCols + threadIdx.x;
  float* row = dtable + static_cast<int64_t>(id) * dim;
  float acc[kScatterCols];
#pragma unroll
  for (int c = 0; c < kScatterCols; ++c) {
    const int64_t j = col0 + c * kScatterThreads;
    acc[c] = j < dim ? row[j] : 0.0f;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t pending[kRowBatch];  // the next tokens to add, in increasing t
  int count = 0;
  for (int64_t base = t; base < tokens; base += kScanStep) {
    // Bit b of matches[w]: token base + 32 w + b has this id (w = q * warps + warp).
#pragma unroll
    for (int q = 0; q < kIdsPerThread; ++q) {
      const int64_t k = base + q * kScatterThreads + threadIdx.x;
      const unsigned m = __ballot_sync(0xFFFFFFFFu, k < tokens && ids[k] == id);
      if (lane == 0) matches[q * (kScatterThreads / 32) + warp] = m;
    }
    __syncthreads();
    for (int w = 0; w < kScanStep / 32; ++w) {
      for (unsigned m = matches[w]; m != 0; m &= m - 1) {
        pending[count++] = base + w * 32 + (__ffs(static_cast<int>(m)) - 1);
        if (count == kRowBatch) {
          add_rows(pending, count, dout, bf16, dim, col0, acc);
          count = 0;
        }
      }
    }
    __syncthreads();  // matches is rewritten in the next step
  }
  add_rows(pending, count, dout, bf16, dim, col0, acc);
#pragma unroll
  for (int c = 0; c < kScatterCols; ++c) {
    const int64_t j = col0 + c * kScatterThreads;
    if (j < dim) row[j] = acc[c];
  }
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  OCTET_CUDA_CHECK("embedding_forward", cudaSetDevice(table.device.index));
  const int64_t tokens = ids.numel(), dim = table.cols();
  const int64_t groups = (dim + kGroup - 1) / kGroup;
  // Warps along the row, rows of small tables stacked along y to fill the block.
  const int bx = static_cast<int>(groups >= kThreads ? kThreads : (groups + 31) / 32 * 32);
  const dim3 block(bx, kThreads / bx);
  const bool vec = dim % kGroup == 0 && aligned16(table.data) && aligned16(out.data);
  launch_kernel(gather_kernel, blocks_for(tokens, static_cast<int>(block.y)), block, 0, stream(),
                ids.as<const int32_t>(), table.data, table.dtype == DType::bf16, out.data,
                out.dtype == DType::bf16, tokens, table.rows(), dim, vec);
  OCTET_CUDA_CHECK_LAUNCH("embedding_forward");
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  constexpr const char* op = "embedding_backward";
  OCTET_CUDA_CHECK(op, cudaSetDevice(dtable.device.index));
  const int64_t tokens = ids.numel(), dim = dtable.cols();
  const int64_t slices = (dim + kScatterBlockCols - 1) / kScatterBlockCols;
  OCTET_CHECK(tokens <= std::numeric_limits<int32_t>::max() && slices <= 65535, op, tokens,
              " tokens of width ", dim,
              " exceed one launch (2^31 - 1 tokens, 65535 * 4096 columns); split the batch");
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(slices));
  launch_kernel(scatter_add_kernel, grid, kScatterThreads, 0, stream(), ids.as<const int32_t>(),
                dout.data, dout.dtype == DType::bf16, dtable.as<float>(), tokens, dtable.rows(),
                dim);
  OCTET_CUDA_CHECK_LAUNCH(op);
}

}  // namespace octet::kernels::cuda
