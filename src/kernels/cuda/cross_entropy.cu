// kernels/cuda/cross_entropy.cu: softmax cross-entropy and its gradient on CUDA
// devices, one CUDA block per row of logits: one read of the row for an online max and
// sum of exp, then (with dlogits) a second read that writes the gradient, possibly over
// the logits themselves.
#include <cmath>
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_io.cuh"

namespace octet::kernels::cuda {
namespace {

// Threads per row. tests/kernels/test_cross_entropy.cpp bounds the error of the sum of
// exp assuming at least 256 threads per row, at most 1024, and 16-byte packs.
constexpr int kLossThreads = 512;
constexpr int kWarps = kLossThreads / 32;

// s, a sum of exp(x - m_old), re-expressed relative to m_new >= m_old. When the max did
// not move the factor is exactly 1 and skipped; that also keeps m_old = m_new = -inf
// (nothing but -inf seen yet) from producing exp(-inf + inf) = NaN, while a NaN in s
// (a NaN or +inf logit) survives the rescaling, as it does on the CPU.
__device__ __forceinline__ float rescale(float s, float m_old, float m_new) {
  return m_old == m_new ? s : __fmul_rn(s, expf(__fsub_rn(m_old, m_new)));
}

// (m, s) and (m2, s2) merged into (max, sum relative to it). Symmetric in its two
// arguments bit for bit, so every lane of a butterfly ends with the same value.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  s = __fadd_rn(rescale(s, m, mn), rescale(s2, m2, mn));
  m = mn;
}

// Adds n values to the running (m, s): the max moves once per group, so each term
// is rescaled at most once per group read after it. A -inf logit adds exp(-inf) = 0, as
// on the CPU (whose max is the row's): while a thread has seen nothing but -inf, m is
// -inf too and x - m would be NaN.
template <int N>
__device__ __forceinline__ void accumulate(float& m, float& s, const float (&v)[N]) {
  float mn = m;
#pragma unroll
  for (int k = 0; k < N; ++k) mn = fmaxf(mn, v[k]);  // fmaxf drops NaN, like the CPU's max
  s = rescale(s, m, mn);
  m = mn;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    s = __fadd_rn(s, v[k] == -INFINITY ? 0.0f : expf(__fsub_rn(v[k], m)));
  }
}

// The gradient of one logit (the CPU's expression, each operation rounded on its own).
__device__ __forceinline__ float grad_of(float x, float lse, bool is_target, float grad_scale) {
  const float p = expf(__fsub_rn(x, lse));
  return __fmul_rn(is_target ? __fsub_rn(p, 1.0f) : p, grad_scale);
}

