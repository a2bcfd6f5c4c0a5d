// dist/fp8_reduce.cpp: the gradient reduce-scatter with the block linears' gradients in FP8.
#include "dist/fp8_reduce.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/fp8_scale.h"
#include "kernels/quantize.h"

namespace octet::dist {
namespace {

// [n] as [1, n]: quantize() and dequantize() see a per-tensor grid over one row.
Tensor row(void* data, DType dtype, int64_t n, Device device) {
  return Tensor(data, dtype, {1, n}, device);
}

}  // namespace

GradReduceScatter::GradReduceScatter(std::shared_ptr<Comm> comm, const Partition& partition,
                                     int64_t fp8_begin, int64_t fp8_end, DType format,
                                     Device device, int max_buckets)
    : fp8_begin_(fp8_begin),
      fp8_end_(fp8_end),
      comm_(std::move(comm)),
      partition_(partition),
      format_(format),
      device_(device) {
  const int n = comm_->size(), me = comm_->rank();
  const int64_t p = partition_.total();
  OCTET_CHECK(partition_.ranks() == n && 0 <= fp8_begin && fp8_begin <= fp8_end && fp8_end <= p,
              "fp8 reduce", "the FP8 range [", fp8_begin, ", ", fp8_end, ") of ", p,
              " gradients over ", partition_.ranks(), " shards on ", n, " ranks");
  OCTET_CHECK(format == DType::e4m3 || format == DType::e5m2, "fp8 reduce",
              "the gradients travel as e4m3 or e5m2, not ", dtype_name(format));
  int64_t widest = 1;
  for (auto [begin, end, fp8] :
       {std::tuple{int64_t{0}, fp8_begin, false}, std::tuple{fp8_begin, fp8_end, true},
        std::tuple{fp8_end, p, false}}) {
    if (end == begin) continue;
    Segment s{begin, end, fp8, {}, {}, {}, 0, 0};
    // (lo, hi: clang 14 cannot capture structured bindings)
    const auto clamp = [lo = begin, hi = end](int64_t x) { return std::clamp(x, lo, hi); };
    s.mine_begin = clamp(partition_.begin(me));
    s.mine_end = clamp(partition_.end(me));
    const int64_t mine = s.mine_end - s.mine_begin;
    const int64_t base = fp8 ? begin : 0;  // FP8 chunks are sent from the codes of the range
    for (int q = 0; q <= n; ++q) {
      s.send_at.push_back(clamp(q < n ? partition_.begin(q) : p) - base);
      s.recv_at.push_back(q * mine);
      s.f32_send_at.push_back(s.send_at.back() + base);
    }
    const int64_t width = fp8 ? 1 : 4;
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      const int64_t count =
          s.send_at[static_cast<size_t>(q) + 1] - s.send_at[static_cast<size_t>(q)];
      bytes_sent_ += count * width;
      f32_bytes_sent_ += count * 4;
    }
    widest = std::max(widest, mine);
    segments_.push_back(std::move(s));
  }
  if (fp8_end > fp8_begin) bytes_sent_ += 4;  // the amax all-reduce
  const int64_t ranks = n;
  codes_ = Buffer::for_tensor(device, format, {std::max<int64_t>(1, fp8_end - fp8_begin)});
  recv_codes_ = Buffer::for_tensor(device, format, {ranks * widest});
  recv_f32_ = Buffer::for_tensor(device, DType::f32, {ranks * widest});
  one_slot_ = 3 + std::max(0, max_buckets);
  scalars_ = Buffer::for_tensor(device, DType::f32, {one_slot_ + 1});
  const float one = 1.0f;
  copy_bytes(static_cast<float*>(scalars_.data()) + one_slot_, device, &one, Device::cpu(), 4);
  buckets_.resize(static_cast<size_t>(std::max(0, max_buckets)));
  for (Bucket& b : buckets_) {
    b.send_at.reserve(static_cast<size_t>(n) + 1);
    b.recv_at.reserve(static_cast<size_t>(n) + 1);
  }
}

void GradReduceScatter::run(const Tensor& full, const Tensor& shard) {
  const int me = comm_->rank();
  OCTET_CHECK(full.dtype == DType::f32 && shard.dtype == DType::f32 &&
                  full.numel() == partition_.total() && shard.numel() == partition_.count(me) &&
                  full.device == device_ && shard.device == device_,
              "fp8 reduce", "expected f32 [", partition_.total(), "] and f32 [",
              partition_.count(me), "] on ", device_name(device_), ", got ", full.str(), " and ",
              shard.str());
  for (const Segment& s : segments_) {
    if (s.fp8) {
      exchange_fp8(s, full, shard);
    } else {
      exchange_f32(s, s.f32_send_at, full, shard);
    }
  }
}

