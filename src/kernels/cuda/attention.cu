// kernels/cuda/attention.cu: causal GQA attention on CUDA devices. bf16 with head_dim 64
// or 128 runs on the tensor-core kernels (attention_flash_forward.cu, attention_flash_backward.cu);
// everything else (f32, other head dims, unaligned views) on the simple kernels here: one warp per
// query row (forward, dq) or key row (dk, dv), each lane owning the columns c = lane (mod 32), fp32
// math in the CPU kernel's formulas and order of operations (two passes, max first), so that both
// devices share one error analysis.
#include <cmath>
#include <cstdint>

#include "core/convert.h"
#include "kernels/backends.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace octet::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Each warp keeps up to four head_dim-float rows in shared memory (32 KiB at this size).
constexpr int64_t kMaxSimpleHeadDim = 512;

__device__ __forceinline__ float load_f32(const float* x, int64_t i) {
  return x[i];
}
__device__ __forceinline__ float load_f32(const uint16_t* x, int64_t i) {
  return bf16_to_f32(x[i]);
}
__device__ __forceinline__ void store_f32(float* x, int64_t i, float v) {
  x[i] = v;
}
__device__ __forceinline__ void store_f32(uint16_t* x, int64_t i, float v) {
  x[i] = f32_to_bf16(v);
}

// x . y over n columns, every lane ending with the same bits (a butterfly of commutative
// adds). x and y: shared or global rows of f32 or bf16.
template <typename X, typename Y>
__device__ __forceinline__ float warp_dot(const X* x, const Y* y, int64_t n) {
  const int lane = threadIdx.x & 31;
  float sum = 0.0f;
  for (int64_t c = lane; c < n; c += 32) sum += load_f32(x, c) * load_f32(y, c);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  return sum;
}

