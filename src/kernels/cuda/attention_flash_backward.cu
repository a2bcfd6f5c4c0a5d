// kernels/cuda/attention_flash_backward.cu: the gradient of the flash attention forward
// (bf16 tensor cores, head_dim 64 and 128) as two kernels that recompute P from q, k and
// the saved lse: dk/dv per block of keys (summed over the q heads of the group) and dq
// per block of queries, so every output element has one writer and a fixed order of
// summation (deterministic, no atomics, no workspace: D = rowsum(dout * out) is
// recomputed where it is needed). As in FlashAttention, P and dS are rounded to bf16
// before their products.
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_mma.cuh"

namespace octet::kernels::cuda {
namespace {

using namespace flash;  // NOLINT: the kernels' vocabulary

// ---- backward: dq -----------------------------------------------------------------------

// One block per (batch, q head) x 64 queries, over the key tiles up to the diagonal:
// S = Q K^T, dP = dO V^T, P = exp2(S scale_log2 - lse2), dS = P (dP - D), dq += dS K.
template <int HD>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(Params p) {
  using T = Tiles<HD>;
  constexpr int BQ = T::rows, BK = T::bwd_cols;
  OCTET_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* sq = smem;
  uint16_t* sdo = sq + T::tile_elems(BQ);
  uint16_t* so = sdo + T::tile_elems(BQ);     // out, for D
  uint16_t* sk = so + T::tile_elems(BQ);      // [2][BK] rows
  uint16_t* sv = sk + 2 * T::tile_elems(BK);  // [2][BK] rows
  float* s_lse = reinterpret_cast<float*>(sv + 2 * T::tile_elems(BK));
  float* s_d = s_lse + BQ;

  const int S = p.seq_len, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const auto [b, h, g, q0, seq, k_src, v_src, n_tiles] = query_block<HD, BQ, BK>(p);

  const int64_t out_at = int64_t{b} * S * p.out_width + int64_t{h} * HD;
  load_tile<HD, BQ>(sq, seq + int64_t{h} * HD, p.width, q0, S);
  load_tile<HD, BQ>(sdo, p.dout + out_at, p.out_width, q0, S);
  load_tile<HD, BQ>(so, p.out + out_at, p.out_width, q0, S);
  load_lse<BQ>(s_lse, p, b, h, q0);
  load_tile<HD, BK>(sk, k_src, p.width, 0, S);
  load_tile<HD, BK>(sv, v_src, p.width, 0, S);
  cp_async_commit();

  uint32_t qf[HD / 16][4], dof[HD / 16][4];
  float dq[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
  const int row0 = warp * 16 + (lane >> 2);  // this lane's rows row0 and row0 + 8
  const int query0 = q0 + row0;
  float lse2[2], d[2];

  for (int t = 0; t < n_tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < n_tiles) {
      load_tile<HD, BK>(sk + (buf ^ 1) * T::tile_elems(BK), k_src, p.width, (t + 1) * BK, S);
      load_tile<HD, BK>(sv + (buf ^ 1) * T::tile_elems(BK), v_src, p.width, (t + 1) * BK, S);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (t == 0) {  // the block's rows arrived with the first tile
      row_stats<HD, BQ>(sdo, so, s_lse, s_d);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        load_a<HD>(qf[kk], sq, warp * 16, kk * 16);
        load_a<HD>(dof[kk], sdo, warp * 16, kk * 16);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) lse2[r] = s_lse[row0 + r * 8], d[r] = s_d[row0 + r * 8];
    }
    const uint16_t* tk = sk + buf * T::tile_elems(BK);
    const uint16_t* tv = sv + buf * T::tile_elems(BK);

    float s[BK / 8][4], dp[BK / 8][4];
#pragma unroll
    for (int n = 0; n < BK / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        uint32_t kb[4], vb[4];
        load_b_by_rows<HD>(kb, tk, np * 16, kk * 16);
        mma_bf16(s[2 * np], qf[kk], kb[0], kb[1]);
        mma_bf16(s[2 * np + 1], qf[kk], kb[2], kb[3]);
        load_b_by_rows<HD>(vb, tv, np * 16, kk * 16);
        mma_bf16(dp[2 * np], dof[kk], vb[0], vb[1]);
        mma_bf16(dp[2 * np + 1], dof[kk], vb[2], vb[3]);
      }
    }
    const int k0 = t * BK;
    const bool mask = k0 + BK - 1 > q0 || k0 + BK > S;
#pragma unroll
    for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + n * 8 + 2 * (lane & 3) + (e & 1);
        const int r = e >> 1;
        const bool drop = mask && (key > query0 + r * 8 || key >= S);
        const float pv = drop ? 0.0f : exp2_approx(s[n][e] * p.scale_log2 - lse2[r]);
        dp[n][e] = pv * (dp[n][e] - d[r]);  // dS
      }
    }
    acc_times_tile<HD, BK>(dq, dp, tk);
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = query0 + r * 8;
    if (query >= S) continue;
    uint16_t* dst = p.dqkv + (int64_t{b} * S + query) * p.width + int64_t{h} * HD + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) =
          pack_bf16(dq[n][2 * r] * p.scale, dq[n][2 * r + 1] * p.scale);
    }
  }
}

