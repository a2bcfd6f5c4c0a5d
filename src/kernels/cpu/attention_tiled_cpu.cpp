// kernels/cpu/attention_tiled_cpu.cpp: causal GQA attention on the CPU in tiles, with
// AVX-512 and SLEEF's vector exp (1 ulp, as libm's expf); bf16 score products from
// AVX512_BF16 where the machine has it (attention_dot_bf16.h). Forward: per tile of 32
// query rows, the tile's scaled scores against every key up to its last row are kept in
// the thread's workspace (32 rows x S floats, never S x S), so the softmax takes the exact
// row maximum as the scalar kernel does; then P v block by block. One task per (sequence,
// kv head), its keys and values loaded once, where those tasks share out evenly over the
// team, otherwise one per (sequence, q head, tile). Backward: P and dS recomputed for
// 32 x 32 tiles from q, k and the saved lse; one fused task per (sequence, kv head) (P and
// dS once for dq, dk and dv) where those share out evenly, otherwise two passes (per query
// tile for dq, then per block of 32 keys for dk and dv). Either way dq sums the key blocks
// in increasing order and dk, dv the q heads that share them, then the query tiles, in
// increasing order, with one writer per element: the same bits for any thread count.
#include "kernels/cpu/attention_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/activation_cpu.h"
#include "kernels/cpu/isa.h"

#include "kernels/cpu/attention_dot_bf16.h"
#include "kernels/cpu/attention_tile_ops.h"
#include "kernels/cpu/vector_math.h"

#if defined(OCTET_CPU_VECTOR_EXP)
#define OCTET_TILED_ATTENTION 1
#endif