// exp in double, rounded once to f32: within the 1 ulp that the error analysis allows
// for libm's expf (CUDA's expf may be off by 2).
__device__ __forceinline__ float exp_f32(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

// A kernel argument, copied byte for byte: laid out without padding (the filler takes the
// 4 bytes after scale, which would otherwise carry stale stack bytes that the emulated
// device's argument check reads as a host address).
struct Dims {
  int64_t batch, seq_len, n_heads, n_kv_heads, head_dim, group, width, out_width;
  float scale;
  float unused = 0.0f;
  __device__ int64_t q(int64_t b, int64_t i, int64_t h) const {
    return (b * seq_len + i) * width + h * head_dim;
  }
  __device__ int64_t k(int64_t b, int64_t j, int64_t g) const { return q(b, j, n_heads + g); }
  __device__ int64_t v(int64_t b, int64_t j, int64_t g) const {
    return q(b, j, n_heads + n_kv_heads + g);
  }
  __device__ int64_t o(int64_t b, int64_t i, int64_t h) const {
    return (b * seq_len + i) * out_width + h * head_dim;
  }
  __device__ int64_t stat(int64_t b, int64_t h, int64_t i) const {
    return (b * n_heads + h) * seq_len + i;
  }
};

static_assert(sizeof(Dims) == 8 * 8 + 2 * 4, "Dims must have no padding bytes");

// Query rows r = 0 .. B * H * S - 1, the longest (last query) first: the warp's
// (b, h, i). Returns false past the end.
__device__ __forceinline__ bool query_row(const Dims& d, int64_t& b, int64_t& h, int64_t& i) {
  const int64_t r = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  const int64_t heads = d.batch * d.n_heads;
  if (r >= heads * d.seq_len) return false;
  i = d.seq_len - 1 - r / heads;
  b = r % heads / d.n_heads;
  h = r % d.n_heads;
  return true;
}

template <typename A>
__global__ void __launch_bounds__(kThreads)
    simple_forward_kernel(const A* qkv, A* out, float* lse, Dims d) {
  OCTET_DYNAMIC_SHARED(float, rows);
  int64_t b, h, i;
  if (!query_row(d, b, h, i)) return;  // whole warps leave; no block barrier follows
  const int64_t hd = d.head_dim, g = h / d.group;
  const int lane = threadIdx.x & 31;
  float* q = rows + (threadIdx.x >> 5) * 2 * hd;
  float* acc = q + hd;
  // Each lane touches only its own columns c = lane (mod 32) of q and acc: no barrier.
  for (int64_t c = lane; c < hd; c += 32) q[c] = load_f32(qkv, d.q(b, i, h) + c), acc[c] = 0.0f;
  float m = -INFINITY;
  for (int64_t j = 0; j <= i; ++j) m = fmaxf(m, warp_dot(q, qkv + d.k(b, j, g), hd) * d.scale);
  float l = 0.0f;
  for (int64_t j = 0; j <= i; ++j) {
    const float p = exp_f32(warp_dot(q, qkv + d.k(b, j, g), hd) * d.scale - m);
    l += p;
    const A* v = qkv + d.v(b, j, g);
    for (int64_t c = lane; c < hd; c += 32) acc[c] += p * load_f32(v, c);
  }
  for (int64_t c = lane; c < hd; c += 32) store_f32(out, d.o(b, i, h) + c, acc[c] / l);
  if (lane == 0) lse[d.stat(b, h, i)] = m + static_cast<float>(log(static_cast<double>(l)));
}

// dq of one query row: P and dS recomputed per key as the CPU kernel does.
template <typename A>
__global__ void __launch_bounds__(kThreads)
    simple_dq_kernel(const A* dout, const A* qkv, const A* out, const float* lse, A* dqkv, Dims d) {
  OCTET_DYNAMIC_SHARED(float, rows);
  int64_t b, h, i;
  if (!query_row(d, b, h, i)) return;
  const int64_t hd = d.head_dim, g = h / d.group;
  const int lane = threadIdx.x & 31;
  float* q = rows + (threadIdx.x >> 5) * 3 * hd;
  float* go = q + hd;
  float* dq = go + hd;
  for (int64_t c = lane; c < hd; c += 32) {
    q[c] = load_f32(qkv, d.q(b, i, h) + c);
    go[c] = load_f32(dout, d.o(b, i, h) + c);
    dq[c] = 0.0f;
  }
  const float d_i = warp_dot(go, out + d.o(b, i, h), hd);
  const float lse_i = lse[d.stat(b, h, i)];
  for (int64_t j = 0; j <= i; ++j) {
    const A* k = qkv + d.k(b, j, g);
    const float p = exp_f32(warp_dot(q, k, hd) * d.scale - lse_i);
    const float ds = p * (warp_dot(go, qkv + d.v(b, j, g), hd) - d_i);
    for (int64_t c = lane; c < hd; c += 32) dq[c] += ds * load_f32(k, c);
  }
  for (int64_t c = lane; c < hd; c += 32) store_f32(dqkv, d.q(b, i, h) + c, dq[c] * d.scale);
}

// dk and dv of one key row of one kv head, summed over its q heads in increasing order
// and over the queries i >= j in increasing order; D_i recomputed where it is needed
// (no workspace). Key rows r = j * B * Hkv + (b, g): the longest (first key) first.
template <typename A>
__global__ void __launch_bounds__(kThreads)
    simple_dkdv_kernel(const A* dout, const A* qkv, const A* out, const float* lse, A* dqkv,
                       Dims d) {
  OCTET_DYNAMIC_SHARED(float, rows);
  const int64_t r = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  const int64_t kv_heads = d.batch * d.n_kv_heads;
  if (r >= kv_heads * d.seq_len) return;
  const int64_t j = r / kv_heads, b = r % kv_heads / d.n_kv_heads, g = r % d.n_kv_heads;
  const int64_t hd = d.head_dim;
  const int lane = threadIdx.x & 31;
  float* k = rows + (threadIdx.x >> 5) * 4 * hd;
  float* v = k + hd;
  float* dk = v + hd;
  float* dv = dk + hd;
  for (int64_t c = lane; c < hd; c += 32) {
    k[c] = load_f32(qkv, d.k(b, j, g) + c);
    v[c] = load_f32(qkv, d.v(b, j, g) + c);
    dk[c] = dv[c] = 0.0f;
  }
  for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
    for (int64_t i = j; i < d.seq_len; ++i) {
      const A* q = qkv + d.q(b, i, h);
      const A* go = dout + d.o(b, i, h);
      const float d_i = warp_dot(go, out + d.o(b, i, h), hd);
      const float p = exp_f32(warp_dot(q, k, hd) * d.scale - lse[d.stat(b, h, i)]);
      const float ds = p * (warp_dot(go, v, hd) - d_i);
      for (int64_t c = lane; c < hd; c += 32) {
        dk[c] += ds * load_f32(q, c);
        dv[c] += p * load_f32(go, c);
      }
    }
  }
  for (int64_t c = lane; c < hd; c += 32) {
    store_f32(dqkv, d.k(b, j, g) + c, dk[c] * d.scale);
    store_f32(dqkv, d.v(b, j, g) + c, dv[c]);
  }
}

