// dist/fp8_reduce.h: the gradient reduce-scatter of --fp8-comm grads: the
// block-linear matrices' gradients travel as FP8 codes at one scale every rank shares,
// everything else as f32, and every rank sums what it received in fp32, in rank order.
// defines: GradReduceScatter
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "dist/comm.h"

namespace octet::dist {

// A reduce-scatter of f32 [P] over `partition`, done as Comm::all_to_all of each rank's
// chunks and a local sum: neither MPI's user-defined ops nor NCCL's FP8 sums can
// accumulate in fp32 what travels in FP8 (both round every partial sum to the wire
// type), so the exchange moves the codes and the receiver dequantizes and adds them in
// fp32. MPI and NCCL share every line here; only the exchange differs.
//
// The FP8 range [fp8_begin, fp8_end) (the block linears' matrices): every rank takes the
// max |g| over it, one all-reduce(max) makes it global (amax), and every rank quantizes
// with scale = 2^floor(log2(fp8_max / amax)) (power of two, so scale_inv = 1 / scale is
// exact). No headroom for the N-way sum is needed: the sum happens in fp32 after
// dequantization, never in FP8, and |g| <= amax puts every code within fp8_max. A
// headroom of N would only push small gradients into the subnormals. Per element the
// result differs from the fp32 reduce-scatter by at most
//   sum_r max(2^-(m+1) |g_r|, 2^(e_min - m - 1) / scale)  + (N - 1) 2^-24 sum_r |g_r|
// (m mantissa bits and e_min the least normal exponent of the format: E5M2 m = 2,
// e_min = -14; E4M3 m = 3, e_min = -6): each rank's rounding error of half an ulp, plus
// the fp32 sum's reordering. With a non-finite amax (the step will be skipped) the
// range travels as f32 for that step, so the non-finite values arrive as they are.
// The other ranges travel as f32 and sum in rank order (bit for bit MPI's sum at N = 2).
class GradReduceScatter {
 public:
  // format: e5m2 or e4m3 (the recipe's gradient format); max_buckets: how many
  // start_bucket() calls a step may make. Buffers allocated here once.
  GradReduceScatter(std::shared_ptr<Comm> comm, const Partition& partition, int64_t fp8_begin,
                    int64_t fp8_end, DType format, Device device, int max_buckets = 0);

  // full: f32 [P] (this rank's gradients; the FP8 range is overwritten by nothing: it is
  // read only); shard: f32 [partition.count(rank)], the sum over ranks of its elements.
  void run(const Tensor& full, const Tensor& shard);

  // ZeRO 2: the FP8 range's bucket [lo, hi) (full: f32 [P], or f32 [hi - lo] holding just
  // the bucket's elements), which the backward has just completed, gets
  // its own shared scale (the bucket's global amax: one scalar all-reduce on the device, the
  // scale computed there, nothing read back: kernels::fp8_scales_from_amax) and its exchange
  // started (Comm::start_all_to_all); buckets are disjoint. After
  // Comm::wait_started(), finish_buckets() sums every started bucket into shard (f32
  // [partition.count(rank)]), or with `accumulate` adds the sum to what shard holds (the
  // micro-batches of one step). A non-finite amax gives scale 1 and the codes are encoded
  // without saturation, so an Inf or NaN arrives non-finite (Inf as NaN in E4M3) and the
  // step is skipped; with a finite global amax nothing can overflow (|g| scale <= fp8_max).
  // The bound above holds with the range's scale: a bucket's scale is at least that.
  void start_bucket(const Tensor& full, int64_t lo, int64_t hi);
  void finish_buckets(const Tensor& shard, bool accumulate = false);

  // Bytes this rank sends to the other ranks per run() (the FP8 range as codes, the rest
  // as f32, plus the amax all-reduce's 4), and what the all-f32 reduce-scatter would send.
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t f32_bytes_sent() const { return f32_bytes_sent_; }
  // The global amax and the scale of the last run() (tests).
  float amax() const { return amax_; }
  float scale() const { return scale_; }

 private:
  struct Segment {
    int64_t begin, end;  // in the full buffer
    bool fp8;
    std::vector<int64_t> send_at, recv_at;  // Comm::all_to_all's offsets
    std::vector<int64_t> f32_send_at;       // send_at in the full f32 buffer
    int64_t mine_begin, mine_end;           // this rank's chunk, in the full buffer
  };
  void exchange_f32(const Segment& s, const std::vector<int64_t>& send_at, const Tensor& full,
                    const Tensor& shard);
  void exchange_fp8(const Segment& s, const Tensor& full, const Tensor& shard);
  void quantize(const Tensor& x, float scale, const Tensor& codes, int scale_inv_slot);
  // The same at the scale in scalars_[scale_slot] (on the device).
  void quantize_at(const Tensor& x, int scale_slot, const Tensor& codes, int scale_inv_slot,
                   Overflow overflow = Overflow::saturate);
  // The global amax of x (a first quantize writes it; its codes are overwritten after).
  float global_amax(const Tensor& x, const Tensor& codes);
  // recv's N chunks of `mine` codes from `at` dequantized with scale_inv and summed in rank
  // order into out.
  void sum_chunks(const Tensor& recv, int64_t at, int64_t mine, const Tensor& scale_inv, float* out,
                  bool accumulate = false);
  struct Bucket {
    int64_t lo = 0, hi = 0;
    std::vector<int64_t> send_at, recv_at;
  };
  std::vector<Bucket> buckets_;  // max_buckets, their offsets' capacity reserved
  int used_buckets_ = 0;
  int64_t fp8_begin_ = 0, fp8_end_ = 0;

  std::shared_ptr<Comm> comm_;
  Partition partition_;
  DType format_;
  Device device_;
  std::vector<Segment> segments_;
  // scalars_: amax, scale, scale_inv, then one scale_inv per bucket, then 1 (one_slot_)
  Buffer codes_, recv_codes_, recv_f32_, scalars_;
  int one_slot_ = 0;
  int64_t bytes_sent_ = 0, f32_bytes_sent_ = 0;
  float amax_ = 0.0f, scale_ = 1.0f;
};

}  // namespace octet::dist