void GradReduceScatter::exchange_f32(const Segment& s, const std::vector<int64_t>& send_at,
                                     const Tensor& full, const Tensor& shard) {
  const Tensor recv = recv_f32_.tensor(DType::f32, {static_cast<int64_t>(recv_f32_.bytes() / 4)});
  comm_->all_to_all(full, send_at, recv, s.recv_at);
  const int64_t mine = s.mine_end - s.mine_begin;
  if (mine == 0) return;
  auto* out = static_cast<float*>(shard.data) + (s.mine_begin - partition_.begin(comm_->rank()));
  const Tensor sum(out, DType::f32, {mine}, device_);
  copy_bytes(out, device_, recv.data, device_, static_cast<size_t>(mine) * 4);
  for (int q = 1; q < comm_->size(); ++q) {  // rank order: ((g_0 + g_1) + g_2) + ...
    kernels::add(
        sum, Tensor(static_cast<float*>(recv.data) + q * mine, DType::f32, {mine}, device_), sum);
  }
}

void GradReduceScatter::quantize(const Tensor& x, float scale, const Tensor& codes,
                                 int scale_inv_slot) {
  copy_bytes(static_cast<float*>(scalars_.data()) + 1, device_, &scale, Device::cpu(), 4);
  quantize_at(x, 1, codes, scale_inv_slot);
}

void GradReduceScatter::quantize_at(const Tensor& x, int scale_slot, const Tensor& codes,
                                    int scale_inv_slot, Overflow overflow) {
  auto* scalars = static_cast<float*>(scalars_.data());
  kernels::QuantizeOutputs out;
  out.data = codes;
  out.scale_inv = Tensor(scalars + scale_inv_slot, DType::f32, {1, 1}, device_);
  out.amax = Tensor(scalars, DType::f32, {1}, device_);
  kernels::QuantizeOptions options;  // per tensor
  options.overflow = overflow;
  options.given_scale = Tensor(scalars + scale_slot, DType::f32, {1}, device_);
  kernels::quantize(x, out, options);
}

float GradReduceScatter::global_amax(const Tensor& x, const Tensor& codes) {
  // The local amax (a quantize at scale 1 writes it), then the global one: every rank gets
  // the same scale. Read back: on a GPU this waits for the stream once per call.
  quantize(x, 1.0f, codes, 2);
  auto* scalars = static_cast<float*>(scalars_.data());
  comm_->all_reduce(Tensor(scalars, DType::f32, {1}, device_), ReduceOp::max);
  float amax = 0;
  copy_bytes(&amax, Device::cpu(), scalars, device_, 4);
  return amax;
}

void GradReduceScatter::sum_chunks(const Tensor& recv, int64_t at, int64_t mine,
                                   const Tensor& scale_inv, float* out, bool accumulate) {
  if (mine == 0) return;
  const Tensor sum = row(out, DType::f32, mine, device_);
  const Tensor term = row(recv_f32_.data(), DType::f32, mine, device_);
  auto* received = static_cast<uint8_t*>(recv.data) + at;
  // Accumulating: out + chunk 0 + chunk 1 + ...; else chunk 0 + chunk 1 + ...
  kernels::dequantize(row(received, format_, mine, device_), scale_inv, {},
                      accumulate ? term : sum);
  if (accumulate) kernels::add(sum, term, sum);
  for (int q = 1; q < comm_->size(); ++q) {  // exact terms (code x 2^k), summed in rank order
    kernels::dequantize(row(received + q * mine, format_, mine, device_), scale_inv, {}, term);
    kernels::add(sum, term, sum);
  }
}

void GradReduceScatter::exchange_fp8(const Segment& s, const Tensor& full, const Tensor& shard) {
  const int64_t n = s.end - s.begin;
  const Tensor x = row(static_cast<float*>(full.data) + s.begin, DType::f32, n, device_);
  const Tensor codes = row(codes_.data(), format_, n, device_);
  amax_ = global_amax(x, codes);
  if (!std::isfinite(amax_)) {  // the step is skipped: let the non-finite values through
    scale_ = 1.0f;
    return exchange_f32(s, s.f32_send_at, full, shard);
  }
  scale_ = kernels::scale_from_amax(amax_, static_cast<float>(dtype_info(format_).max_finite), 0,
                                    /*power_of_two=*/true);
  quantize(x, scale_, codes, 2);
  const Tensor recv = recv_codes_.tensor(format_, {static_cast<int64_t>(recv_codes_.bytes())});
  comm_->all_to_all(codes, s.send_at, recv, s.recv_at);
  auto* scalars = static_cast<float*>(scalars_.data());
  sum_chunks(recv, 0, s.mine_end - s.mine_begin, Tensor(scalars + 2, DType::f32, {1, 1}, device_),
             static_cast<float*>(shard.data) + (s.mine_begin - partition_.begin(comm_->rank())));
}

