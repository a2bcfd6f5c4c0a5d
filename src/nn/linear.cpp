// nn/linear.cpp: the linear layer's forward and backward under each precision policy.
#include "nn/linear.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "fp8/gemm.h"
#include "kernels/bias.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"

namespace octet::nn {
namespace {

constexpr const char* kOp = "linear";

bool same_matrix(const Tensor& t, DType dtype, int64_t rows, int64_t cols, Device device) {
  return !t.empty() && t.dtype == dtype && t.shape.rank() == 2 && t.shape[0] == rows &&
         t.shape[1] == cols && t.device == device;
}

bool same_vector(const Tensor& t, DType dtype, int64_t n, Device device) {
  return !t.empty() && t.dtype == dtype && t.numel() == n && t.device == device;
}

// A placeholder operand for workspace queries, which validate shapes but read no data.
Tensor shape_only(DType dtype, int64_t rows, int64_t cols, Device device) {
  return Tensor(nullptr, dtype, {rows, cols}, device);
}

// Every activation/gradient is seen as the [rows, cols] matrix its leading dimensions flatten to.
Tensor as_matrix(const Tensor& t) {
  return t.reshaped({t.rows(), t.cols()});
}

// The most workspace the three bf16/fp32 GEMMs of a [tokens, in] -> [tokens, out] layer need.
size_t high_precision_workspace_bytes(DType dt, int64_t tokens, int64_t in, int64_t out,
                                      Device device) {
  kernels::GemmOptions forward, dgrad, wgrad;
  dgrad.trans_b = false;
  wgrad.trans_a = true;
  wgrad.trans_b = false;
  wgrad.beta = 1.0f;
  return std::max({kernels::gemm_workspace_bytes(shape_only(dt, tokens, in, device),
                                                 shape_only(dt, out, in, device),
                                                 shape_only(dt, tokens, out, device), forward),
                   kernels::gemm_workspace_bytes(shape_only(dt, tokens, out, device),
                                                 shape_only(dt, out, in, device),
                                                 shape_only(dt, tokens, in, device), dgrad),
                   kernels::gemm_workspace_bytes(shape_only(dt, tokens, out, device),
                                                 shape_only(dt, tokens, in, device),
                                                 shape_only(DType::f32, out, in, device), wgrad)});
}

// The first `rows` rows of a matrix.
Tensor first_rows(const Tensor& t, int64_t rows) {
  return Tensor(t.data, t.dtype, {rows, t.cols()}, t.device);
}

}  // namespace

size_t fp8_scratch_bytes(int64_t max_tokens, int64_t in_features, int64_t out_features,
                         bool widened) {
  const int64_t dy_bytes = (widened ? 3 : 2) * max_tokens * out_features;  // codes + copy
  return static_cast<size_t>(std::max(max_tokens * in_features, dy_bytes));
}

bool Linear::quantizes_in_place(Device device, const fp8::Recipe& recipe, fp8::Role role) {
  // A GEMM in bf16 reads x or dy itself after the quantize.
  return fp8::QuantizedTensor::widens(device, recipe, role) && recipe.bf16_gemms == 0;
}

fp8::TransposedCopy Linear::transposed_copy(Device device, const fp8::Recipe& recipe,
                                            fp8::Role role) {
  return role != fp8::Role::weight && fp8::QuantizedTensor::copies_by_columns(device, recipe, role)
             ? fp8::TransposedCopy::columns_on_cpu
             : fp8::TransposedCopy::widened_on_cpu;
}

bool Linear::takes_amax(Device device, Precision precision, const fp8::Recipe& recipe) {
  // The CPU's per-tensor quantizes (the ones that widen) take a given amax.
  return precision == Precision::fp8 &&
         fp8::QuantizedTensor::widens(device, recipe, fp8::Role::activation) &&
         fp8::QuantizedTensor::widens(device, recipe, fp8::Role::gradient);
}

Linear::Linear(const LinearConfig& config) : config_(config) {
  const int64_t in = config.in_features, out = config.out_features, tokens = config.max_tokens;
  OCTET_CHECK(in > 0 && out > 0, kOp, "in_features and out_features must be positive, got ", in,
              " and ", out);
  OCTET_CHECK(tokens > 0, kOp, "max_tokens must be positive, got ", tokens);
  const Device device = config.device;
  const DType dt = dtype();

  size_t workspace_bytes = 0;
  if (config.precision == Precision::fp8) {
    OCTET_CHECK(in % 16 == 0, kOp, "in_features=", in,
                " must be a multiple of 16 for FP8 GEMMs (forward's K); pad it or run this "
                "layer in bf16");
    OCTET_CHECK(out % 16 == 0, kOp, "out_features=", out,
                " must be a multiple of 16 for FP8 GEMMs (dgrad's K); pad it or run this layer "
                "in bf16");
    OCTET_CHECK(tokens >= 16, kOp, "max_tokens=", tokens,
                " must be at least 16 under fp8 (T is a multiple of 16, wgrad's K)");
    const fp8::Recipe& recipe = config.recipe;
    const bool dy_widened = fp8::QuantizedTensor::widens(device, recipe, fp8::Role::gradient);
    const bool x_in_place =
        config.fp8_x_in_place && quantizes_in_place(device, recipe, fp8::Role::activation);
    const bool dy_in_place =
        config.fp8_dy_in_place && quantizes_in_place(device, recipe, fp8::Role::gradient);
    Tensor x_data, dy_data, dy_data_t;
    if (!config.fp8_scratch.empty()) {
      const Tensor& s = config.fp8_scratch;
      const size_t need = fp8_scratch_bytes(tokens, in, out, dy_widened);
      OCTET_CHECK(
          s.dtype == DType::u8 && s.device == device && s.nbytes() >= need && s.data != nullptr,
          kOp, "fp8_scratch must be u8 with at least ", need, " bytes on ", device_name(device),
          ", got ", s.str());
      auto* base = static_cast<uint8_t*>(s.data);
      x_data = Tensor(base, DType::u8, {tokens * in}, device);
      dy_data = Tensor(base, DType::u8, {tokens * out}, device);
      dy_data_t =
          Tensor(base + tokens * out, DType::u8, {(dy_widened ? 2 : 1) * tokens * out}, device);
    }
    const bool with_transpose = true;  // every operand is read transposed by a backward GEMM
    const auto in_place = fp8::TransposedCopy::widened_in_place;
    // x's and dy's transposed copies (wgrad's B and A): on the CPU under 1xN grids that its FP8
    // GEMM reads K-first (row's and block's 1x128 with AVX512_BF16) kept in x's layout, which
    // the quantize makes without transposes (fp8::TransposedCopy::columns_on_cpu); on the CPU
    // under per-tensor scales widened (transposed_copy).
    auto copy_of = [&](bool in_place_asked, fp8::Role role) {
      return in_place_asked ? in_place : transposed_copy(device, recipe, role);
    };
    const auto x_copy = copy_of(x_in_place, fp8::Role::activation);
    qx_ = fp8::QuantizedTensor(device, tokens, in, recipe, fp8::Role::activation, with_transpose,
                               x_data, Tensor(), x_copy);
    qw_ = fp8::QuantizedTensor(device, out, in, recipe, fp8::Role::weight, with_transpose, Tensor(),
                               Tensor(), transposed_copy(device, recipe, fp8::Role::weight));
    qdy_ = fp8::QuantizedTensor(device, tokens, out, recipe, fp8::Role::gradient, with_transpose,
                                dy_data, dy_in_place ? Tensor() : dy_data_t,
                                copy_of(dy_in_place, fp8::Role::gradient));
    fp8::DelayedScalingState* state = config.scaling_state;
    if (state == nullptr) {
      own_scaling_state_ = std::make_unique<fp8::DelayedScalingState>(device, recipe.delayed);
      state = own_scaling_state_.get();
    }
    for (fp8::QuantizedTensor* q : {&qx_, &qw_, &qdy_}) q->use_scaling_state(*state);
    if (own_scaling_state_) own_scaling_state_->allocate();

    // FP8 calls have T a multiple of 16 (wgrad's K): size for the most such rows.
    const int64_t t16 = tokens / 16 * 16;
    qx_.set_rows(t16);
    qdy_.set_rows(t16);
    const fp8::Fp8GemmOptions forward{.fast_accum = true, .workspace = {}},
        accumulate{.beta = 1.0f, .workspace = {}};
    workspace_bytes =
        std::max({fp8::gemm_workspace_bytes(fp8::as_stored(qx_), fp8::as_stored(qw_),
                                            shape_only(dt, t16, out, device), forward),
                  fp8::gemm_workspace_bytes(fp8::as_stored(qdy_), fp8::as_transposed(qw_),
                                            shape_only(dt, t16, in, device)),
                  fp8::gemm_workspace_bytes(fp8::as_transposed(qdy_), fp8::as_transposed(qx_),
                                            shape_only(DType::f32, out, in, device), accumulate)});
    if (recipe.bf16_gemms != 0) {
      // GEMMs in bf16 (attribution): W's bf16 copy for forward or dgrad, x's for wgrad.
      const bool w_copy = recipe.in_bf16(fp8::Gemm::forward) || recipe.in_bf16(fp8::Gemm::dgrad);
      const bool x_copy = recipe.in_bf16(fp8::Gemm::wgrad);
      const int64_t w_elems = w_copy ? out * in : 0, x_elems = x_copy ? tokens * in : 0;
      bf16_storage_ = Buffer::for_tensor(device, DType::bf16, {w_elems + x_elems});
      auto* base = static_cast<uint16_t*>(bf16_storage_.data());
      if (w_copy) weight_bf16_ = Tensor(base, DType::bf16, {out, in}, device);
      if (x_copy) x_bf16_ = Tensor(base + w_elems, DType::bf16, {tokens, in}, device);
      workspace_bytes =
          std::max(workspace_bytes, high_precision_workspace_bytes(dt, tokens, in, out, device));
    }
    // Zero rows: not quantized yet (stats() reports nothing for them).
    qx_.set_rows(0);
    qdy_.set_rows(0);
    qw_.set_rows(0);
  } else {
    workspace_bytes = high_precision_workspace_bytes(dt, tokens, in, out, device);
  }
  workspace_bytes_ = workspace_bytes;
  if (!config.shared_workspace && workspace_bytes > 0) {
    own_workspace_ = Buffer(device, workspace_bytes);
    workspace_ = own_workspace_.view(DType::u8, {static_cast<int64_t>(workspace_bytes)});
  }
}

void Linear::use_workspace(const Tensor& workspace) {
  OCTET_CHECK(config_.shared_workspace, kOp,
              "use_workspace needs a layer made with shared_workspace = true");
  OCTET_CHECK(workspace_bytes_ == 0 ||
                  (workspace.dtype == DType::u8 && workspace.device == config_.device &&
                   workspace.nbytes() >= workspace_bytes_ && workspace.data != nullptr),
              kOp, "the shared workspace must be u8 with at least ", workspace_bytes_, " bytes on ",
              device_name(config_.device), ", got ", workspace.str());
  workspace_ = workspace_bytes_ == 0 ? Tensor() : workspace;
}

void Linear::use_quantized_weight(const QuantizedWeight& w) {
  OCTET_CHECK(config_.precision == Precision::fp8, kOp,
              "use_quantized_weight: only an fp8 layer reads pre-quantized weights");
  OCTET_CHECK(w.data.empty() || weight_bf16_.empty(), kOp,
              "use_quantized_weight: the recipe runs forward or dgrad in bf16 (",
              config_.recipe.str(), "), which reads W itself, not the given FP8 copies");
  if (w.data.empty()) {
    given_weight_ = false;
    weight_fresh_ = false;
    qw_.set_rows(0);  // qw_'s own storage again
    return;
  }
  const int64_t in = config_.in_features, out = config_.out_features;
  const Device device = config_.device;
  const kernels::ScaleGrid grid = qw_.grid();
  const DType scale_dtype = grid.e8m0 ? DType::e8m0 : DType::f32;
  auto ok = [&](const Tensor& t, DType dtype, const Shape& shape) {
    return t.data != nullptr && t.dtype == dtype && t.shape == shape && t.device == device;
  };
  const Shape fwd_scales = kernels::scale_grid_shape(out, in, grid);
  const Shape t_scales = kernels::scale_grid_shape(in, out, grid);
  // A widened layer reads data alone (widened once a step by forward): the transposed copy
  // may be left out.
  const bool t_optional = qw_.widened() && w.data_t.empty() && w.scale_inv_t.empty();
  OCTET_CHECK(
      ok(w.data, qw_.format(), Shape{out, in}) && ok(w.scale_inv, scale_dtype, fwd_scales) &&
          (t_optional || (ok(w.data_t, qw_.format(), Shape{in, out}) &&
                          ok(w.scale_inv_t, scale_dtype, t_scales))),
      kOp, "use_quantized_weight: expected ", dtype_name(qw_.format()), "[", out, ", ", in, "], ",
      dtype_name(scale_dtype), fwd_scales.str(), ", ", dtype_name(qw_.format()), "[", in, ", ", out,
      "] and ", dtype_name(scale_dtype), t_scales.str(), " on ", device_name(device),
      qw_.widened() ? " (the last two may be empty: this layer widens data)" : "", ", got ",
      w.data.str(), ", ", w.scale_inv.str(), ", ", w.data_t.str(), " and ", w.scale_inv_t.str());
  qw_.set_rows(out);
  const Tensor wide = qw_.wide;  // [out, in], filled from data by the next forward
  qw_.set_rows(0);  // rows() 0: stats() reports no weight quantization of the layer's own
  qw_.data = w.data;
  qw_.scale_inv = w.scale_inv;
  if (qw_.widened()) {
    qw_.wide = wide;
  } else {
    qw_.data_t = w.data_t;
    qw_.scale_inv_t = w.scale_inv_t;
  }
  given_weight_ = true;
  weight_fresh_ = false;
}

void Linear::set_counting(bool on) {
  for (fp8::QuantizedTensor* q : {&qx_, &qw_, &qdy_}) q->set_counting(on);
}

void Linear::bind(const Tensor& weight, const Tensor& bias, const Tensor& weight_grad,
                  const Tensor& bias_grad) {
  const int64_t in = config_.in_features, out = config_.out_features;
  const Device device = config_.device;
  // Under fp8 the weight is only read to quantize it, which takes f32 too: a model may
  // bind its fp32 master weights and keep no bf16 copy.
  const bool fp8_master = config_.precision == Precision::fp8 && weight.dtype == DType::f32;
  OCTET_CHECK(same_matrix(weight, fp8_master ? DType::f32 : dtype(), out, in, device), kOp,
              "bind: weight must be ", dtype_name(dtype()),
              config_.precision == Precision::fp8 ? " (or f32)" : "", "[", out, ", ", in, "] on ",
              device_name(device), ", got ", weight.str());
  OCTET_CHECK(same_matrix(weight_grad, DType::f32, out, in, device), kOp,
              "bind: weight_grad must be f32[", out, ", ", in, "] on ", device_name(device),
              ", got ", weight_grad.str());
  if (config_.bias) {
    OCTET_CHECK(same_vector(bias, dtype(), out, device), kOp, "bind: bias must be ",
                dtype_name(dtype()), "[", out, "] on ", device_name(device), ", got ", bias.str());
    OCTET_CHECK(same_vector(bias_grad, DType::f32, out, device), kOp,
                "bind: bias_grad must be f32[", out, "] on ", device_name(device), ", got ",
                bias_grad.str());
  } else {
    OCTET_CHECK(bias.empty() && bias_grad.empty(), kOp,
                "bind: this layer was configured without a bias; pass empty bias tensors");
  }
  weight_ = weight;
  bias_ = bias;
  weight_grad_ = weight_grad;
  bias_grad_ = bias_grad;
  weight_fresh_ = false;
  tokens_ = 0;
  saved_x_ = Tensor();
}

void Linear::check_input(const char* op, const Tensor& t, int64_t cols) const {
  OCTET_CHECK(!t.empty() && t.dtype == dtype() && t.shape.rank() >= 1 && t.cols() == cols &&
                  t.device == config_.device,
              kOp, op, " must be ", dtype_name(dtype()), "[T, ", cols, "] on ",
              device_name(config_.device), ", got ", t.str());
  const int64_t rows = t.rows();
  OCTET_CHECK(rows >= 1 && rows <= config_.max_tokens, kOp, op, " has T=", rows,
              " rows; expected 1 <= T <= max_tokens=", config_.max_tokens,
              " (the layer's buffers were sized for it)");
  OCTET_CHECK(config_.precision != Precision::fp8 || rows % 16 == 0, kOp, op, " has T=", rows,
              " rows; under fp8 T must be a multiple of 16 (wgrad's K): pad the batch");
}

void Linear::forward(const Tensor& x, const Tensor& y, const Tensor& x_amax) {
  OCTET_CHECK(!weight_.empty(), kOp, "forward before bind(): bind the weights first");
  check_input("forward: x", x, config_.in_features);
  const int64_t t = x.rows();
  OCTET_CHECK(!y.empty() && y.dtype == dtype() && y.rows() == t &&
                  y.cols() == config_.out_features && y.device == config_.device,
              kOp, "forward: y must be ", dtype_name(dtype()), "[", t, ", ", config_.out_features,
              "] on ", device_name(config_.device), " (T rows like x), got ", y.str());
  const Tensor x2 = as_matrix(x), y2 = as_matrix(y);
  const Tensor& workspace = workspace_;

  if (config_.precision == Precision::fp8) {
    const fp8::Recipe& recipe = config_.recipe;
    fp8::quantize(x2, qx_, recipe, nullptr, -1, x_amax);
    if (!weight_fresh_) {
      if (!given_weight_) {
        fp8::quantize(weight_, qw_, recipe);
        if (!weight_bf16_.empty()) kernels::convert(weight_, weight_bf16_);
      } else if (qw_.widened()) {
        kernels::convert(qw_.data, qw_.wide);  // the given codes' values, exactly
      }
      weight_fresh_ = true;
    }
    if (!x_bf16_.empty()) kernels::convert(x2, first_rows(x_bf16_, t));
    if (recipe.in_bf16(fp8::Gemm::forward)) {
      kernels::GemmOptions o;
      o.workspace = workspace;
      kernels::gemm(x2, weight_bf16_, y2, o);
    } else {
      fp8::Fp8GemmOptions o;
      o.fast_accum = true;
      o.workspace = workspace;
      fp8::gemm(fp8::as_stored(qx_), fp8::as_stored(qw_), y2, o);
    }
  } else {
    kernels::GemmOptions o;  // y = x Wᵀ: W is stored [out, in], K-major
    o.workspace = workspace;
    kernels::gemm(x2, weight_, y2, o);
    saved_x_ = x2;
  }
  if (config_.bias) kernels::add_bias(y2, bias_);
  tokens_ = t;
}

void Linear::backward(const Tensor& dy, const Tensor& dx, const Tensor& dy_amax) {
  OCTET_CHECK(!weight_.empty(), kOp, "backward before bind(): bind the weights first");
  OCTET_CHECK(tokens_ > 0, kOp, "backward before forward: run forward on this batch first");
  check_input("backward: dy", dy, config_.out_features);
  const int64_t t = dy.rows();
  OCTET_CHECK(t == tokens_, kOp, "backward: dy has T=", t, " rows but the last forward had ",
              tokens_);
  if (!dx.empty()) {
    OCTET_CHECK(dx.dtype == dtype() && dx.rows() == t && dx.cols() == config_.in_features &&
                    dx.device == config_.device,
                kOp, "backward: dx must be empty or ", dtype_name(dtype()), "[", t, ", ",
                config_.in_features, "] on ", device_name(config_.device), ", got ", dx.str());
  }
  const Tensor dy2 = as_matrix(dy);
  const Tensor& workspace = workspace_;

  if (config_.precision == Precision::fp8) {
    const fp8::Recipe& recipe = config_.recipe;
    fp8::quantize(dy2, qdy_, recipe, nullptr, -1, dy_amax);
    fp8::Fp8GemmOptions o;
    o.workspace = workspace;
    kernels::GemmOptions bf16;  // the GEMMs the recipe keeps in bf16, as in the branch below
    bf16.workspace = workspace;
    bf16.trans_b = false;
    // dx [T, in] = dy [T, out] · W [out, in]: B is Wᵀ stored [in, out] (K = out).
    if (!dx.empty() && recipe.in_bf16(fp8::Gemm::dgrad)) {
      kernels::gemm(dy2, weight_bf16_, as_matrix(dx), bf16);
    } else if (!dx.empty()) {
      fp8::gemm(fp8::as_stored(qdy_), fp8::as_transposed(qw_), as_matrix(dx), o);
    }
    // dW [out, in] += dyᵀ [out, T] · x [T, in]: B is xᵀ stored [in, T] (K = T).
    if (recipe.in_bf16(fp8::Gemm::wgrad)) {
      bf16.trans_a = true;
      bf16.beta = 1.0f;
      kernels::gemm(dy2, first_rows(x_bf16_, t), weight_grad_, bf16);
    } else {
      o.beta = 1.0f;
      fp8::gemm(fp8::as_transposed(qdy_), fp8::as_transposed(qx_), weight_grad_, o);
    }
  } else {
    kernels::GemmOptions o;
    o.workspace = workspace;
    o.trans_b = false;
    if (!dx.empty()) kernels::gemm(dy2, weight_, as_matrix(dx), o);
    o.trans_a = true;
    o.beta = 1.0f;
    kernels::gemm(dy2, saved_x_, weight_grad_, o);
  }
  if (config_.bias) kernels::bias_grad_accumulate(dy2, bias_grad_);
}

void Linear::update_scaling() {
  if (own_scaling_state_) own_scaling_state_->update();
}

Linear::Stats Linear::stats() const {
  Stats s;
  if (config_.precision != Precision::fp8) return s;
  // A tensor with zero rows was never quantized (or held nothing): it reports zeros.
  auto read = [&](const fp8::QuantizedTensor& q, fp8::TensorStats& out) {
    if (q.rows() == 0) return;
    out = fp8::read_stats(q);
    s.layer.add(out);
  };
  read(qx_, s.x);
  read(qw_, s.weight);
  read(qdy_, s.grad_output);
  return s;
}

}  // namespace octet::nn
