// kernels/cpu/attention_cpu.h: what the two CPU attention kernels share: the layout of the
// packed qkv activation, the per-thread slices of the workspace and the tiled (AVX-512 or
// AVX2, + SLEEF) kernels' entry points. Internal to kernels/cpu.
// defines: cpu::attn::Layout, cpu::attn::Slices, cpu::attn::slices, cpu::attn::kTile,
//          cpu::attn::kAmxChunk, cpu::attn::kAmxForwardSplit, cpu::attn::Band,
//          cpu::attn::kAllTerms, cpu::attn::floats_per_thread, cpu::attn::tiled_available,
//          cpu::attn::tiled_forward, cpu::attn::tiled_backward
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/tensor.h"
#include "kernels/backends.h"

namespace octet::kernels::cpu::attn {

// Query rows per tile and keys per block of the tiled kernels (and keys per backward task
// of the scalar kernel).
inline constexpr int64_t kTile = 32;

// The terms t of row i that the tile kernels' accumulate adds: i + lo <= t <= i + hi. A tile
// pair on the causal diagonal passes the band outside which every weight is a masked zero;
// skipping such a term changes no bit where x is finite (+-0 added to a sum changes it only
// if the sum is -0, and a sum of fused multiply-adds that starts at +0 never is).
struct Band {
  int64_t lo, hi;
  // The terms [first, second) of rows i..i + r - 1 of a call over n terms: their bands' union.
  std::pair<int64_t, int64_t> terms(int64_t i, int64_t r, int64_t n) const {
    return {std::max<int64_t>(0, i + lo), std::min(n, i + r + hi)};
  }
};
inline constexpr Band kAllTerms{-(int64_t{1} << 40), int64_t{1} << 40};

// The tiled forward's keys per call of its AMX products (attention_amx.h), and the floats
// of the three bf16 parts of a tile's P over that many keys.
inline constexpr int64_t kAmxChunk = 4 * kTile;
inline constexpr int64_t kAmxForwardSplit = 3 * kTile * kAmxChunk / 2;

// Floats per thread of the workspace, enough for either kernel; a multiple of 64 bytes.
int64_t floats_per_thread(int64_t seq_len, int64_t head_dim);

// The workspace cut into one slice per thread; as many threads as it has room for.
struct Slices {
  float* base;
  int64_t stride;
  int threads;
  float* of(int thread) const { return base + thread * stride; }
};
Slices slices(const Tensor& workspace, int64_t seq_len, int64_t head_dim);

// Where token rows, heads and the kv head of a q head are.
struct Layout {
  AttentionDims d;
  int64_t width, out_width, group;
  float scale;
  explicit Layout(const AttentionDims& dims)
      : d(dims),
        width((dims.n_heads + 2 * dims.n_kv_heads) * dims.head_dim),
        out_width(dims.n_heads * dims.head_dim),
        group(dims.n_heads / dims.n_kv_heads),
        scale(1.0f / std::sqrt(static_cast<float>(dims.head_dim))) {}
  int64_t q(int64_t b, int64_t i, int64_t h) const {
    return (b * d.seq_len + i) * width + h * d.head_dim;
  }
  int64_t k(int64_t b, int64_t j, int64_t g) const { return q(b, j, d.n_heads + g); }
  int64_t v(int64_t b, int64_t j, int64_t g) const { return q(b, j, d.n_heads + d.n_kv_heads + g); }
  int64_t o(int64_t b, int64_t i, int64_t h) const {
    return (b * d.seq_len + i) * out_width + h * d.head_dim;
  }
  int64_t stat(int64_t b, int64_t h, int64_t i) const {
    return (b * d.n_heads + h) * d.seq_len + i;
  }
  int64_t work() const { return d.batch * d.n_heads * d.seq_len * d.seq_len * d.head_dim; }
};

// Whether this build and machine run the tiled kernels (SLEEF, and AVX2 or AVX-512 not capped
// to baseline by OCTET_CPU_ISA); otherwise the scalar kernels run.
bool tiled_available();
// The tiled kernels (only where tiled_available()); the same contract as the scalar ones.
void tiled_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Layout& layout,
                   const Slices& ws);
void tiled_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                    const Tensor& dqkv, const Layout& layout, const Slices& ws);

}  // namespace octet::kernels::cpu::attn
