// kernels/cuda/embedding.cu: the embedding row gather and its scatter-add gradient on CUDA
// devices. The gradient is deterministic and bit-equal to the CPU kernel's: the tokens are
// grouped by id (a counting sort), and each dtable row is summed by one block, in
// increasing t, without atomic additions of floats.
#include <cstdint>
#include <cstdio>
#include <limits>

#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_io.cuh"
#include "kernels/cuda/scratch.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kEmbeddingThreads = 256;

// Scatter-add: a block owns up to kScatterThreads * kScatterCols columns of one row (gridDim.y
// covers wider rows); where it scans the ids for its tokens, it compares kScanStep per step.
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

// ---- backward: tokens grouped by id (a counting sort), each id's rows summed in order ----
//
// 1. reset: the per-id state of every id present is cleared;
// 2. count: g_count[id] = number of tokens with that id (atomic increments: exact);
// 3. place: the first token of each id to arrive reserves the id's segment of g_tokens
//    (g_start) and lists the id in g_segment_ids;
// 4. fill: every token writes its index into its id's segment (in arrival order);
// 5. sum: block (d, c) takes the d-th listed id, sorts its segment's token indices in shared
//    memory (bitonic; segments longer than kSortMax instead scan all ids in order), and adds
//    the dout rows onto dtable's row (columns of slice c) in increasing t, in registers,
//    writing the row once.
// Where the segments lie and in which order the ids are listed depends on timing; what each
// dtable row receives does not: its tokens in increasing t, one fp32 addition each, as the
// CPU kernel adds them, so the result is the CPU's bits on every run. Work: O(T + V_present)
// for the grouping, O(n log^2 n) per id of n tokens for the sort, plus the additions.
// The state is static device memory (kernels never allocate), guarded by
// claim_static_scratch: one stream at a time.
constexpr int64_t kMaxTokens = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 18;
constexpr int kSortMax = 2048;  // token indices a block sorts in shared memory
__device__ int32_t g_count[kMaxVocab];
__device__ int32_t g_fill[kMaxVocab];
__device__ int32_t g_start[kMaxVocab];  // -1: no segment yet; -2: being reserved
__device__ int32_t g_tokens[kMaxTokens];
__device__ int32_t g_segment_ids[kMaxTokens];
__device__ int32_t g_cursor, g_distinct;

__global__ void segment_reset_kernel(const int32_t* ids, int64_t tokens, int64_t vocab) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    g_cursor = 0;
    g_distinct = 0;
  }
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) continue;
    g_count[id] = 0;
    g_fill[id] = 0;
    g_start[id] = -1;
  }
}

__global__ void segment_count_kernel(const int32_t* ids, int64_t tokens, int64_t vocab) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) {
      report_bad_id("embedding_backward", t, id, vocab);
      continue;
    }
    atomicAdd(&g_count[id], 1);
  }
}

__global__ void segment_place_kernel(const int32_t* ids, int64_t tokens, int64_t vocab) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) continue;
    if (atomicCAS(&g_start[id], -1, -2) == -1) {  // this token reserves the id's segment
      atomicExch(&g_start[id], atomicAdd(&g_cursor, g_count[id]));
      g_segment_ids[atomicAdd(&g_distinct, 1)] = id;
    }
  }
}

__global__ void segment_fill_kernel(const int32_t* ids, int64_t tokens, int64_t vocab) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) continue;
    g_tokens[g_start[id] + atomicAdd(&g_fill[id], 1)] = static_cast<int32_t>(t);
  }
}

