// dist/fp8_weights.cpp: the FP8 all-gather of the block linears' weights, the partition
// aligned to their scale blocks, and DataParallel's gather of the working weights around
// them.
#include "dist/fp8_weights.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "dist/data_parallel.h"
#include "fp8/scaling.h"
#include "kernels/fp8_scale.h"
#include "kernels/quantize.h"
#include "kernels/transpose.h"

namespace octet::dist {
namespace {

constexpr const char* kOp = "fp8 weights";

int64_t elements(const model::BlockWeight& w) {
  return w.rows * w.cols;
}

// A view of `shape` elements of `dtype` at element `at` of a buffer of bytes.
Tensor at(const Buffer& b, int64_t at, DType dtype, Shape shape) {
  return b.view(dtype, shape, static_cast<size_t>(at) * dtype_size(dtype));
}

}  // namespace

int64_t weight_row_alignment(const fp8::Recipe& recipe) {
  switch (recipe.mode) {
    case fp8::ScalingMode::tensor_current:
    case fp8::ScalingMode::tensor_delayed:
      return 0;
    case fp8::ScalingMode::row:
      return 1;
    case fp8::ScalingMode::block:
      return recipe.grid(fp8::Role::weight).block_rows;
    case fp8::ScalingMode::mx:
      return recipe.grid(fp8::Role::weight).block_cols;  // the transposed copy's blocks
  }
  return 1;
}

Partition aligned_partition(int64_t p, int ranks, const std::vector<model::BlockWeight>& weights,
                            int64_t align) {
  const Partition even(p, ranks);
  if (align <= 0 || weights.empty()) return even;
  std::vector<int64_t> cuts;
  for (int r = 0; r <= ranks; ++r) {
    int64_t cut = r < ranks ? even.begin(r) : p;
    for (const model::BlockWeight& w : weights) {
      if (cut > w.offset && cut < w.offset + elements(w)) {
        // Down to a multiple of `align` rows of w: monotone, as the cuts were.
        const int64_t step = align * w.cols;
        cut = w.offset + (cut - w.offset) / step * step;
        break;
      }
    }
    cuts.push_back(cut);
  }
  return Partition(std::move(cuts));
}

WeightAllGather::WeightAllGather(std::shared_ptr<Comm> comm, model::Llama& model,
                                 const Partition& partition)
    : comm_(std::move(comm)),
      model_(model),
      recipe_(model.options().recipe),
      format_(recipe_.format(fp8::Role::weight)),
      grid_(recipe_.grid(fp8::Role::weight)) {
  const std::vector<model::BlockWeight> ws = model.block_weights();
  OCTET_CHECK(!ws.empty(), kOp,
              "--fp8-comm weights needs --precision fp8 and a model with transformer blocks");
  const int n = comm_->size(), me = comm_->rank();
  OCTET_CHECK(partition.ranks() == n && partition.total() == model.parameter_count(), kOp,
              "a partition of ", partition.total(), " parameters over ", partition.ranks(),
              " ranks for a model of ", model.parameter_count(), " on ", n, " ranks");
  per_tensor_ = recipe_.mode == fp8::ScalingMode::tensor_current ||
                recipe_.mode == fp8::ScalingMode::tensor_delayed;
  needs_bf16_ = recipe_.mode == fp8::ScalingMode::row;
  const bool mx = recipe_.mode == fp8::ScalingMode::mx;
  const int64_t align = weight_row_alignment(recipe_);
  const DType sd = grid_.e8m0 ? DType::e8m0 : DType::f32;
  begin_ = ws.front().offset;
  int64_t scales = 0, scales_t = 0;
  for (const model::BlockWeight& w : ws) {
    OCTET_CHECK(
        w.offset ==
            begin_ + (weights_.empty() ? 0 : weights_.back().at + elements(weights_.back().w)),
        kOp, "the block linears' weights are not contiguous");
    Weight x{w, w.offset - begin_, scales, scales_t, -1, 0, 0};
    scales += per_tensor_ ? 1 : kernels::scale_grid_shape(w.rows, w.cols, grid_).numel();
    scales_t += per_tensor_ ? 0 : kernels::scale_grid_shape(w.cols, w.rows, grid_).numel();
    x.lo = std::clamp(partition.begin(me), w.offset, w.offset + elements(w));
    x.hi = std::clamp(partition.end(me), w.offset, w.offset + elements(w));
    for (int64_t cut : {x.lo, x.hi}) {
      OCTET_CHECK(
          align == 0 || (cut - w.offset) % (align * w.cols) == 0 || cut == w.offset + elements(w),
          kOp, "a shard boundary at parameter ", cut, " splits a block of ", align, " rows of a [",
          w.rows, ", ", w.cols, "] weight under ", recipe_.str(),
          " (the partition must come from aligned_partition)");
    }
    if (recipe_.stateful()) {
      OCTET_CHECK(w.linear->config().scaling_state != nullptr, kOp,
                  "tensor-delayed: a block linear without the model's scaling state");
      x.slot = w.linear->weight_scaling_slot();
    }
    weights_.push_back(x);
  }
  end_ = ws.back().offset + elements(ws.back());
  const int64_t count = end_ - begin_, wn = static_cast<int64_t>(ws.size());
  const Device device = model.options().device;
  codes_ = Buffer::for_tensor(device, format_, {count});
  // A linear that widens its FP8 weight (the CPU under per-tensor scales) reads data alone
  // (nn::Linear::use_quantized_weight): it gets no transposed copy, and none is made.
  widened_ = fp8::QuantizedTensor::widens(device, recipe_, fp8::Role::weight);
  if (!widened_) codes_t_ = Buffer::for_tensor(device, format_, {count});
  if (mx) col_codes_ = Buffer::for_tensor(device, format_, {count});
  if (!per_tensor_) {
    scales_ = Buffer::for_tensor(device, sd, {scales});
    scales_t_ = Buffer::for_tensor(device, sd, {scales_t});
    if (mx) col_scales_ = Buffer::for_tensor(device, sd, {scales_t});
  }
  // given_: per-tensor scales, their inverses, a 1 and a scratch slot.
  amax_ = Buffer::for_tensor(device, DType::f32, {wn});
  given_ = Buffer::for_tensor(device, DType::f32, {2 * wn + 2});
  const std::vector<float> ones(static_cast<size_t>(2 * wn + 2), 1.0f);
  copy_bytes(given_.data(), device, ones.data(), Device::cpu(), ones.size() * 4);
  if (needs_bf16_) {
    int64_t widest = 1, rows = 1;
    for (const model::BlockWeight& w : ws) {
      widest = std::max(widest, elements(w));
      rows = std::max(rows, w.rows);
    }
    row_data_ = Buffer::for_tensor(device, format_, {widest});
    row_scales_ = Buffer::for_tensor(device, DType::f32, {rows});
  }

  // The partitions of the codes and of the scales: a rank's rows of each weight are
  // contiguous in both, weight after weight.
  auto scale_cut = [&](int64_t cut, bool columns) {
    if (cut == count) return columns ? scales_t : scales;
    for (const Weight& x : weights_) {
      if (cut >= x.at + elements(x.w)) continue;
      const int64_t row = (cut - x.at) / x.w.cols;
      if (columns) return x.scale_t_at + row / align * x.w.cols;  // mx: [rows / 32, cols]
      const kernels::ScaleGrid g = grid_;
      const int64_t per_row = kernels::scale_grid_shape(x.w.rows, x.w.cols, g)[1];
      return x.scale_at + row / std::max<int64_t>(1, g.block_rows) * per_row;
    }
    return columns ? scales_t : scales;
  };
  std::vector<int64_t> codes_at, scales_at, col_at;
  for (int r = 0; r <= n; ++r) {
    const int64_t cut =
        std::clamp(r < n ? partition.begin(r) : partition.total(), begin_, end_) - begin_;
    codes_at.push_back(cut);
    scales_at.push_back(per_tensor_ ? 0 : scale_cut(cut, false));
    col_at.push_back(mx ? scale_cut(cut, true) : 0);
  }
  codes_part_ = Partition(codes_at);
  scales_part_ = Partition(scales_at);
  col_scales_part_ = Partition(col_at);

  // What each linear reads from now on.
  const size_t sw = dtype_size(sd);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const Weight& x = weights_[i];
    const int64_t rows = x.w.rows, cols = x.w.cols;
    nn::QuantizedWeight c;
    c.data = at(codes_, x.at, format_, {rows, cols});
    if (!widened_) c.data_t = at(codes_t_, x.at, format_, {cols, rows});
    if (per_tensor_) {
      c.scale_inv = at(given_, wn + static_cast<int64_t>(i), DType::f32, {1, 1});
      if (!widened_) c.scale_inv_t = c.scale_inv;
    } else {
      c.scale_inv = at(scales_, x.scale_at, sd, kernels::scale_grid_shape(rows, cols, grid_));
      c.scale_inv_t = at(scales_t_, x.scale_t_at, sd, kernels::scale_grid_shape(cols, rows, grid_));
    }
    x.w.linear->use_quantized_weight(c);
    copies_.push_back(c);
  }

