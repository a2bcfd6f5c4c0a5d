// fp8/quantized_tensor.h: QuantizedTensor, one handle for an FP8 GEMM operand (data,
// scale_inv, the transposed copy and its scales, amax, saturation counts), and the
// quantize call that fills it under a recipe.
// defines: QuantizedTensor, quantize, dequantize
#pragma once

#include <cstdint>

#include "core/arena.h"
#include "fp8/recipe.h"
#include "fp8/scaling.h"
#include "kernels/quantize.h"

namespace octet::fp8 {

// How a tensor made with_transpose keeps itself for the GEMMs that read it transposed.
enum class TransposedCopy : uint8_t {
  codes,  // data_t: xᵀ quantized, K-major codes (Hopper's FP8 GEMMs take no other layout)
  // On the CPU under per-tensor scales: `wide`, data's values widened to bf16 by the quantize
  // itself, which the CPU's GEMMs read in either orientation (they multiply bf16 anyway; one
  // scale makes xᵀ's codes the transpose of x's). No data_t, no widening in the GEMMs. Other
  // devices and grids: codes.
  widened_on_cpu,
  // As widened_on_cpu, but `wide` is the quantized x itself: quantize() writes the values over
  // x (bf16), and `wide` views x until the next quantize(). The caller gives up x's contents
  // and keeps x's memory as it is until the last GEMM that reads this tensor. No storage of
  // its own for wide, and no stream of stores into a second buffer (the values go into lines
  // the quantize has just read). Where the tensor does not widen: codes.
  widened_in_place,
  // On the CPU where xᵀ's blocks are columns of x (1xN grids: row, 1x128) and the FP8 GEMM
  // reads such operands as they are (kernels::fp8_gemm_reads_k_first): data_t holds
  // xᵀ's codes stored like x, [rows, cols] (kernels::QuantizeOutputs::data_t_in_x_layout),
  // which the quantize encodes down x's columns with no transpose, and which the CPU's FP8 GEMM
  // reads as A stored [K, M] or B stored [K, N] (its block micro-kernel transposes A's codes by
  // tiles as it widens them, and packs B's panels without a transpose). Other devices and grids:
  // codes.
  columns_on_cpu,
};

// Storage is allocated once, for up to `max_rows` rows, when the layer is built;
// set_rows() re-views it for the rows of this call without allocating.
class QuantizedTensor {
 public:
  QuantizedTensor() = default;
  // An operand of `role` under `recipe`, [max_rows, cols], with a transposed copy
  // [cols, rows] when `with_transpose` (DESIGN.md, FP8 GEMM layout), kept as `copy` says.
  // shared_data / shared_data_t: u8 [>= max_rows * cols] to hold data / data_t in
  // place of the tensor's own storage, for a copy needed only during one call (a
  // model's layers then share one scratch); amax, scales and counts stay the tensor's.
  // Widened, shared_data_t holds `wide` and needs 2 max_rows cols bytes.
  QuantizedTensor(Device device, int64_t max_rows, int64_t cols, const Recipe& recipe, Role role,
                  bool with_transpose, const Tensor& shared_data = Tensor(),
                  const Tensor& shared_data_t = Tensor(),
                  TransposedCopy copy = TransposedCopy::codes);
  // Whether a tensor of `role` on `device` made with_transpose and widened_on_cpu holds `wide`.
  static bool widens(Device device, const Recipe& recipe, Role role);
  // Whether one made with_transpose and columns_on_cpu holds data_t in x's layout (CPU, a 1xN
  // grid the FP8 GEMM reads K-first: kernels::fp8_gemm_reads_k_first; f32 scales not rounded to
  // powers of two, which the GEMM folds into K-major operands).
  static bool copies_by_columns(Device device, const Recipe& recipe, Role role);