// Sorts sorted[0, n) ascending (n <= kSortMax), padding to a power of two with INT32_MAX.
__device__ void sort_segment(int32_t* sorted, int n) {
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < size; i += kScatterThreads)
    sorted[i] = std::numeric_limits<int32_t>::max();
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = static_cast<int>(threadIdx.x); i < size; i += kScatterThreads) {
        const int partner = i ^ j;
        if (partner > i) {
          const int32_t a = sorted[i], b = sorted[partner];
          if ((a > b) == ((i & k) == 0)) {
            sorted[i] = b;
            sorted[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

__global__ void __launch_bounds__(kScatterThreads)
    segment_sum_kernel(const int32_t* ids, const void* dout, bool bf16, float* dtable,
                       int64_t tokens, int64_t dim) {
  __shared__ int32_t sorted[kSortMax];
  __shared__ unsigned matches[kScanStep / 32];
  if (static_cast<int32_t>(blockIdx.x) >= g_distinct) return;  // uniform for the block
  const int32_t id = g_segment_ids[blockIdx.x];
  const int n = g_count[id];
  const int32_t* segment = g_tokens + g_start[id];

  const int64_t col0 = blockIdx.y * kScatterBlockCols + threadIdx.x;
  float* row = dtable + static_cast<int64_t>(id) * dim;
  float acc[kScatterCols];
#pragma unroll
  for (int c = 0; c < kScatterCols; ++c) {
    const int64_t j = col0 + c * kScatterThreads;
    acc[c] = j < dim ? row[j] : 0.0f;
  }
  int64_t pending[kRowBatch];  // the next tokens to add, in increasing t
  int count = 0;
  if (n <= kSortMax) {
    for (int i = static_cast<int>(threadIdx.x); i < n; i += kScatterThreads) sorted[i] = segment[i];
    sort_segment(sorted, n);  // ends with a barrier
    for (int i = 0; i < n; ++i) {
      pending[count++] = sorted[i];
      if (count == kRowBatch) {
        add_rows(pending, count, dout, bf16, dim, col0, acc);
        count = 0;
      }
    }
  } else {  // a long segment: find its tokens by scanning every id, in order
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int64_t base = 0; base < tokens; base += kScanStep) {
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
  const int bx =
      static_cast<int>(groups >= kEmbeddingThreads ? kEmbeddingThreads : (groups + 31) / 32 * 32);
  const dim3 block(bx, kEmbeddingThreads / bx);
  const bool vec = dim % kGroup == 0 && aligned16(table.data) && aligned16(out.data);
  launch_kernel(gather_kernel, blocks_for(tokens, static_cast<int>(block.y)), block, 0, stream(),
                ids.as<const int32_t>(), table.data, table.dtype == DType::bf16, out.data,
                out.dtype == DType::bf16, tokens, table.rows(), dim, vec);
  OCTET_CUDA_CHECK_LAUNCH("embedding_forward");
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  constexpr const char* op = "embedding_backward";
  OCTET_CUDA_CHECK(op, cudaSetDevice(dtable.device.index));
  claim_static_scratch(op);
  const int64_t tokens = ids.numel(), dim = dtable.cols(), vocab = dtable.rows();
  const int64_t slices = (dim + kScatterBlockCols - 1) / kScatterBlockCols;
  OCTET_CHECK(tokens <= kMaxTokens && slices <= 65535, op, tokens, " tokens of width ", dim,
              " exceed one call (", kMaxTokens,
              " tokens, 65535 * 4096 columns, the size of the static grouping state); split "
              "the batch");
  OCTET_CHECK(vocab <= kMaxVocab, op, "a vocabulary of ", vocab, " rows exceeds the ", kMaxVocab,
              " the CUDA kernel's static per-id state holds");
  if (tokens == 0) return;
  const int32_t* i = ids.as<const int32_t>();
  const unsigned blocks = blocks_for(tokens, kEmbeddingThreads);
  launch_kernel(segment_reset_kernel, blocks, kEmbeddingThreads, 0, stream(), i, tokens, vocab);
  OCTET_CUDA_CHECK_LAUNCH(op);
  launch_kernel(segment_count_kernel, blocks, kEmbeddingThreads, 0, stream(), i, tokens, vocab);
  OCTET_CUDA_CHECK_LAUNCH(op);
  launch_kernel(segment_place_kernel, blocks, kEmbeddingThreads, 0, stream(), i, tokens, vocab);
  OCTET_CUDA_CHECK_LAUNCH(op);
  launch_kernel(segment_fill_kernel, blocks, kEmbeddingThreads, 0, stream(), i, tokens, vocab);
  OCTET_CUDA_CHECK_LAUNCH(op);
  // One block per distinct id at most: blocks past the number of ids return at once.
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(slices));
  launch_kernel(segment_sum_kernel, grid, kScatterThreads, 0, stream(), i, dout.data,
                dout.dtype == DType::bf16, dtable.as<float>(), tokens, dim);
  OCTET_CUDA_CHECK_LAUNCH(op);
}

}  // namespace octet::kernels::cuda