  // Bytes received per run: every other rank's codes and scales (mx: twice), the amax
  // all-reduce, and under row the bf16 gather that stays.
  const int64_t others = count - codes_part_.count(me);
  bytes_received_ = others * (mx ? 2 : 1);
  if (!per_tensor_)
    bytes_received_ += (scales_part_.total() - scales_part_.count(me)) * static_cast<int64_t>(sw);
  if (mx) bytes_received_ += col_scales_part_.total() - col_scales_part_.count(me);
  if (recipe_.mode == fp8::ScalingMode::tensor_current) bytes_received_ += 4 * wn;
  bf16_bytes_received_ = 2 * others;
  if (needs_bf16_) bytes_received_ += bf16_bytes_received_;
}

WeightAllGather::~WeightAllGather() {
  for (const Weight& x : weights_) x.w.linear->use_quantized_weight({});
}

void WeightAllGather::run() {
  quantize_shard();
  const DType sd = grid_.e8m0 ? DType::e8m0 : DType::f32;
  const int64_t count = end_ - begin_;
  comm_->all_gather(codes_.tensor(format_, {count}), codes_part_);
  if (!per_tensor_) comm_->all_gather(scales_.tensor(sd, {scales_part_.total()}), scales_part_);
  if (recipe_.mode == fp8::ScalingMode::mx) {
    comm_->all_gather(col_codes_.tensor(format_, {count}), codes_part_);
    comm_->all_gather(col_scales_.tensor(sd, {col_scales_part_.total()}), col_scales_part_);
  }
  transpose_copies();
}