// A row of V logits is split into a head of scalars up to the first 16-byte boundary,
// packs of N = 16 / sizeof(A) elements, and a tail of fewer than N scalars (V need not
// be a multiple of anything, so rows need not start aligned). Thread k takes head
// element k, tail element k and packs k, k + kLossThreads, ...
//
// dlogits may be logits (then `packed_store` is true): every thread reads its elements
// in the first pass, all threads meet at the block reduction, and in the second pass
// each thread reads an element before it writes the same element. So no __restrict__
// on those two pointers.
//
// An out-of-range target cannot be reported from here without a host synchronisation:
// its row gets a NaN loss and a NaN gradient, which the caller sees in the losses.
template <typename A>
__global__ void __launch_bounds__(kLossThreads)
    cross_entropy_kernel(const A* logits, const int32_t* __restrict__ targets,
                         float* __restrict__ losses, A* dlogits, int64_t rows, int64_t vocab,
                         float grad_scale, bool packed_store) {
  constexpr int N = 16 / sizeof(A);
  using P = Pack<A, N>;
  __shared__ float warp_m[kWarps], warp_s[kWarps];
  __shared__ float row_lse;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const A* x = logits + row * vocab;
    const uintptr_t misalign = reinterpret_cast<uintptr_t>(x) % 16;
    const int64_t head =
        min(vocab, static_cast<int64_t>(misalign == 0 ? 0 : (16 - misalign) / sizeof(A)));
    const int64_t packs = (vocab - head) / N;
    const int64_t tail_start = head + packs * N, tail = vocab - tail_start;
    const P* xp = reinterpret_cast<const P*>(x + head);
    const int32_t target = targets[row];
    const bool valid = target >= 0 && target < vocab;

    // Pass 1: this thread's (max, sum of exp(x - max)), head, packs, tail in order.
    float m = -INFINITY, s = 0.0f;
    if (tid < head) accumulate<1>(m, s, {to_f32(x[tid])});
    for (int64_t k = tid; k < packs; k += kLossThreads) {
      const P p = xp[k];
      float v[N];
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = to_f32(p.v[i]);
      accumulate<N>(m, s, v);
    }
    if (tid < tail) accumulate<1>(m, s, {to_f32(x[tail_start + tid])});
    // The target's logit is read before any thread writes the row (the barrier below).
    const float x_target = tid == 0 && valid ? to_f32(x[target]) : 0.0f;

    // Block reduction in a fixed order (the same bits on every run): a butterfly in
    // each warp, then one across the warps' results in warp 0.
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      merge(m, s, __shfl_xor_sync(0xFFFFFFFFu, m, off), __shfl_xor_sync(0xFFFFFFFFu, s, off));
    }
    if (lane == 0) warp_m[warp] = m, warp_s[warp] = s;
    __syncthreads();
    if (warp == 0) {
      m = lane < kWarps ? warp_m[lane] : -INFINITY;
      s = lane < kWarps ? warp_s[lane] : 0.0f;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        merge(m, s, __shfl_xor_sync(0xFFFFFFFFu, m, off), __shfl_xor_sync(0xFFFFFFFFu, s, off));
      }
      if (lane == 0) {
        const float lse = valid ? __fadd_rn(m, logf(s)) : NAN;
        row_lse = lse;
        losses[row] = valid ? __fsub_rn(lse, x_target) : NAN;
      }
    }
    __syncthreads();

    // Pass 2: dlogits = (softmax - onehot) * grad_scale, read then written element by
    // element (an invalid target's NaN lse makes the whole row NaN).
    if (dlogits != nullptr) {
      const float lse = row_lse;
      A* d = dlogits + row * vocab;
      if (tid < head) store(&d[tid], grad_of(to_f32(x[tid]), lse, tid == target, grad_scale));
      for (int64_t k = tid; k < packs; k += kLossThreads) {
        const P p = xp[k];
        const int64_t j0 = head + k * N;
        P out;
#pragma unroll
        for (int i = 0; i < N; ++i) {
          store(&out.v[i], grad_of(to_f32(p.v[i]), lse, j0 + i == target, grad_scale));
        }
        if (packed_store) {
          *reinterpret_cast<P*>(d + j0) = out;
        } else {
#pragma unroll
          for (int i = 0; i < N; ++i) d[j0 + i] = out.v[i];
        }
      }
      if (tid < tail) {
        const int64_t j = tail_start + tid;
        store(&d[j], grad_of(to_f32(x[j]), lse, j == target, grad_scale));
      }
    }
    // warp_m, warp_s and row_lse are reused by the next row.
    __syncthreads();
  }
}

template <typename A>
void launch(const Tensor& logits, const Tensor& targets, const Tensor& losses,
            const Tensor& dlogits, float grad_scale) {
  const int64_t rows = logits.rows(), vocab = logits.cols();
  const A* x = logits.as<const A>();
  A* d = dlogits.empty() ? nullptr : dlogits.as<A>();
  // Rows of logits and dlogits have the same length, so a pack that is aligned in one is
  // aligned in the other exactly when the two base addresses agree modulo 16.
  const bool packed_store =
      d != nullptr && (reinterpret_cast<uintptr_t>(d) - reinterpret_cast<uintptr_t>(x)) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>(rows < 0x7FFFFFFF ? rows : 0x7FFFFFFF);
  launch_kernel(cross_entropy_kernel<A>, blocks, kLossThreads, 0, stream(), x,
                targets.as<const int32_t>(), losses.as<float>(), d, rows, vocab, grad_scale,
                packed_store);
  OCTET_CUDA_CHECK_LAUNCH("cross_entropy");
}

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                   const Tensor& dlogits, float grad_scale) {
  OCTET_CUDA_CHECK("cross_entropy", cudaSetDevice(logits.device.index));
  if (logits.dtype == DType::bf16)
    return launch<uint16_t>(logits, targets, losses, dlogits, grad_scale);
  launch<float>(logits, targets, losses, dlogits, grad_scale);
}

}  // namespace octet::kernels::cuda