void GradReduceScatter::start_bucket(const Tensor& full, int64_t lo, int64_t hi) {
  OCTET_CHECK(fp8_begin_ <= lo && lo <= hi && hi <= fp8_end_ &&
                  used_buckets_ < static_cast<int>(buckets_.size()),
              "fp8 reduce", "bucket [", lo, ", ", hi, ") outside the FP8 range [", fp8_begin_, ", ",
              fp8_end_, ") or more than ", buckets_.size(), " buckets in a step");
  OCTET_CHECK(
      full.dtype == DType::f32 && (full.numel() == partition_.total() || full.numel() == hi - lo),
      "fp8 reduce", "bucket [", lo, ", ", hi, ") from ", full.str(), ": needs f32 [",
      partition_.total(), "] or f32 [", hi - lo, "]");
  Bucket& b = buckets_[static_cast<size_t>(used_buckets_++)];
  b.lo = lo;
  b.hi = hi;
  const int64_t from = full.numel() == partition_.total() ? lo : 0;  // whole or a bucket
  const Tensor x = row(static_cast<float*>(full.data) + from, DType::f32, hi - lo, device_);
  const Tensor codes =
      row(static_cast<uint8_t*>(codes_.data()) + (lo - fp8_begin_), format_, hi - lo, device_);
  // The local amax (a quantize at scale 1 writes it; its codes are overwritten below), the
  // global one (an all-reduce on the device), the shared power-of-two scale from it on the
  // device, then the codes: nothing is read back, the GPU's stream never waits for the host.
  auto* scalars = static_cast<float*>(scalars_.data());
  const int slot = 3 + used_buckets_ - 1;
  quantize_at(x, one_slot_, codes, 2);
  const Tensor amax(scalars, DType::f32, {1}, device_);
  comm_->all_reduce(amax, ReduceOp::max);
  kernels::fp8_scales_from_amax(amax, Tensor(scalars + 1, DType::f32, {1}, device_),
                                Tensor(scalars + slot, DType::f32, {1}, device_),
                                static_cast<float>(dtype_info(format_).max_finite),
                                /*power_of_two=*/true);
  quantize_at(x, 1, codes, slot, Overflow::nonfinite);
  // Chunks from the codes of the whole range; this rank's received chunks land at N times
  // its offset in its part of the range, so that buckets in flight never overlap.
  const int n = comm_->size(), me = comm_->rank();
  const auto clamp = [&](int64_t v) { return std::clamp(v, lo, hi); };
  const int64_t mine = clamp(partition_.end(me)) - clamp(partition_.begin(me));
  const int64_t base = mine == 0 ? 0
                                 : n * (clamp(partition_.begin(me)) -
                                        std::clamp(partition_.begin(me), fp8_begin_, fp8_end_));
  b.send_at.clear();
  b.recv_at.clear();
  for (int q = 0; q <= n; ++q) {
    b.send_at.push_back(clamp(q < n ? partition_.begin(q) : partition_.total()) - fp8_begin_);
    b.recv_at.push_back(base + q * mine);
  }
  const Tensor all = row(codes_.data(), format_, fp8_end_ - fp8_begin_, device_);
  comm_->start_all_to_all(all, b.send_at,
                          recv_codes_.tensor(format_, {static_cast<int64_t>(recv_codes_.bytes())}),
                          b.recv_at);
}

void GradReduceScatter::finish_buckets(const Tensor& shard, bool accumulate) {
  const int me = comm_->rank();
  const Tensor recv = recv_codes_.tensor(format_, {static_cast<int64_t>(recv_codes_.bytes())});
  auto* scalars = static_cast<float*>(scalars_.data());
  for (int k = 0; k < used_buckets_; ++k) {
    const Bucket& b = buckets_[static_cast<size_t>(k)];
    const int64_t from = std::clamp(partition_.begin(me), b.lo, b.hi),
                  to = std::clamp(partition_.end(me), b.lo, b.hi);
    sum_chunks(recv, b.recv_at[0], to - from, Tensor(scalars + 3 + k, DType::f32, {1, 1}, device_),
               static_cast<float*>(shard.data) + (from - partition_.begin(me)), accumulate);
  }
  used_buckets_ = 0;
}

}  // namespace octet::dist