void WeightAllGather::quantize_shard() {
  const Tensor working = model_.working();
  const Device device = working.device;
  const DType wd = working.dtype;
  auto shard_of = [&](const Weight& x, Shape shape) {
    return Tensor(static_cast<uint8_t*>(working.data) + x.lo * static_cast<int64_t>(dtype_size(wd)),
                  wd, shape, device);
  };
  const int64_t wn = static_cast<int64_t>(weights_.size());
  const Tensor one = at(given_, 2 * wn, DType::f32, {1});
  const Tensor scratch = at(given_, 2 * wn + 1, DType::f32, {1, 1});
  kernels::QuantizeOptions options;
  options.grid = grid_;
  options.power_of_two_scales = recipe_.power_of_two_scales && !grid_.e8m0;

  if (per_tensor_) {
    // Elementwise at one scale per weight: [1, n] rows of this rank's elements.
    const bool current = recipe_.mode == fp8::ScalingMode::tensor_current;
    if (current) {
      // The global amax of each weight: a quantize at scale 1 writes the shard's, then one
      // all-reduce(max) of all of them; the scales computed as the kernel computes them.
      zero_bytes(amax_.data(), device, amax_.bytes());
      for (size_t i = 0; i < weights_.size(); ++i) {
        const Weight& x = weights_[i];
        if (x.hi == x.lo) continue;
        kernels::QuantizeOutputs out;
        out.data = at(codes_, x.lo - begin_, format_, {1, x.hi - x.lo});
        out.scale_inv = scratch;
        out.amax = at(amax_, static_cast<int64_t>(i), DType::f32, {1});
        options.given_scale = one;
        kernels::quantize(shard_of(x, {1, x.hi - x.lo}), out, options);
      }
      comm_->all_reduce(amax_.tensor(DType::f32, {wn}), ReduceOp::max);
      // On the device (kernels/fp8_scale.h): no read-back of the amaxes in the step.
      kernels::fp8_scales_from_amax(amax_.tensor(DType::f32, {wn}), at(given_, 0, DType::f32, {wn}),
                                    at(given_, wn, DType::f32, {wn}),
                                    static_cast<float>(dtype_info(format_).max_finite),
                                    recipe_.power_of_two_scales);
    }
    for (size_t i = 0; i < weights_.size(); ++i) {
      const Weight& x = weights_[i];
      const Tensor scale_inv = at(given_, wn + static_cast<int64_t>(i), DType::f32, {1, 1});
      if (!current) {
        // The scale this step quantizes with, kept with the copy as the layer keeps it with
        // its own quantization (the state's changes at the update, before the next fill).
        const Tensor s = x.w.linear->config().scaling_state->scale_inv(x.slot);
        copy_bytes(scale_inv.data, device, s.data, device, 4);
      }
      if (x.hi == x.lo) continue;
      kernels::QuantizeOutputs out;
      out.data = at(codes_, x.lo - begin_, format_, {1, x.hi - x.lo});
      out.scale_inv = scale_inv;  // 1 / scale, as the state and the host computed it
      if (current) {
        options.given_scale = at(given_, static_cast<int64_t>(i), DType::f32, {1});
      } else {
        // tensor-delayed: the state's scale; the shard's amax into the weight's history slot.
        fp8::DelayedScalingState* state = x.w.linear->config().scaling_state;
        options.given_scale = state->scale(x.slot);
        out.amax = state->amax_slot(x.slot);
      }
      kernels::quantize(shard_of(x, {1, x.hi - x.lo}), out, options);
    }
    return;
  }

  // Row, block, mx: whole scale blocks of rows.
  const bool mx = recipe_.mode == fp8::ScalingMode::mx;
  const DType sd = grid_.e8m0 ? DType::e8m0 : DType::f32;
  const int64_t br = std::max<int64_t>(1, grid_.block_rows);
  for (const Weight& x : weights_) {
    if (x.hi == x.lo) continue;
    const int64_t cols = x.w.cols, rows = (x.hi - x.lo) / cols, r0 = (x.lo - x.w.offset) / cols;
    const int64_t per_row = kernels::scale_grid_shape(x.w.rows, cols, grid_)[1];
    kernels::QuantizeOutputs out;
    out.data = at(codes_, x.lo - begin_, format_, {rows, cols});
    out.scale_inv = at(scales_, x.scale_at + r0 / br * per_row, sd,
                       kernels::scale_grid_shape(rows, cols, grid_));
    if (mx) {
      // Also along W's columns (the transposed copy's 32-row blocks, whole in this shard),
      // made in the transposed copy's place and turned back to W's layout to travel.
      out.data_t = at(codes_t_, x.lo - begin_, format_, {cols, rows});
      out.scale_inv_t =
          at(scales_t_, x.scale_t_at, sd, kernels::scale_grid_shape(cols, rows, grid_));
    }
    options.given_scale = Tensor();
    kernels::quantize(shard_of(x, {rows, cols}), out, options);
    if (mx) {
      const int64_t blocks = out.scale_inv_t.shape[1];
      kernels::transpose(out.data_t, at(col_codes_, x.lo - begin_, format_, {rows, cols}));
      kernels::transpose(
          out.scale_inv_t,
          at(col_scales_, x.scale_t_at + r0 / grid_.block_cols * cols, sd, {blocks, cols}));
    }
  }
}

