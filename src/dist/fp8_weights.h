// dist/fp8_weights.h: the FP8 all-gather of the block linears' weights (--fp8-comm
// weights): each rank quantizes its shard of them with the recipe, the FP8 codes and scales
// travel instead of bf16, and every block linear reads the gathered copies
// (nn::Linear::use_quantized_weight), bit for bit what one process quantizing each whole
// weight makes; and the partition whose shard boundaries make that possible.
// defines: weight_row_alignment, aligned_partition, WeightAllGather
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "dist/comm.h"
#include "fp8/recipe.h"
#include "model/llama.h"
#include "nn/linear.h"

namespace octet::dist {

// The rows of a block-linear weight that a shard boundary inside it must fall on, so that
// each scale block lies in one rank's shard: 128 (block: 128x128 blocks), 32 (mx: the
// transposed copy's 32x1 blocks run down W's columns), 1 (row), 0 for per-tensor scaling
// (the scale is global, the quantization elementwise: any element boundary will do).
int64_t weight_row_alignment(const fp8::Recipe& recipe);

// `p` parameters over `ranks`: Partition(p, ranks)'s cuts, each one that falls inside a
// block-linear weight moved down to the nearest boundary of `align` rows of that weight
// (align 0 or no weights: Partition(p, ranks) itself). Shards may be empty.
Partition aligned_partition(int64_t p, int ranks, const std::vector<model::BlockWeight>& weights,
                            int64_t align);

// Made once per model (buffers allocated here), run() where every rank runs it (the model's
// forward, after the weights changed: model::Llama::set_fp8_weight_source). Each rank
// quantizes the block linears' rows of its shard (in `partition`, aligned by
// aligned_partition) from its bf16 working weights, which its optimizer step has just
// written; per-tensor scales come from the global amax (one all-reduce(max) of every
// weight's amax first) or, under tensor-delayed, from the model's scaling state, the shard's
// amax going into the weight's history slot (data parallelism all-reduces the histories
// with max after the step, so the history is one process's). The codes and scales are
// all-gathered through Comm (MPI and NCCL share every line here) and the transposed copy
// that dgrad reads is made locally:
//   tensor-current/delayed, block: the transpose of the gathered codes (and of the 128x128
//     block scales), which is what one quantization of the whole weight writes; none under
//     per-tensor scales on the CPU, where the linears widen data and read it either way
//     (fp8::TransposedCopy::widened_on_cpu), so copies() hold no data_t / scale_inv_t there;
//   mx: each rank also quantizes its rows along W's columns (32-row blocks, all in its
//     shard) and that copy travels too, transposed back after the gather;
//   row: the transposed copy's scales run along W's whole columns, which no rank's row shard
//     holds, so it is quantized locally from the whole bf16 weight, and the bf16 working
//     weights of the block linears are still gathered (needs_bf16()): under row the FP8
//     gather moves more bytes than bf16 alone. (An all-reduce(max) of per-column amaxes and
//     a quantize taking given per-row scales would avoid it; neither kernel exists yet.)
class WeightAllGather {
 public:
  WeightAllGather(std::shared_ptr<Comm> comm, model::Llama& model, const Partition& partition);
  ~WeightAllGather();  // the linears quantize their own weights again
  WeightAllGather(const WeightAllGather&) = delete;
  WeightAllGather& operator=(const WeightAllGather&) = delete;

  // Quantizes, gathers and transposes; allocates nothing. Every rank calls it.
  void run();

  // The block linears' parameters [begin(), end()): their bf16 working weights need no
  // gather unless needs_bf16().
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool needs_bf16() const { return needs_bf16_; }
  // Bytes this rank receives per run() (codes, scales, the amax all-reduce's 4 per weight),
  // and what the bf16 all-gather of the same range would receive.
  int64_t bytes_received() const { return bytes_received_; }
  int64_t bf16_bytes_received() const { return bf16_bytes_received_; }
  // The copies each block linear reads, in model::Llama::block_weights() order (tests).
  const std::vector<nn::QuantizedWeight>& copies() const { return copies_; }

 private:
  struct Weight {
    model::BlockWeight w;
    int64_t at;          // its first code, from begin_
    int64_t scale_at;    // its first forward scale
    int64_t scale_t_at;  // its first transposed-copy scale (mx: also in col_scales_)
    int slot;            // tensor-delayed: its slot in the scaling state
    int64_t lo, hi;      // this rank's elements of it, [lo, hi) (parameter offsets)
  };
  void quantize_shard();
  void transpose_copies();
  int64_t scale_cut(int64_t cut, bool columns) const;

  std::shared_ptr<Comm> comm_;
  model::Llama& model_;
  fp8::Recipe recipe_;
  DType format_;
  kernels::ScaleGrid grid_;
  std::vector<Weight> weights_;
  int64_t begin_ = 0, end_ = 0;
  bool per_tensor_ = false, needs_bf16_ = false;
  bool widened_ = false;  // the linears widen their weight (CPU, per tensor): no data_t
  Partition codes_part_, scales_part_, col_scales_part_;
  // codes_/codes_t_ [end - begin]; col_codes_ (mx) likewise; scales_/scales_t_/col_scales_:
  // every weight's grid, in weight order; given_: the scales then scale_invs per weight.
  Buffer codes_, codes_t_, col_codes_, scales_, scales_t_, col_scales_, amax_, given_, row_data_,
      row_scales_;
  std::vector<nn::QuantizedWeight> copies_;
  int64_t bytes_received_ = 0, bf16_bytes_received_ = 0;
};

}  // namespace octet::dist
