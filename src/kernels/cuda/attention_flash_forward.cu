// kernels/cuda/attention_flash_forward.cu: causal GQA attention forward on bf16 tensor
// cores for head_dim 64 and 128, FlashAttention-2 style: mma.sync m16n8k16 (bf16 in, fp32
// accumulate) on K/V tiles staged in shared memory with cp.async double buffering, one
// m16 row tile of queries per warp, an online softmax in fp32 registers, and causal
// block skipping. As in FlashAttention, P is rounded to bf16 before P V.
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_mma.cuh"

namespace octet::kernels::cuda {
namespace {

using namespace flash;  // NOLINT: the kernels' vocabulary

// ---- forward --------------------------------------------------------------------------

// One block per (batch, q head) x 64 queries; grid.y in reverse so that the blocks with
// the most keys start first.
template <int HD>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(Params p) {
  using T = Tiles<HD>;
  constexpr int BQ = T::rows, BK = T::fwd_keys;
  OCTET_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* sq = smem;
  uint16_t* sk = sq + T::tile_elems(BQ);      // [2][BK] rows
  uint16_t* sv = sk + 2 * T::tile_elems(BK);  // [2][BK] rows

  const int S = p.seq_len, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const auto [b, h, g, q0, seq, k_src, v_src, n_tiles] = query_block<HD, BQ, BK>(p);

  load_tile<HD, BQ>(sq, seq + int64_t{h} * HD, p.width, q0, S);
  load_tile<HD, BK>(sk, k_src, p.width, 0, S);
  load_tile<HD, BK>(sv, v_src, p.width, 0, S);
  cp_async_commit();

  uint32_t qf[HD / 16][4];
  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  // Per lane rows g and g + 8 of the warp's 16 (r = 0, 1): running max (log2 units) and sum.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int query0 = q0 + warp * 16 + (lane >> 2);

  for (int t = 0; t < n_tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < n_tiles) {  // prefetch the next tile into the other buffer
      load_tile<HD, BK>(sk + (buf ^ 1) * T::tile_elems(BK), k_src, p.width, (t + 1) * BK, S);
      load_tile<HD, BK>(sv + (buf ^ 1) * T::tile_elems(BK), v_src, p.width, (t + 1) * BK, S);
    }
    cp_async_commit();  // possibly empty: the wait below then always leaves one group
    cp_async_wait<1>();
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) load_a<HD>(qf[kk], sq, warp * 16, kk * 16);
    }
    const uint16_t* tk = sk + buf * T::tile_elems(BK);
    const uint16_t* tv = sv + buf * T::tile_elems(BK);

    float s[BK / 8][4];
#pragma unroll
    for (int n = 0; n < BK / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        uint32_t kb[4];
        load_b_by_rows<HD>(kb, tk, np * 16, kk * 16);
        mma_bf16(s[2 * np], qf[kk], kb[0], kb[1]);
        mma_bf16(s[2 * np + 1], qf[kk], kb[2], kb[3]);
      }
    }
    const int k0 = t * BK;
    if (k0 + BK - 1 > q0 || k0 + BK > S) {  // the tile crosses the diagonal or the end
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + n * 8 + 2 * (lane & 3) + (e & 1);
          const int query = query0 + (e >> 1) * 8;
          if (key > query || key >= S) s[n][e] = -INFINITY;
        }
      }
    }
    // Online softmax in log2 units: x = s * scale_log2, p = exp2(x - m).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));  // the 4 lanes of a row
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m[r], mx * p.scale_log2);
      // A row with every key masked so far keeps m = -inf; subtract 0 then (p = 0, no NaN).
      const float m_sub = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2_approx(m[r] - m_sub);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) {
        s[n][2 * r] = exp2_approx(s[n][2 * r] * p.scale_log2 - m_sub);
        s[n][2 * r + 1] = exp2_approx(s[n][2 * r + 1] * p.scale_log2 - m_sub);
        sum += s[n][2 * r] + s[n][2 * r + 1];
      }
      l[r] = l[r] * corr + sum;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        o[n][2 * r] *= corr;
        o[n][2 * r + 1] *= corr;
      }
    }
    acc_times_tile<HD, BK>(o, s, tv);
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 2);
    const int query = query0 + r * 8;
    if (query >= S) continue;
    uint16_t* dst = p.o + (int64_t{b} * S + query) * p.out_width + int64_t{h} * HD + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) =
          pack_bf16(o[n][2 * r] / l[r], o[n][2 * r + 1] / l[r]);
    }
    // lse = m ln 2 + ln l in double: one rounding, to f32.
    if ((lane & 3) == 0)
      p.lse[int64_t{blockIdx.x} * S + query] =
          static_cast<float>(static_cast<double>(m[r]) * kLn2 + log(static_cast<double>(l[r])));
  }
}

template <int HD>
constexpr size_t forward_smem_bytes() {
  using T = Tiles<HD>;
  return (T::tile_elems(T::rows) + 4 * T::tile_elems(T::fwd_keys)) * sizeof(uint16_t);
}
static_assert(forward_smem_bytes<128>() <= 227 * 1024, "over the 227 KiB a Hopper block may have");

template <int HD>
void forward(const Params& p, int64_t batch) {
  const dim3 grid(static_cast<unsigned>(batch * p.n_heads), blocks_of(p.seq_len, Tiles<HD>::rows));
  launch("attention_forward", flash_forward_kernel<HD>, grid, forward_smem_bytes<HD>(), p);
}

}  // namespace

bool flash_attention_supported(const AttentionDims& dims, std::initializer_list<Tensor> tensors) {
  if (dims.head_dim != 64 && dims.head_dim != 128) return false;
  for (const Tensor& t : tensors) {
    if (t.dtype != DType::bf16 || reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  }
  return true;
}

void flash_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                             const AttentionDims& dims) {
  Params p = params(qkv, dims);
  p.o = out.as<uint16_t>();
  p.lse = lse.as<float>();
  if (dims.head_dim == 64) return forward<64>(p, dims.batch);
  forward<128>(p, dims.batch);
}

}  // namespace octet::kernels::cuda