void WeightAllGather::transpose_copies() {
  const DType sd = grid_.e8m0 ? DType::e8m0 : DType::f32;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const Weight& x = weights_[i];
    const nn::QuantizedWeight& c = copies_[i];
    const int64_t rows = x.w.rows, cols = x.w.cols;
    switch (recipe_.mode) {
      case fp8::ScalingMode::tensor_current:
      case fp8::ScalingMode::tensor_delayed:
        // One scale: the transpose is the copy (none for a widening linear).
        if (!widened_) kernels::transpose(c.data, c.data_t);
        break;
      case fp8::ScalingMode::block:
        kernels::transpose(c.data, c.data_t);  // 128x128 blocks transpose as a whole
        kernels::transpose(c.scale_inv, c.scale_inv_t);
        break;
      case fp8::ScalingMode::mx:
        kernels::transpose(at(col_codes_, x.at, format_, {rows, cols}), c.data_t);
        kernels::transpose(at(col_scales_, x.scale_t_at, sd, {c.scale_inv_t.shape[1], cols}),
                           c.scale_inv_t);
        break;
      case fp8::ScalingMode::row: {
        // Scales along W's whole columns: from the whole bf16 weight every rank holds.
        const Tensor working = model_.working();
        const Tensor w(static_cast<uint8_t*>(working.data) +
                           x.w.offset * static_cast<int64_t>(dtype_size(working.dtype)),
                       working.dtype, {rows, cols}, working.device);
        kernels::QuantizeOutputs out;
        out.data = at(row_data_, 0, format_, {rows, cols});
        out.scale_inv =
            at(row_scales_, 0, DType::f32, kernels::scale_grid_shape(rows, cols, grid_));
        out.data_t = c.data_t;
        out.scale_inv_t = c.scale_inv_t;
        kernels::QuantizeOptions options;
        options.grid = grid_;
        options.power_of_two_scales = recipe_.power_of_two_scales;
        kernels::quantize(w, out, options);
        break;
      }
    }
  }
}

