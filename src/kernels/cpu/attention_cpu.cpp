// kernels/cpu/attention_cpu.cpp: causal GQA attention on the CPU: the workspace, the
// choice between the tiled kernels (attention_tiled_cpu.cpp, AVX-512 with SLEEF's exp) and
// the scalar kernels here, which run everywhere else. The scalar forward pass takes one
// query row per task (its scores in a per-thread row of the workspace); the scalar
// backward pass recomputes the probabilities, first per query row for dq, then per block
// of keys for dk and dv, so that every gradient element has one writer and a fixed order
// of summation.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/attention_cpu.h"

namespace octet::kernels::cpu {
namespace attn {

constexpr size_t kAlign = 64;

int64_t floats_per_thread(int64_t seq_len, int64_t head_dim) {
  // Scalar: the forward row (scores, q, acc), the dq task (q, dout row, dq) and the dk/dv
  // task (dk, dv, q, dout row). Tiled: the forward tile (q, k^T, v, acc: 4 kTile hd, kTile
  // rows of scores, 2 kTile row statistics, the AMX products' parts of P: kAmxForwardSplit)
  // and the backward tiles (q, dout, k, k^T, v^T, two accumulators: 7 kTile hd; P and dS of
  // two tiles: 4 kTile^2; 2 kTile row statistics; bf16 q and dout, and both transposed:
  // 2 kTile hd; the AMX products' parts of dS and P: 7.5 kTile^2);
  // after those (at floats_per_thread(0, hd)) the fused backward task's q, dout, dq, dk and
  // dv of the whole (padded) sequence, 2 statistics per row, bf16 q and dout, and both
  // transposed (2 s_pad hd); dk and dv 16 floats a row longer, q and dout transposed 32 bf16.
  const int64_t s_pad = (seq_len + kTile - 1) / kTile * kTile;
  const int64_t n = std::max({seq_len + 2 * head_dim, 3 * head_dim, (2 * kTile + 2) * head_dim,
                              4 * kTile * head_dim + kTile * s_pad + 2 * kTile + kAmxForwardSplit,
                              9 * kTile * head_dim + 12 * kTile * kTile + 2 * kTile});
  const int64_t fused = s_pad == 0 ? 0
                                   : floats_per_thread(0, head_dim) + 7 * s_pad * head_dim +
                                         2 * s_pad + 64 * head_dim;
  // The forward task of one (sequence, kv head): the tile's pieces, then its keys
  // transposed and values for the whole (padded) sequence.
  const int64_t forward =
      (4 * kTile * head_dim + kTile * s_pad + 2 * kTile + kAmxForwardSplit + 15) / 16 * 16 +
      2 * s_pad * head_dim;
  return (std::max({n, fused, forward}) + 15) / 16 * 16;
}

Slices slices(const Tensor& workspace, int64_t seq_len, int64_t head_dim) {
  const auto address = reinterpret_cast<uintptr_t>(workspace.data);
  const size_t pad = (kAlign - address % kAlign) % kAlign;
  const int64_t stride = floats_per_thread(seq_len, head_dim);
  const size_t bytes = workspace.nbytes() > pad ? workspace.nbytes() - pad : 0;
  const int64_t room = static_cast<int64_t>(bytes / (stride * sizeof(float)));
  const int threads = static_cast<int>(std::clamp<int64_t>(room, 1, omp_get_max_threads()));
  return {reinterpret_cast<float*>(address + pad), stride, threads};
}

}  // namespace attn
namespace {

using attn::Layout;
using attn::Slices;

// Keys per backward task of the scalar kernel: dk and dv of a block accumulate in
// 2 * 32 * head_dim floats.
constexpr int64_t kKeyBlock = attn::kTile;

template <typename A>
void load(const A* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

template <typename A>
void forward_impl(const A* qkv, A* out, float* lse, const Layout& L, const Slices& ws) {
  const int64_t S = L.d.seq_len, hd = L.d.head_dim, H = L.d.n_heads;
  const int64_t rows = L.d.batch * H * S;
#pragma omp parallel num_threads(ws.threads) if (ws.threads > 1 && L.work() > kParallelElements)
  {
    float* scores = ws.of(omp_get_thread_num());
    float* q = scores + S;
    float* acc = q + hd;
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / (H * S), h = r / S % H, i = r % S, g = h / L.group;
      load(qkv + L.q(b, i, h), q, hd);
      float m = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        const float s = dot(q, qkv + L.k(b, j, g), hd) * L.scale;
        scores[j] = s;
        m = s > m ? s : m;
      }
      float l = 0.0f;
      std::fill(acc, acc + hd, 0.0f);
      for (int64_t j = 0; j <= i; ++j) {
        const float p = std::exp(scores[j] - m);
        l += p;
        const A* v = qkv + L.v(b, j, g);
        for (int64_t c = 0; c < hd; ++c) acc[c] += p * to_f32(v[c]);
      }
      A* o = out + L.o(b, i, h);
      for (int64_t c = 0; c < hd; ++c) o[c] = from_f32<A>(acc[c] / l);
      lse[L.stat(b, h, i)] = m + std::log(l);
    }
  }
}

// What the backward passes share for one (query i, key j) pair: P_ij recomputed from
// the saved lse and dS_ij = P_ij (dout_i . v_j - D_i). Both passes call this with the
// same arguments, so they see the same bits.
struct Pair {
  float p, ds;
};
template <typename A>
Pair pair(const float* q, const float* go, const A* k, const A* v, float lse_i, float d_i,
          int64_t hd, float scale) {
  const float p = std::exp(dot(q, k, hd) * scale - lse_i);
  return {p, p * (dot(go, v, hd) - d_i)};
}

template <typename A>
void backward_impl(const A* dout, const A* qkv, const A* out, const float* lse, A* dqkv,
                   const Layout& L, const Slices& ws) {
  const int64_t S = L.d.seq_len, hd = L.d.head_dim, H = L.d.n_heads, Hkv = L.d.n_kv_heads;
  const int64_t rows = L.d.batch * H * S;
  const int64_t key_blocks = (S + kKeyBlock - 1) / kKeyBlock;
  const int64_t tasks = L.d.batch * Hkv * key_blocks;
#pragma omp parallel num_threads(ws.threads) if (ws.threads > 1 && L.work() > kParallelElements)
  {
    float* slice = ws.of(omp_get_thread_num());
    // dq: one query row per task, its keys j <= i in increasing order.
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / (H * S), h = r / S % H, i = r % S, g = h / L.group;
      float* q = slice;
      float* go = q + hd;
      float* dq = go + hd;
      load(qkv + L.q(b, i, h), q, hd);
      load(dout + L.o(b, i, h), go, hd);
      const float d_i = dot(go, out + L.o(b, i, h), hd);
      const float lse_i = lse[L.stat(b, h, i)];
      std::fill(dq, dq + hd, 0.0f);
      for (int64_t j = 0; j <= i; ++j) {
        const A* k = qkv + L.k(b, j, g);
        const Pair pr = pair(q, go, k, qkv + L.v(b, j, g), lse_i, d_i, hd, L.scale);
        for (int64_t c = 0; c < hd; ++c) dq[c] += pr.ds * to_f32(k[c]);
      }
      A* dst = dqkv + L.q(b, i, h);
      for (int64_t c = 0; c < hd; ++c) dst[c] = from_f32<A>(dq[c] * L.scale);
    }
    // dk, dv: one block of keys of one kv head per task, summed over its q heads in
    // increasing order and over the queries i >= j in increasing order.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / (Hkv * key_blocks), g = task / key_blocks % Hkv;
      const int64_t j0 = task % key_blocks * kKeyBlock, j1 = std::min(S, j0 + kKeyBlock);
      float* dk = slice;
      float* dv = dk + kKeyBlock * hd;
      float* q = dv + kKeyBlock * hd;
      float* go = q + hd;
      std::fill(dk, dk + 2 * kKeyBlock * hd, 0.0f);
      for (int64_t h = g * L.group; h < (g + 1) * L.group; ++h) {
        for (int64_t i = j0; i < S; ++i) {
          load(qkv + L.q(b, i, h), q, hd);
          load(dout + L.o(b, i, h), go, hd);
          const float d_i = dot(go, out + L.o(b, i, h), hd);
          const float lse_i = lse[L.stat(b, h, i)];
          for (int64_t j = j0; j < std::min(j1, i + 1); ++j) {
            const Pair pr =
                pair(q, go, qkv + L.k(b, j, g), qkv + L.v(b, j, g), lse_i, d_i, hd, L.scale);
            float* dkj = dk + (j - j0) * hd;
            float* dvj = dv + (j - j0) * hd;
            for (int64_t c = 0; c < hd; ++c) {
              dkj[c] += pr.ds * q[c];
              dvj[c] += pr.p * go[c];
            }
          }
        }
      }
      for (int64_t j = j0; j < j1; ++j) {
        A* dkj = dqkv + L.k(b, j, g);
        A* dvj = dqkv + L.v(b, j, g);
        for (int64_t c = 0; c < hd; ++c) {
          dkj[c] = from_f32<A>(dk[(j - j0) * hd + c] * L.scale);
          dvj[c] = from_f32<A>(dv[(j - j0) * hd + c]);
        }
      }
    }
  }
}

}  // namespace

size_t attention_workspace_bytes(int64_t seq_len, int64_t head_dim, int threads) {
  const int64_t n = threads > 0 ? threads : omp_get_max_threads();
  return static_cast<size_t>(n * attn::floats_per_thread(seq_len, head_dim)) * sizeof(float) +
         attn::kAlign;
}

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                       const AttentionDims& dims, const Tensor& workspace) {
  const Layout layout(dims);
  const Slices ws = attn::slices(workspace, dims.seq_len, dims.head_dim);
  if (attn::tiled_available()) return attn::tiled_forward(qkv, out, lse, layout, ws);
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    forward_impl(qkv.as<const A>(), out.as<A>(), lse.as<float>(), layout, ws);
  });
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& dqkv, const AttentionDims& dims, const Tensor& workspace) {
  const Layout layout(dims);
  const Slices ws = attn::slices(workspace, dims.seq_len, dims.head_dim);
  if (attn::tiled_available()) return attn::tiled_backward(dout, qkv, out, lse, dqkv, layout, ws);
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    backward_impl(dout.as<const A>(), qkv.as<const A>(), out.as<const A>(), lse.as<const float>(),
                  dqkv.as<A>(), layout, ws);
  });
}

}  // namespace octet::kernels::cpu