namespace octet::kernels::cpu::attn {

#if defined(OCTET_TILED_ATTENTION)
namespace {

using tile::accumulate, tile::causal, tile::load_rows, tile::load_transposed, tile::T,
    tile::tile_scores;

// Per-thread pieces of the workspace.
// With bf16 score products (dot16), kt and vt hold the blocks as pack_pairs16 packs them,
// and q16, go16 the query tile's bf16 rows.
struct Work {
  float *q, *go, *k, *kt, *vt, *acc, *acc2, *p, *ds, *stat;
  uint16_t *q16, *go16;
  Work(float* base, int64_t hd) {
    float* at = base;
    for (float** piece : {&q, &go, &k, &kt, &vt, &acc, &acc2}) *piece = at, at += T * hd;
    p = at, ds = at + T * T, stat = at + 2 * T * T;
    q16 = reinterpret_cast<uint16_t*>(stat + 2 * T), go16 = q16 + T * hd;
  }
};

// A block of n keys (or values) into `kt`: transposed f32 for tile_scores, or packed in
// pairs of bf16 columns for tile_scores16 (dot16, bf16 data only).
template <typename A>
OCTET_AVX512 void load_block(const A* src, int64_t stride, int64_t n, int64_t hd, float* kt,
                             bool dot16) {
  if constexpr (std::is_same_v<A, uint16_t>) {
    if (dot16) return pack_pairs16(src, stride, n, hd, reinterpret_cast<uint32_t*>(kt));
  }
  load_transposed(src, stride, n, hd, kt);
}

// The bf16 rows of a query tile for tile_scores16 (dot16, bf16 data only).
template <typename A>
OCTET_AVX512 void load_rows16(const A* src, int64_t stride, int64_t rows, int64_t hd,
                              uint16_t* dst) {
  if constexpr (std::is_same_v<A, uint16_t>) pack_rows16(src, stride, rows, hd, dst);
}

// tile_scores of the f32 rows a or (dot16) tile_scores16 of their bf16 copy a16, against a
// block as load_block left it.
OCTET_AVX512 void scores(const float* a, const uint16_t* a16, const float* bt, int64_t hd,
                         float scale, float* out, int64_t ld, bool dot16) {
  if (dot16) return tile_scores16(a16, reinterpret_cast<const uint32_t*>(bt), hd, scale, out, ld);
  tile_scores(a, bt, hd, scale, out, ld);
}

// Where the forward task of one (sequence, kv head) keeps its keys transposed (block j0
// at j0 hd, [hd][T]) and its values (rows of hd) in the slice: after the tile's pieces.
int64_t forward_keys_offset(int64_t s_pad, int64_t hd) {
  return (4 * T * hd + T * s_pad + 2 * T + 15) / 16 * 16;
}

// One forward task: query tile t (counted from the last) of one (sequence, q head), in the
// thread's workspace slice `base`; its keys transposed and values are loaded block by block,
// or read from `kts` and `vs` where the caller loaded them (the same values). (The OpenMP
// loops live in functions without the AVX-512 target, and call these per task: clang
// outlines a parallel region without its function's target features.)
template <typename A>
OCTET_AVX512 void forward_task(const A* qkv, A* out, float* lse, const Layout& L, float* base,
                               int64_t task, bool dot16, const float* kts = nullptr,
                               const float* vs = nullptr) {
  const int64_t S = L.d.seq_len, hd = L.d.head_dim, H = L.d.n_heads;
  const int64_t tiles = (S + T - 1) / T, s_pad = tiles * T;
  float *q = base, *kt = q + T * hd, *v = kt + T * hd, *acc = v + T * hd;
  float* scores = acc + T * hd;  // T rows of s_pad
  float* stat = scores + T * s_pad;
  const int64_t t = tiles - 1 - task % tiles, bh = task / tiles;
  const int64_t b = bh / H, h = bh % H, g = h / L.group;
  const int64_t i0 = t * T, rows = std::min(T, S - i0);
  uint16_t* q16 = reinterpret_cast<uint16_t*>(q);  // dot16: q's bf16 rows in its place
  if (dot16) {
    load_rows16(qkv + L.q(b, i0, h), L.width, rows, hd, q16);
  } else {
    load_rows(qkv + L.q(b, i0, h), L.width, rows, hd, q);
  }
  for (int64_t j0 = 0; j0 <= i0; j0 += T) {
    if (kts == nullptr)
      load_block(qkv + L.k(b, j0, g), L.width, std::min(T, S - j0), hd, kt, dot16);
    attn::scores(q, q16, kts ? kts + j0 * hd : kt, hd, L.scale, scores + j0, s_pad, dot16);
  }
  // Row i: m = max_{j <= i} s_ij, p_ij = exp(s_ij - m) (0 for j > i), l = sum_j p_ij.
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* s = scores + r * s_pad;
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j <= i; j += 16)
      mv = _mm512_mask_max_ps(mv, causal(j, i), mv, _mm512_loadu_ps(s + j));
    const float m = _mm512_reduce_max_ps(mv);
    const __m512 mb = _mm512_set1_ps(m);
    __m512 lv = _mm512_setzero_ps();
    for (int64_t j = 0; j < i0 + T; j += 16) {
      const __m512 p =
          _mm512_maskz_mov_ps(causal(j, i), exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mb)));
      _mm512_storeu_ps(s + j, p);
      lv = _mm512_add_ps(lv, p);
    }
    stat[r] = m;
    stat[T + r] = _mm512_reduce_add_ps(lv);
  }
  std::fill(acc, acc + T * hd, 0.0f);
  for (int64_t j0 = 0; j0 <= i0; j0 += T) {
    const int64_t n = std::min(T, S - j0);
    if (vs == nullptr) load_rows(qkv + L.v(b, j0, g), L.width, n, hd, v);
    accumulate(acc, rows, scores + j0, s_pad, 1, vs ? vs + j0 * hd : v, n, hd);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float l = stat[T + r];
    A* o = out + L.o(b, i0 + r, h);
    for (int64_t c = 0; c < hd; ++c) o[c] = from_f32<A>(acc[r * hd + c] / l);
    lse[L.stat(b, h, i0 + r)] = stat[r] + std::log(l);
  }
}