void DataParallel::plan_gather_around() {
  // The ranges before and after the block linears, each over this partition's cuts.
  const int n = comm_->size();
  const std::pair<int64_t, int64_t> ranges[2] = {{0, fp8_weights_->begin()},
                                                 {fp8_weights_->end(), partition_.total()}};
  for (int k = 0; k < 2; ++k) {
    const auto [lo, hi] = ranges[k];
    if (hi == lo) continue;  // nothing to gather there
    std::vector<int64_t> at;
    for (int r = 0; r <= n; ++r)
      at.push_back(std::clamp(r < n ? partition_.begin(r) : partition_.total(), lo, hi) - lo);
    around_[k] = Partition(std::move(at));
  }
}

void DataParallel::gather_working() {
  const Tensor working = model_.working();
  if (!fp8_weights_ || fp8_weights_->needs_bf16()) return comm_->all_gather(working, partition_);
  // Around the block linears, whose FP8 copies the next forward gathers instead.
  const size_t width = dtype_size(working.dtype);
  const std::pair<int64_t, int64_t> ranges[2] = {{0, fp8_weights_->begin()},
                                                 {fp8_weights_->end(), partition_.total()}};
  for (int k = 0; k < 2; ++k) {
    const auto [lo, hi] = ranges[k];
    if (hi == lo) continue;
    comm_->all_gather(Tensor(static_cast<uint8_t*>(working.data) + lo * static_cast<int64_t>(width),
                             working.dtype, {hi - lo}, working.device),
                      around_[k]);
  }
}

}  // namespace octet::dist