// ---- backward: dk, dv -------------------------------------------------------------------

// One block per (batch, kv head) x 64 keys, over the q heads of the group and, for each,
// the query tiles from the diagonal to the end, in that order. The transposed products
// keep the warp's keys as rows: S^T = K Q^T, dP^T = V dO^T, P^T = exp2(S^T scale_log2 -
// lse2), dS^T = P^T (dP^T - D), dv += P^T dO, dk += dS^T Q.
template <int HD>
__global__ void __launch_bounds__(kThreads) flash_dkdv_kernel(Params p) {
  using T = Tiles<HD>;
  constexpr int BK = T::rows, BQ = T::bwd_cols;
  OCTET_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* sk = smem;
  uint16_t* sv = sk + T::tile_elems(BK);
  uint16_t* sq = sv + T::tile_elems(BK);                                // [2][BQ] rows
  uint16_t* sdo = sq + 2 * T::tile_elems(BQ);                           // [2][BQ] rows
  uint16_t* so = sdo + 2 * T::tile_elems(BQ);                           // [2][BQ] rows: out
  float* s_lse = reinterpret_cast<float*>(so + 2 * T::tile_elems(BQ));  // [2][BQ]
  float* s_d = s_lse + 2 * BQ;                                          // [2][BQ]

  const int S = p.seq_len, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.x / p.n_kv_heads, g = blockIdx.x % p.n_kv_heads;
  const int k0 = blockIdx.y * BK;  // the blocks with the most queries (small k0) first
  const uint16_t* seq = p.qkv + int64_t{b} * S * p.width;
  const uint16_t* dout_seq = p.dout + int64_t{b} * S * p.out_width;
  const uint16_t* out_seq = p.out + int64_t{b} * S * p.out_width;
  const int first = k0 / BQ;  // the query tile holding query k0 (BQ divides BK)
  const int per_head = (S + BQ - 1) / BQ - first;
  const int n_tiles = p.group * per_head;

  // Query tile t: q head g * group + t / per_head, queries from (first + t % per_head) BQ;
  // its q, dout, out rows and lse go to buffer `buf`, all asynchronously.
  auto issue = [&](int t, int buf) {
    const int h = g * p.group + t / per_head, q0 = (first + t % per_head) * BQ;
    load_tile<HD, BQ>(sq + buf * T::tile_elems(BQ), seq + int64_t{h} * HD, p.width, q0, S);
    load_tile<HD, BQ>(sdo + buf * T::tile_elems(BQ), dout_seq + int64_t{h} * HD, p.out_width, q0,
                      S);
    load_tile<HD, BQ>(so + buf * T::tile_elems(BQ), out_seq + int64_t{h} * HD, p.out_width, q0, S);
    load_lse<BQ>(s_lse + buf * BQ, p, b, h, q0);
    cp_async_commit();
  };
  load_tile<HD, BK>(sk, seq + int64_t{p.n_heads + g} * HD, p.width, k0, S);
  load_tile<HD, BK>(sv, seq + int64_t{p.n_heads + p.n_kv_heads + g} * HD, p.width, k0, S);
  issue(0, 0);  // one group: K, V and the first query tile

  float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) {
    dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
    dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
  }
  const int key0 = k0 + warp * 16 + (lane >> 2);  // this lane's keys key0 and key0 + 8

  for (int t = 0; t < n_tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < n_tiles) {
      issue(t + 1, buf ^ 1);
    } else {
      cp_async_commit();
    }
    cp_async_wait<1>();
    __syncthreads();
    const int q0 = (first + t % per_head) * BQ;
    const uint16_t* tq = sq + buf * T::tile_elems(BQ);
    const uint16_t* tdo = sdo + buf * T::tile_elems(BQ);
    const float* lse2 = s_lse + buf * BQ;
    const float* d = s_d + buf * BQ;
    row_stats<HD, BQ>(tdo, so + buf * T::tile_elems(BQ), s_lse + buf * BQ, s_d + buf * BQ);
    __syncthreads();

    float s[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
    }
    rows_times_rows<HD, BQ>(s, sk, warp * 16, tq);
    rows_times_rows<HD, BQ>(dp, sv, warp * 16, tdo);
    const bool mask = q0 < k0 + BK - 1 || q0 + BQ > S;
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + 2 * (lane & 3) + (e & 1);  // query q0 + col
        const int key = key0 + (e >> 1) * 8;
        const bool drop = mask && (key > q0 + col || q0 + col >= S);
        const float pv = drop ? 0.0f : exp2_approx(s[n][e] * p.scale_log2 - lse2[col]);
        s[n][e] = pv;                         // P^T
        dp[n][e] = pv * (dp[n][e] - d[col]);  // dS^T
      }
    }
    acc_times_tile<HD, BQ>(dv, s, tdo);
    acc_times_tile<HD, BQ>(dk, dp, tq);
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + r * 8;
    if (key >= S) continue;
    uint16_t* row = p.dqkv + (int64_t{b} * S + key) * p.width + 2 * (lane & 3);
    uint16_t* dst_k = row + int64_t{p.n_heads + g} * HD;
    uint16_t* dst_v = row + int64_t{p.n_heads + p.n_kv_heads + g} * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst_k + n * 8) =
          pack_bf16(dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dst_v + n * 8) = pack_bf16(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

template <int HD>
constexpr size_t dq_smem_bytes() {
  using T = Tiles<HD>;
  return (3 * T::tile_elems(T::rows) + 4 * T::tile_elems(T::bwd_cols)) * sizeof(uint16_t) +
         2 * T::rows * sizeof(float);
}
template <int HD>
constexpr size_t dkdv_smem_bytes() {
  using T = Tiles<HD>;
  return (2 * T::tile_elems(T::rows) + 6 * T::tile_elems(T::bwd_cols)) * sizeof(uint16_t) +
         4 * T::bwd_cols * sizeof(float);
}
static_assert(dkdv_smem_bytes<128>() <= 227 * 1024 && dq_smem_bytes<128>() <= 227 * 1024,
              "over the 227 KiB a Hopper block may have");

template <int HD>
void backward(const Params& p, int64_t batch) {
  const dim3 kv_grid(static_cast<unsigned>(batch * p.n_kv_heads),
                     blocks_of(p.seq_len, Tiles<HD>::rows));
  launch("attention_backward", flash_dkdv_kernel<HD>, kv_grid, dkdv_smem_bytes<HD>(), p);
  const dim3 q_grid(static_cast<unsigned>(batch * p.n_heads),
                    blocks_of(p.seq_len, Tiles<HD>::rows));
  launch("attention_backward", flash_dq_kernel<HD>, q_grid, dq_smem_bytes<HD>(), p);
}

}  // namespace

void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, const Tensor& dqkv, const AttentionDims& dims) {
  Params p = params(qkv, dims);
  p.out = out.as<const uint16_t>();
  p.dout = dout.as<const uint16_t>();
  p.dqkv = dqkv.as<uint16_t>();
  p.lse = const_cast<float*>(lse.as<const float>());  // read only in the backward kernels
  if (dims.head_dim == 64) return backward<64>(p, dims.batch);
  backward<128>(p, dims.batch);
}

}  // namespace octet::kernels::cuda