// Every query tile of the q heads of one (sequence, kv head), the keys and values loaded
// once: the tasks above in their order.
template <typename A>
OCTET_AVX512 void forward_group(const A* qkv, A* out, float* lse, const Layout& L, float* base,
                                int64_t task, bool dot16) {
  const int64_t S = L.d.seq_len, hd = L.d.head_dim, Hkv = L.d.n_kv_heads;
  const int64_t tiles = (S + T - 1) / T, s_pad = tiles * T;
  const int64_t b = task / Hkv, g = task % Hkv;
  float* kts = base + forward_keys_offset(s_pad, hd);
  float* vs = kts + s_pad * hd;
  for (int64_t j0 = 0; j0 < S; j0 += T) {
    const int64_t n = std::min(T, S - j0);
    load_block(qkv + L.k(b, j0, g), L.width, n, hd, kts + j0 * hd, dot16);
    load_rows(qkv + L.v(b, j0, g), L.width, n, hd, vs + j0 * hd);
  }
  for (int64_t h = g * L.group; h < (g + 1) * L.group; ++h) {
    for (int64_t t = 0; t < tiles; ++t)
      forward_task(qkv, out, lse, L, base, (b * L.d.n_heads + h) * tiles + t, dot16, kts, vs);
  }
}

// Whether the score products are tile_scores16's: bf16 data, an even head_dim, AVX512_BF16.
template <typename A>
bool uses_dot16(const Layout& L) {
  return std::is_same_v<A, uint16_t> && L.d.head_dim % 2 == 0 && bf16_dot_available();
}

// Whether `tasks` equal tasks share out evenly enough over a team of `team` threads.
bool even(int64_t tasks, int team) {
  return tasks % team == 0 || tasks >= 4 * team;
}

template <typename A>
void forward_tiles(const A* qkv, A* out, float* lse, const Layout& L, const Slices& ws) {
  const int64_t tasks = L.d.batch * L.d.n_heads * ((L.d.seq_len + T - 1) / T);
  const int team = ws.threads > 1 && L.work() > kParallelElements ? ws.threads : 1;
  // One task per (sequence, kv head) loads its keys and values once, where those tasks
  // share out evenly; otherwise one per query tile (the same bits either way).
  const int64_t groups = L.d.batch * L.d.n_kv_heads;
  const bool dot16 = uses_dot16<A>(L);
  if (even(groups, team)) {
#pragma omp parallel num_threads(team) if (team > 1)
    {
      float* base = ws.of(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < groups; ++task)
        forward_group(qkv, out, lse, L, base, task, dot16);
    }
    return;
  }
#pragma omp parallel num_threads(team) if (team > 1)
  {
    float* base = ws.of(omp_get_thread_num());
    // Longest tiles (the last query rows) first: less waiting at the end.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) forward_task(qkv, out, lse, L, base, task, dot16);
  }
}

// The tile of rows i0.. (w.q, w.go, row statistics w.stat: D_i then lse_i) against the
// keys j0.. (w.kt, w.vt): P_ij = exp(s_ij - lse_i) and dS_ij = P_ij (dout_i . v_j - D_i),
// both 0 where j > i, into w.p and w.ds [T][T]. Both backward passes call it with the
// same tiles, so they see the same bits.
OCTET_AVX512 void probabilities(const Work& w, int64_t i0, int64_t j0, int64_t hd, float scale,
                                bool dot16) {
  scores(w.q, w.q16, w.kt, hd, scale, w.p, T, dot16);
  scores(w.go, w.go16, w.vt, hd, 1.0f, w.ds, T, dot16);
  for (int64_t r = 0; r < T; ++r) {
    const __m512 lse = _mm512_set1_ps(w.stat[T + r]), d = _mm512_set1_ps(w.stat[r]);
    for (int64_t j = 0; j < T; j += 16) {
      float* p = w.p + r * T + j;
      float* ds = w.ds + r * T + j;
      const __mmask16 m = causal(j0 + j, i0 + r);
      const __m512 pv = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_loadu_ps(p), lse)));
      _mm512_storeu_ps(p, pv);
      _mm512_storeu_ps(ds, _mm512_mul_ps(pv, _mm512_sub_ps(_mm512_loadu_ps(ds), d)));
    }
  }
}