  // Views data (and the rest) as [rows, cols]; rows <= max_rows.
  void set_rows(int64_t rows);
  // widened_in_place: from the next set_rows() on, `wide` views x's memory (quantize() calls
  // it with the x it writes over).
  void widen_into(const Tensor& x);
  // Whether quantize() also counts saturated and flushed values (on by default). The
  // count costs a little on every call; a trainer turns it on for the steps it reports.
  // Off, `counts` keeps the numbers of the last counted quantization.
  void set_counting(bool on) { counting_ = on; }
  // Under a stateful recipe (Recipe::stateful()), takes a slot in `state` for this
  // tensor's scale and amax history, which quantize() then uses; a no-op otherwise.
  // `state` must outlive the tensor and be allocated before the first quantize().
  void use_scaling_state(DelayedScalingState& state);
  DelayedScalingState* scaling_state() const { return scaling_state_; }
  int scaling_slot() const { return scaling_slot_; }
  bool counting() const { return counting_; }

  DType format() const { return format_; }
  kernels::ScaleGrid grid() const { return grid_; }
  Role role() const { return role_; }
  bool has_transpose() const { return has_transpose_; }
  bool widened() const { return widened_; }
  bool widened_in_place() const { return in_place_; }
  bool data_t_in_x_layout() const { return columns_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

  Tensor data;         // fp8 [rows, cols]
  Tensor scale_inv;    // on grid() over [rows, cols]
  Tensor data_t;       // fp8 [cols, rows] ([rows, cols] by columns), empty without a transposed
                       // copy or when widened
  Tensor scale_inv_t;  // on grid() over [cols, rows]; empty when widened (scale_inv is xᵀ's too)
  Tensor wide;         // bf16 [rows, cols]: data's values, the CPU GEMMs' operand (when widened)
  Tensor amax;         // f32[1]: this tensor's amax (for delayed scaling: its history slot)
  Tensor counts;       // i32[2]: saturated, flushed to zero (of data)

 private:
  Arena storage_;  // data and data_t unless shared, the scales, amax and counts
  Arena::Region scale_region_ = -1, scale_t_region_ = -1;
  void* data_base_ = nullptr;    // where data lives: storage_ or the shared scratch
  void* data_t_base_ = nullptr;  // likewise for data_t
  void* wide_base_ = nullptr;    // where wide lives (storage_ or shared_data_t), when widened
  DType format_ = DType::e4m3;
  kernels::ScaleGrid grid_;
  Role role_ = Role::activation;
  bool has_transpose_ = false;
  bool widened_ = false;   // the transposed copy is `wide` (TransposedCopy::widened_on_cpu)
  bool in_place_ = false;  // and wide is x itself (TransposedCopy::widened_in_place)
  bool columns_ = false;   // data_t in x's layout (TransposedCopy::columns_on_cpu)
  bool counting_ = true;
  bool stateful_ = false;
  DelayedScalingState* scaling_state_ = nullptr;
  int scaling_slot_ = -1;
  int64_t max_rows_ = 0, rows_ = 0, cols_ = 0;
};

// Quantizes x [rows, cols] (f32 or bf16) into q, which must have been made for the
// same recipe and role. Under tensor-delayed scaling, `delayed` and `slot` name the
// tensor's state (by default the slot q took with use_scaling_state()): the scale comes
// from it and this amax is recorded into its history (the update after the step turns
// it into the next scale). Otherwise they are unused.
// A tensor made widened_in_place writes its values over x, which must be bf16 [rows, cols] on
// the tensor's device. x_amax: optional, x's amax as its producer took it
// (kernels::QuantizeOptions::given_amax: the CPU, per-tensor grids), so that the quantize makes
// no pass of its own for it.
void quantize(const Tensor& x, QuantizedTensor& q, const Recipe& recipe,
              DelayedScalingState* delayed = nullptr, int slot = -1,
              const Tensor& x_amax = Tensor());

// y = the values q holds (data * scale_inv), for tests and debugging.
void dequantize(const QuantizedTensor& q, const Tensor& y);

}  // namespace octet::fp8
