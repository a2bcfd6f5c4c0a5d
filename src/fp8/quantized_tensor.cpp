// fp8/quantized_tensor.cpp
#include "fp8/quantized_tensor.h"

#include <utility>

#include "core/error.h"
#include "kernels/gemm.h"

namespace octet::fp8 {
namespace {

size_t scale_bytes(int64_t rows, int64_t cols, kernels::ScaleGrid grid) {
  return static_cast<size_t>(kernels::scale_grid_shape(rows, cols, grid).numel()) *
         (grid.e8m0 ? 1 : 4);
}

// The most scale_inv bytes any row count up to max_rows needs (grids are monotone in rows).
size_t max_scale_bytes(int64_t max_rows, int64_t cols, kernels::ScaleGrid grid, bool transposed) {
  return transposed ? scale_bytes(cols, max_rows, grid) : scale_bytes(max_rows, cols, grid);
}

}  // namespace

bool QuantizedTensor::widens(Device device, const Recipe& recipe, Role role) {
  const kernels::ScaleGrid grid = recipe.grid(role);
  return device.is_cpu() && grid.block_rows == 0 && grid.block_cols == 0 && !grid.e8m0;
}

bool QuantizedTensor::copies_by_columns(Device device, const Recipe& recipe, Role role) {
  // Power-of-two scales fold into the CPU GEMM's widened operands, a way that reads K-major
  // operands only: copies in x's layout would be transposed back in every GEMM.
  return !recipe.power_of_two_scales && kernels::fp8_gemm_reads_k_first(device, recipe.grid(role));
}

QuantizedTensor::QuantizedTensor(Device device, int64_t max_rows, int64_t cols,
                                 const Recipe& recipe, Role role, bool with_transpose,
                                 const Tensor& shared_data, const Tensor& shared_data_t,
                                 TransposedCopy copy)
    : format_(recipe.format(role)),
      grid_(recipe.grid(role)),
      role_(role),
      has_transpose_(with_transpose),
      stateful_(recipe.stateful()),
      max_rows_(max_rows),
      cols_(cols) {
  OCTET_CHECK(max_rows >= 0 && cols >= 0, "quantized tensor", "negative shape [", max_rows, ", ",
              cols, "]");
  widened_ = with_transpose &&
             (copy == TransposedCopy::widened_on_cpu || copy == TransposedCopy::widened_in_place) &&
             widens(device, recipe, role);
  in_place_ = widened_ && copy == TransposedCopy::widened_in_place;
  columns_ = with_transpose && copy == TransposedCopy::columns_on_cpu &&
             copies_by_columns(device, recipe, role);
  OCTET_CHECK(!in_place_ || shared_data_t.empty(), "quantized tensor",
              "shared storage for a wide copy that lives in x (widened_in_place)");
  const size_t n = static_cast<size_t>(max_rows * cols);
  const size_t n_t = widened_ ? 2 * n : n;  // wide is bf16
  for (const auto& [shared, need] : {std::pair{&shared_data, n}, std::pair{&shared_data_t, n_t}}) {
    OCTET_CHECK(shared->empty() || (shared->dtype == DType::u8 && shared->device == device &&
                                    shared->nbytes() >= need && shared->data != nullptr),
                "quantized tensor", "shared storage must be u8 with at least ", need, " bytes on ",
                device_name(device), ", got ", shared->str());
  }
  OCTET_CHECK(with_transpose || shared_data_t.empty(), "quantized tensor",
              "shared storage for a transposed copy that this tensor does not have");
  const bool own_data = shared_data.empty(),
             own_data_t = with_transpose && shared_data_t.empty() && !in_place_;
  storage_ = Arena(device);
  const Arena::Region data_region = own_data ? storage_.add_bytes("data", n) : -1;
  scale_region_ = storage_.add_bytes("scale_inv", max_scale_bytes(max_rows, cols, grid_, false));
  const Arena::Region data_t_region =
      own_data_t ? storage_.add_bytes(widened_ ? "wide" : "data_t", n_t) : -1;
  if (with_transpose && !widened_) {
    scale_t_region_ =
        storage_.add_bytes("scale_inv_t", max_scale_bytes(max_rows, cols, grid_, true));
  }
  const Arena::Region amax_region = storage_.add("amax", DType::f32, {1});
  const Arena::Region counts_region = storage_.add("counts", DType::i32, {2});
  storage_.allocate();
  data_base_ = own_data ? storage_.tensor(data_region).data : shared_data.data;
  void* t_base = own_data_t ? storage_.tensor(data_t_region).data : shared_data_t.data;
  (widened_ ? wide_base_ : data_t_base_) = t_base;
  amax = storage_.tensor(amax_region);
  counts = storage_.tensor(counts_region);
  set_rows(max_rows);
}

void QuantizedTensor::set_rows(int64_t rows) {
  OCTET_CHECK(rows >= 0 && rows <= max_rows_, "quantized tensor", "rows=", rows, " exceeds the ",
              max_rows_, " rows this tensor was allocated for");
  rows_ = rows;
  const DType scale_dtype = grid_.e8m0 ? DType::e8m0 : DType::f32;
  const Device device = storage_.device();
  data = Tensor(data_base_, format_, {rows, cols_}, device);
  scale_inv =
      storage_.view(scale_region_, scale_dtype, kernels::scale_grid_shape(rows, cols_, grid_));
  if (widened_) {
    wide = Tensor(wide_base_, DType::bf16, {rows, cols_}, device);
  } else if (has_transpose_) {
    data_t =
        Tensor(data_t_base_, format_, columns_ ? Shape{rows, cols_} : Shape{cols_, rows}, device);
    scale_inv_t =
        storage_.view(scale_t_region_, scale_dtype, kernels::scale_grid_shape(cols_, rows, grid_));
  }
}

void QuantizedTensor::widen_into(const Tensor& x) {
  OCTET_CHECK(in_place_, "quantized tensor",
              "widen_into on a tensor not made widened_in_place (on the CPU, per-tensor scales)");
  OCTET_CHECK(x.dtype == DType::bf16 && x.device == storage_.device() && x.shape.rank() == 2 &&
                  x.cols() == cols_ && x.rows() <= max_rows_ && x.data != nullptr,
              "quantized tensor", "quantizing in place needs x bf16[<= ", max_rows_, ", ", cols_,
              "] on ", device_name(storage_.device()), " (its values are written over it), got ",
              x.str());
  wide_base_ = x.data;
}

void QuantizedTensor::use_scaling_state(DelayedScalingState& state) {
  if (!stateful_) return;
  OCTET_CHECK(scaling_state_ == nullptr, "quantized tensor",
              "this tensor has its scaling slot already");
  scaling_slot_ = state.add_slot(format_);
  scaling_state_ = &state;
}

void quantize(const Tensor& x, QuantizedTensor& q, const Recipe& recipe,
              DelayedScalingState* delayed, int slot, const Tensor& x_amax) {
  OCTET_CHECK(recipe.format(q.role()) == q.format() && recipe.grid(q.role()) == q.grid(),
              "quantize", "the quantized tensor was made for another recipe than ", recipe.str());
  OCTET_CHECK(x.cols() == q.cols(), "quantize", "x has ", x.cols(), " columns but the quantized ",
              "tensor was made for ", q.cols());
  if (q.widened_in_place()) q.widen_into(x);
  q.set_rows(x.rows());
  kernels::QuantizeOptions options;
  options.grid = q.grid();
  options.power_of_two_scales = recipe.power_of_two_scales && !q.grid().e8m0;
  options.given_amax = x_amax;
  kernels::QuantizeOutputs out{q.data,   q.scale_inv,
                               q.data_t, q.scale_inv_t,
                               q.amax,   q.counting() ? q.counts : Tensor(),
                               q.wide,   q.data_t_in_x_layout()};
  if (delayed == nullptr) {
    delayed = q.scaling_state();
    slot = q.scaling_slot();
  }
  if (recipe.mode == ScalingMode::tensor_delayed) {
    OCTET_CHECK(delayed != nullptr && slot >= 0 && slot < delayed->size(), "quantize",
                "tensor-delayed scaling needs the tensor's delayed-scaling state and slot");
    options.given_scale = delayed->scale(slot);
    out.amax = delayed->amax_slot(slot);
  }
  kernels::quantize(x, out, options);
  if (out.amax.data != q.amax.data) {
    // Keep this amax with the tensor too: the history slot is cleared by the update.
    copy_tensor(out.amax, q.amax);
  }
}

void dequantize(const QuantizedTensor& q, const Tensor& y) {
  kernels::dequantize(q.data, q.scale_inv, q.grid(), y);
}

}  // namespace octet::fp8