// The query tile i0.. of head h into w.q, w.go and w.stat (D_i, lse_i); `rows` valid.
template <typename A>
OCTET_AVX512 void load_queries(const Work& w, const A* dout, const A* qkv, const A* out,
                               const float* lse, const Layout& L, int64_t b, int64_t h, int64_t i0,
                               int64_t rows, bool dot16) {
  const int64_t hd = L.d.head_dim;
  load_rows(qkv + L.q(b, i0, h), L.width, rows, hd, w.q);
  load_rows(dout + L.o(b, i0, h), L.out_width, rows, hd, w.go);
  if (dot16) {
    load_rows16(qkv + L.q(b, i0, h), L.width, rows, hd, w.q16);
    load_rows16(dout + L.o(b, i0, h), L.out_width, rows, hd, w.go16);
  }
  for (int64_t r = 0; r < T; ++r) {
    w.stat[r] = r < rows ? dot(w.go + r * hd, out + L.o(b, i0 + r, h), hd) : 0.0f;
    w.stat[T + r] = r < rows ? lse[L.stat(b, h, i0 + r)] : 0.0f;
  }
}

// dq of query tile t (counted from the last) of one (sequence, q head): its key blocks in
// increasing order.
template <typename A>
OCTET_AVX512 void dq_task(const A* dout, const A* qkv, const A* out, const float* lse, A* dqkv,
                          const Layout& L, const Work& w, int64_t task, bool dot16) {
  const int64_t S = L.d.seq_len, hd = L.d.head_dim, H = L.d.n_heads;
  const int64_t tiles = (S + T - 1) / T;
  const int64_t t = tiles - 1 - task % tiles, bh = task / tiles;
  const int64_t b = bh / H, h = bh % H, g = h / L.group;
  const int64_t i0 = t * T, rows = std::min(T, S - i0);
  load_queries(w, dout, qkv, out, lse, L, b, h, i0, rows, dot16);
  std::fill(w.acc, w.acc + T * hd, 0.0f);
  for (int64_t j0 = 0; j0 <= i0; j0 += T) {
    const int64_t n = std::min(T, S - j0);
    load_rows(qkv + L.k(b, j0, g), L.width, n, hd, w.k);
    load_block(qkv + L.k(b, j0, g), L.width, n, hd, w.kt, dot16);
    load_block(qkv + L.v(b, j0, g), L.width, n, hd, w.vt, dot16);
    probabilities(w, i0, j0, hd, L.scale, dot16);
    accumulate(w.acc, rows, w.ds, T, 1, w.k, n, hd);
  }
  for (int64_t r = 0; r < rows; ++r) {
    A* dst = dqkv + L.q(b, i0 + r, h);
    for (int64_t c = 0; c < hd; ++c) dst[c] = from_f32<A>(w.acc[r * hd + c] * L.scale);
  }
}