Dims dims_of(const AttentionDims& a) {
  return {a.batch,
          a.seq_len,
          a.n_heads,
          a.n_kv_heads,
          a.head_dim,
          a.n_heads / a.n_kv_heads,
          (a.n_heads + 2 * a.n_kv_heads) * a.head_dim,
          a.n_heads * a.head_dim,
          1.0f / std::sqrt(static_cast<float>(a.head_dim))};  // as the CPU kernel
}

// The limits of the CUDA kernels, beyond those of the op.
void check_limits(const char* op, const AttentionDims& d) {
  constexpr int64_t kMaxSeqLen = int64_t{65535} * 64;  // grid.y counts blocks of 64 rows
  OCTET_CHECK(d.seq_len <= kMaxSeqLen, op, "seq_len=", d.seq_len, " is above the CUDA kernels' ",
              kMaxSeqLen, "; split the sequence");
  OCTET_CHECK(d.batch * d.n_heads * d.seq_len / kWarps < (int64_t{1} << 31), op, "batch=", d.batch,
              " x n_heads=", d.n_heads, " x seq_len=", d.seq_len,
              " rows are more than the simple CUDA kernels' grid holds; split the batch");
  OCTET_CHECK(
      d.head_dim <= kMaxSimpleHeadDim, op, "head_dim=", d.head_dim, " is above the ",
      kMaxSimpleHeadDim,
      " that the simple CUDA kernels keep in shared memory; use head_dim <= ", kMaxSimpleHeadDim);
}

unsigned warp_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarps - 1) / kWarps);
}

template <typename A>
void simple_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                    const AttentionDims& a) {
  const Dims d = dims_of(a);
  const size_t smem = kWarps * 2 * a.head_dim * sizeof(float);
  launch_kernel(simple_forward_kernel<A>, warp_blocks(a.batch * a.n_heads * a.seq_len), kThreads,
                smem, stream(), qkv.as<const A>(), out.as<A>(), lse.as<float>(), d);
  OCTET_CUDA_CHECK_LAUNCH("attention_forward");
}

template <typename A>
void simple_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                     const Tensor& dqkv, const AttentionDims& a) {
  const Dims d = dims_of(a);
  launch_kernel(simple_dq_kernel<A>, warp_blocks(a.batch * a.n_heads * a.seq_len), kThreads,
                kWarps * 3 * a.head_dim * sizeof(float), stream(), dout.as<const A>(),
                qkv.as<const A>(), out.as<const A>(), lse.as<const float>(), dqkv.as<A>(), d);
  OCTET_CUDA_CHECK_LAUNCH("attention_backward");
  launch_kernel(simple_dkdv_kernel<A>, warp_blocks(a.batch * a.n_kv_heads * a.seq_len), kThreads,
                kWarps * 4 * a.head_dim * sizeof(float), stream(), dout.as<const A>(),
                qkv.as<const A>(), out.as<const A>(), lse.as<const float>(), dqkv.as<A>(), d);
  OCTET_CUDA_CHECK_LAUNCH("attention_backward");
}

}  // namespace

// The workspace is for the CPU kernels; the CUDA kernels need none.
void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                       const AttentionDims& dims, const Tensor& /*workspace*/) {
  check_limits("attention_forward", dims);
  OCTET_CUDA_CHECK("attention_forward", cudaSetDevice(qkv.device.index));
  if (flash_attention_supported(dims, {qkv, out})) {
    return flash_attention_forward(qkv, out, lse, dims);
  }
  if (qkv.dtype == DType::bf16) return simple_forward<uint16_t>(qkv, out, lse, dims);
  simple_forward<float>(qkv, out, lse, dims);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& dqkv, const AttentionDims& dims,
                        const Tensor& /*workspace*/) {
  check_limits("attention_backward", dims);
  OCTET_CUDA_CHECK("attention_backward", cudaSetDevice(qkv.device.index));
  if (flash_attention_supported(dims, {dout, qkv, out, dqkv})) {
    return flash_attention_backward(dout, qkv, out, lse, dqkv, dims);
  }
  if (qkv.dtype == DType::bf16) return simple_backward<uint16_t>(dout, qkv, out, lse, dqkv, dims);
  simple_backward<float>(dout, qkv, out, lse, dqkv, dims);
}

}  // namespace octet::kernels::cuda