// dk and dv of one block of keys of one kv head: over its q heads in increasing order, then
// the query tiles from the block's own onwards.
template <typename A>
OCTET_AVX512 void dkv_task(const A* dout, const A* qkv, const A* out, const float* lse, A* dqkv,
                           const Layout& L, const Work& w, int64_t task, bool dot16) {
  const int64_t S = L.d.seq_len, hd = L.d.head_dim, Hkv = L.d.n_kv_heads;
  const int64_t tiles = (S + T - 1) / T;
  const int64_t t = task % tiles, b = task / tiles / Hkv, g = task / tiles % Hkv;
  const int64_t j0 = t * T, n = std::min(T, S - j0);
  load_block(qkv + L.k(b, j0, g), L.width, n, hd, w.kt, dot16);
  load_block(qkv + L.v(b, j0, g), L.width, n, hd, w.vt, dot16);
  std::fill(w.acc, w.acc + T * hd, 0.0f);
  std::fill(w.acc2, w.acc2 + T * hd, 0.0f);
  for (int64_t h = g * L.group; h < (g + 1) * L.group; ++h) {
    for (int64_t i0 = j0; i0 < S; i0 += T) {
      const int64_t rows = std::min(T, S - i0);
      load_queries(w, dout, qkv, out, lse, L, b, h, i0, rows, dot16);
      probabilities(w, i0, j0, hd, L.scale, dot16);
      accumulate(w.acc, n, w.ds, 1, T, w.q, rows, hd);
      accumulate(w.acc2, n, w.p, 1, T, w.go, rows, hd);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    A* dk = dqkv + L.k(b, j0 + j, g);
    A* dv = dqkv + L.v(b, j0 + j, g);
    for (int64_t c = 0; c < hd; ++c) {
      dk[c] = from_f32<A>(w.acc[j * hd + c] * L.scale);
      dv[c] = from_f32<A>(w.acc2[j * hd + c]);
    }
  }
}

// The whole backward pass of one (sequence, kv head) in one task: per q head of the group,
// its query tiles (q, dout, D_i, lse_i) loaded once into the thread's slice, then per
// block of keys, per query tile from the block's own onwards, P and dS computed once for
// dq, dk and dv. The sums are the two-pass kernel's in its order (dq of a tile over the
// key blocks in increasing order; dk, dv of a block over the q heads, then the query
// tiles), each with the same accumulate: the same bits.
template <typename A>
OCTET_AVX512 void fused_task(const A* dout, const A* qkv, const A* out, const float* lse, A* dqkv,
                             const Layout& L, float* base, int64_t task, bool dot16) {
  const int64_t S = L.d.seq_len, hd = L.d.head_dim, Hkv = L.d.n_kv_heads;
  const int64_t tiles = (S + T - 1) / T, s_pad = tiles * T;
  const int64_t b = task / Hkv, g = task % Hkv;
  // A Work whose q, go and stat point at the query tile being used.
  Work w(base, hd);
  float* qs = base + floats_per_thread(0, hd);  // past the two-pass pieces
  float *gos = qs + s_pad * hd, *dq = gos + s_pad * hd, *dk = dq + s_pad * hd;
  float *dv = dk + s_pad * hd, *stats = dv + s_pad * hd;            // 2 T per query tile
  uint16_t* q16s = reinterpret_cast<uint16_t*>(stats + 2 * s_pad);  // dot16: bf16 q rows
  uint16_t* go16s = q16s + s_pad * hd;                              // and dout rows
  std::fill(dk, dk + 2 * s_pad * hd, 0.0f);
  for (int64_t h = g * L.group; h < (g + 1) * L.group; ++h) {
    for (int64_t t = 0; t < tiles; ++t) {
      w.q = qs + t * T * hd, w.go = gos + t * T * hd, w.stat = stats + 2 * T * t;
      w.q16 = q16s + t * T * hd, w.go16 = go16s + t * T * hd;
      load_queries(w, dout, qkv, out, lse, L, b, h, t * T, std::min(T, S - t * T), dot16);
    }
    std::fill(dq, dq + s_pad * hd, 0.0f);
    for (int64_t j0 = 0; j0 < S; j0 += T) {
      const int64_t n = std::min(T, S - j0);
      load_rows(qkv + L.k(b, j0, g), L.width, n, hd, w.k);
      load_block(qkv + L.k(b, j0, g), L.width, n, hd, w.kt, dot16);
      load_block(qkv + L.v(b, j0, g), L.width, n, hd, w.vt, dot16);
      for (int64_t i0 = j0; i0 < S; i0 += T) {
        const int64_t rows = std::min(T, S - i0);
        w.q = qs + i0 * hd, w.go = gos + i0 * hd, w.stat = stats + 2 * i0;
        w.q16 = q16s + i0 * hd, w.go16 = go16s + i0 * hd;
        probabilities(w, i0, j0, hd, L.scale, dot16);
        accumulate(dq + i0 * hd, rows, w.ds, T, 1, w.k, n, hd);
        accumulate(dk + j0 * hd, n, w.ds, 1, T, w.q, rows, hd);
        accumulate(dv + j0 * hd, n, w.p, 1, T, w.go, rows, hd);
      }
    }
    for (int64_t i = 0; i < S; ++i) {
      A* dst = dqkv + L.q(b, i, h);
      for (int64_t c = 0; c < hd; ++c) dst[c] = from_f32<A>(dq[i * hd + c] * L.scale);
    }
  }
  for (int64_t j = 0; j < S; ++j) {
    A* dkj = dqkv + L.k(b, j, g);
    A* dvj = dqkv + L.v(b, j, g);
    for (int64_t c = 0; c < hd; ++c) {
      dkj[c] = from_f32<A>(dk[j * hd + c] * L.scale);
      dvj[c] = from_f32<A>(dv[j * hd + c]);
    }
  }
}

template <typename A>
void backward_tiles(const A* dout, const A* qkv, const A* out, const float* lse, A* dqkv,
                    const Layout& L, const Slices& ws) {
  const int64_t tiles = (L.d.seq_len + T - 1) / T;
  const int64_t q_tasks = L.d.batch * L.d.n_heads * tiles;
  const int64_t kv_tasks = L.d.batch * L.d.n_kv_heads * tiles;
  const int team = ws.threads > 1 && L.work() > kParallelElements ? ws.threads : 1;
  // One fused task per (sequence, kv head) computes P and dS once instead of twice; it
  // runs where those tasks share out evenly over the team (both kernels give the same bits).
  const int64_t fused_tasks = L.d.batch * L.d.n_kv_heads;
  const bool dot16 = uses_dot16<A>(L);
  if (even(fused_tasks, team)) {
#pragma omp parallel num_threads(team) if (team > 1)
    {
      float* base = ws.of(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < fused_tasks; ++task)
        fused_task(dout, qkv, out, lse, dqkv, L, base, task, dot16);
    }
    return;
  }
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const Work w(ws.of(omp_get_thread_num()), L.d.head_dim);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < q_tasks; ++task)
      dq_task(dout, qkv, out, lse, dqkv, L, w, task, dot16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < kv_tasks; ++task)
      dkv_task(dout, qkv, out, lse, dqkv, L, w, task, dot16);
  }
}

}  // namespace

bool tiled_available() {
  return usable_isa("attention") == Isa::avx512;
}

void tiled_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Layout& layout,
                   const Slices& ws) {
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    forward_tiles(qkv.as<const A>(), out.as<A>(), lse.as<float>(), layout, ws);
  });
}

void tiled_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                    const Tensor& dqkv, const Layout& layout, const Slices& ws) {
  with_activation(qkv.dtype, [&](auto a) {
    using A = decltype(a);
    backward_tiles(dout.as<const A>(), qkv.as<const A>(), out.as<const A>(), lse.as<const float>(),
                   dqkv.as<A>(), layout, ws);
  });
}

#else  // no SLEEF or no x86-64: the scalar kernels run

bool tiled_available() {
  return false;
}
void tiled_forward(const Tensor&, const Tensor&, const Tensor&, const Layout&, const Slices&) {}
void tiled_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const Layout&, const Slices&) {}

#endif

}  // namespace octet::kernels::cpu::attn
