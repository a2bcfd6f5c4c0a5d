// tests/kernels/quantize_testing.h: cases, inputs, device runner and reference for quantize.
// defines: kTensorGrid, kRowGrid, kTileGrid, kBlockGrid, kMxGrid, QuantizeCase,
//          quantize_cases, kQuantizeShapes, kMultiTileShapes, Distribution, kDistributions,
//          random_matrix, transposed, QuantizeRun, make_run, Quantized, GuardedArray,
//          quantize_on, dequantize_on, quantize_reference, dequantize_reference, fp8_max,
//          ScopedEnv, fp8_cvt_modes
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/convert.h"
#include "kernels/quantize.h"
#include "testing.h"

namespace octet::testing {

inline constexpr kernels::ScaleGrid kTensorGrid{0, 0, false};
inline constexpr kernels::ScaleGrid kRowGrid{1, 0, false};
inline constexpr kernels::ScaleGrid kTileGrid{1, 128, false};
inline constexpr kernels::ScaleGrid kBlockGrid{128, 128, false};
inline constexpr kernels::ScaleGrid kMxGrid{1, 32, true};

struct QuantizeCase {
  const char* grid_name;
  kernels::ScaleGrid grid;
  DType fp8;  // e4m3 | e5m2
  DType in;   // f32 | bf16
  std::string name() const {
    return std::string(grid_name) + " " + dtype_name(in) + "->" + dtype_name(fp8);
  }
};

// Every grid x format x input dtype.
inline std::vector<QuantizeCase> quantize_cases() {
  const std::pair<const char*, kernels::ScaleGrid> grids[] = {{"tensor", kTensorGrid},
                                                              {"row", kRowGrid},
                                                              {"tiles1x128", kTileGrid},
                                                              {"blocks128x128", kBlockGrid},
                                                              {"mx1x32", kMxGrid}};
  std::vector<QuantizeCase> cases;
  for (const auto& [name, grid] : grids) {
    for (DType fp8 : {DType::e4m3, DType::e5m2}) {
      for (DType in : {DType::f32, DType::bf16}) cases.push_back({name, grid, fp8, in});
    }
  }
  return cases;
}

// Odd shapes: single element, a column, fewer rows than a block, ragged edge blocks
// both ways.
inline constexpr int64_t kQuantizeShapes[][2] = {{1, 1},     {300, 1},   {3, 200},
                                                 {130, 257}, {217, 256}, {256, 384}};

// Shapes of many 128x128 tiles (the CUDA kernels' unit), ragged at the edges or not, rows
// of x and of xᵀ not multiples of the 16-byte vectors, one row longer than a CUDA block
// keeps in registers (4100), a long column.
inline constexpr int64_t kMultiTileShapes[][2] = {{1000, 160}, {128, 4096}, {520, 1000},
                                                  {257, 384},  {33, 4100},  {4100, 24}};

enum class Distribution { normal, uniform, heavy_tailed };
inline const char* distribution_name(Distribution d) {
  return d == Distribution::normal ? "normal" : d == Distribution::uniform ? "uniform" : "heavy";
}
inline constexpr Distribution kDistributions[] = {Distribution::normal, Distribution::uniform,
                                                  Distribution::heavy_tailed};

inline double fp8_max(DType fp8) {
  return dtype_info(fp8).max_finite;
}

// n values of x, already rounded to `in` (so that the f32 host copy is exactly the
// tensor). The magnitude is random over 2^-12..2^12 so that scales vary; heavy
// tails are a normal with 0.1% of the values multiplied by 1000.
inline std::vector<float> random_matrix(Distribution d, int64_t n, DType in, Rng& rng) {
  const double sigma = std::exp2(std::uniform_real_distribution<double>(-12.0, 12.0)(rng));
  std::normal_distribution<double> normal(0.0, sigma);
  std::uniform_real_distribution<double> uniform(-sigma, sigma);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    double value = d == Distribution::uniform ? uniform(rng) : normal(rng);
    if (d == Distribution::heavy_tailed && unit(rng) < 1e-3) value *= 1000.0;
    v = static_cast<float>(value);
    if (in == DType::bf16) v = bf16_to_f32(f32_to_bf16(v));
  }
  return x;
}

inline std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  }
  return t;
}

struct QuantizeRun {
  kernels::ScaleGrid grid;
  DType fp8 = DType::e4m3;
  DType in = DType::f32;
  bool with_transposed = true;
  bool power_of_two_scales = false;
  Overflow overflow = Overflow::saturate;
  std::optional<float> given_scale;
  bool amax = true;                 // ask for the amax output
  bool counts = true;               // ask for the counts
  bool misaligned = false;          // every tensor one element past a 64-byte boundary
  bool wide = false;                // ask for the codes widened to bf16 (CPU only)
  bool data_t_in_x_layout = false;  // data_t [rows, cols] (CPU only): Quantized::data_t too
};
inline QuantizeRun make_run(kernels::ScaleGrid grid, DType fp8, DType in,
                            bool with_transposed = true) {
  QuantizeRun run;
  run.grid = grid;
  run.fp8 = fp8;
  run.in = in;
  run.with_transposed = with_transposed;
  return run;
}

// Host copies of what quantize wrote.
struct Quantized {
  std::vector<uint8_t> data, data_t;
  std::vector<uint8_t> scale_inv_raw, scale_inv_t_raw;  // as stored: f32 bytes or E8M0 codes
  std::vector<float> scale_inv, scale_inv_t;            // their values
  float amax = 0.0f;
  int32_t saturated = -1, flushed = -1;
  std::vector<uint16_t> wide;  // bf16 bits, when the run asked for them
};

inline std::vector<float> scale_values(const std::vector<uint8_t>& raw, bool e8m0) {
  std::vector<float> v(e8m0 ? raw.size() : raw.size() / 4);
  for (size_t i = 0; i < v.size(); ++i) {
    if (e8m0) {
      v[i] = e8m0_to_f32(raw[i]);
    } else {
      std::memcpy(&v[i], raw.data() + 4 * i, 4);
    }
  }
  return v;
}

// A device buffer with guard bytes on both sides, filled with 0xA5, so that a write
// outside the tensor is seen. `misaligned`: the tensor starts one element past a
// 64-byte boundary (no vector loads or stores on it).
class GuardedArray {
 public:
  static constexpr size_t kGuard = 64;
  GuardedArray(Device device, DType dtype, Shape shape, bool misaligned = false)
      : device_(device),
        bytes_(static_cast<size_t>(shape.numel()) * dtype_size(dtype)),
        front_(kGuard + (misaligned ? dtype_size(dtype) : 0)),
        buffer_(device, bytes_ + front_ + kGuard),
        tensor_(buffer_.view(dtype, shape, front_)) {
    const std::vector<uint8_t> fill(bytes_ + front_ + kGuard, 0xA5);
    copy_bytes(buffer_.data(), device, fill.data(), Device::cpu(), fill.size());
  }
  const Tensor& tensor() const { return tensor_; }
  void write(const void* host) { copy_bytes(tensor_.data, device_, host, Device::cpu(), bytes_); }
  // The tensor's bytes; a failure if a guard byte changed.
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> all(bytes_ + front_ + kGuard);
    copy_bytes(all.data(), Device::cpu(), buffer_.data(), device_, all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      if ((i < front_ || i >= front_ + bytes_) && all[i] != 0xA5) {
        ADD_FAILURE() << "wrote outside " << tensor_.str() << " at byte " << i;
        break;
      }
    }
    return {all.begin() + static_cast<ptrdiff_t>(front_),
            all.begin() + static_cast<ptrdiff_t>(front_ + bytes_)};
  }

 private:
  Device device_;
  size_t bytes_;
  size_t front_;
  Buffer buffer_;
  Tensor tensor_;
};

inline std::vector<uint8_t> input_bytes(const std::vector<float>& x, DType in) {
  std::vector<uint8_t> bytes(x.size() * dtype_size(in));
  for (size_t i = 0; i < x.size(); ++i) {
    if (in == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t b = f32_to_bf16(x[i]);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
  }
  return bytes;
}

// Runs kernels::quantize on `device` for the host matrix x [rows, cols].
inline Quantized quantize_on(Device device, const std::vector<float>& x, int64_t rows, int64_t cols,
                             const QuantizeRun& run) {
  const DType scale_dtype = run.grid.e8m0 ? DType::e8m0 : DType::f32;
  const bool m = run.misaligned;
  GuardedArray in(device, run.in, {rows, cols}, m);
  in.write(input_bytes(x, run.in).data());
  GuardedArray data(device, run.fp8, {rows, cols}, m);
  GuardedArray scale_inv(device, scale_dtype, kernels::scale_grid_shape(rows, cols, run.grid), m);
  GuardedArray data_t(device, run.fp8,
                      run.data_t_in_x_layout ? Shape{rows, cols} : Shape{cols, rows}, m);
  GuardedArray scale_inv_t(device, scale_dtype, kernels::scale_grid_shape(cols, rows, run.grid), m);
  GuardedArray amax(device, DType::f32, {1}, m);
  GuardedArray counts(device, DType::i32, {2}, m);  // 0xA5A5A5A5: must be overwritten
  GuardedArray given(device, DType::f32, {1}, m);
  GuardedArray wide(device, DType::bf16, {rows, cols}, m);
  kernels::QuantizeOutputs out;
  if (run.wide) out.wide = wide.tensor();
  out.data = data.tensor();
  out.scale_inv = scale_inv.tensor();
  if (run.amax) out.amax = amax.tensor();
  if (run.counts) out.counts = counts.tensor();
  if (run.with_transposed) {
    out.data_t = data_t.tensor();
    out.scale_inv_t = scale_inv_t.tensor();
    out.data_t_in_x_layout = run.data_t_in_x_layout;
  }
  kernels::QuantizeOptions options;
  options.grid = run.grid;
  options.power_of_two_scales = run.power_of_two_scales;
  options.overflow = run.overflow;
  if (run.given_scale) {
    given.write(&*run.given_scale);
    options.given_scale = given.tensor();
  }
  kernels::quantize(in.tensor(), out, options);

  Quantized q;
  q.data = data.read();
  q.scale_inv_raw = scale_inv.read();
  q.scale_inv = scale_values(q.scale_inv_raw, run.grid.e8m0);
  if (run.with_transposed) {
    q.data_t = data_t.read();
    q.scale_inv_t_raw = scale_inv_t.read();
    q.scale_inv_t = scale_values(q.scale_inv_t_raw, run.grid.e8m0);
  }
  if (run.wide) {
    const std::vector<uint8_t> w = wide.read();
    q.wide.resize(w.size() / 2);
    std::memcpy(q.wide.data(), w.data(), w.size());
  }
  const std::vector<uint8_t> a = amax.read(), c = counts.read();
  if (run.amax) std::memcpy(&q.amax, a.data(), 4);
  if (run.counts) {
    std::memcpy(&q.saturated, c.data(), 4);
    std::memcpy(&q.flushed, c.data() + 4, 4);
  }
  return q;
}

// Runs kernels::dequantize on `device`; returns y's values (bf16 widened to f32).
inline std::vector<float> dequantize_on(Device device, const std::vector<uint8_t>& data,
                                        const std::vector<uint8_t>& scale_inv_raw, int64_t rows,
                                        int64_t cols, kernels::ScaleGrid grid, DType fp8,
                                        DType y_dtype) {
  const DType scale_dtype = grid.e8m0 ? DType::e8m0 : DType::f32;
  GuardedArray d(device, fp8, {rows, cols});
  d.write(data.data());
  GuardedArray s(device, scale_dtype, kernels::scale_grid_shape(rows, cols, grid));
  s.write(scale_inv_raw.data());
  GuardedArray y(device, y_dtype, {rows, cols});
  kernels::dequantize(d.tensor(), s.tensor(), grid, y.tensor());
  const std::vector<uint8_t> bytes = y.read();
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) {
    if (y_dtype == DType::f32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      values[i] = bf16_to_f32(b);
    }
  }
  return values;
}

// The straightforward reference: plain loops over each block with the scalar
// functions of core/convert.h and the scale formulas of kernels/quantize.h; the
// E8M0 reciprocal by std::ldexp. No transposed copy (quantize xᵀ for that).
inline Quantized quantize_reference(const std::vector<float>& x, int64_t rows, int64_t cols,
                                    const QuantizeRun& run) {
  const int64_t br = run.grid.block_rows == 0 ? rows : run.grid.block_rows;
  const int64_t bc = run.grid.block_cols == 0 ? cols : run.grid.block_cols;
  const int64_t nbr = (rows + br - 1) / br, nbc = (cols + bc - 1) / bc;
  const auto max = static_cast<float>(fp8_max(run.fp8));
  Quantized q;
  q.data.resize(x.size());
  q.scale_inv.resize(static_cast<size_t>(nbr * nbc));
  q.scale_inv_raw.resize(static_cast<size_t>(nbr * nbc) * (run.grid.e8m0 ? 1 : 4));
  q.saturated = q.flushed = 0;
  bool any_nan = false;
  for (int64_t i = 0; i < nbr; ++i) {
    for (int64_t j = 0; j < nbc; ++j) {
      const int64_t r1 = std::min(rows, (i + 1) * br), c1 = std::min(cols, (j + 1) * bc);
      float amax = 0.0f;
      bool nan = false;
      for (int64_t r = i * br; r < r1; ++r) {
        for (int64_t c = j * bc; c < c1; ++c) {
          const float a = std::fabs(x[r * cols + c]);
          if (std::isnan(a)) nan = true;
          if (a > amax) amax = a;
        }
      }
      if (nan) amax = std::nanf("");
      any_nan = any_nan || nan;
      if (!(amax <= q.amax)) q.amax = amax;
      float scale, scale_inv;
      const int64_t s = i * nbc + j;
      if (run.given_scale) {
        scale = *run.given_scale;
        scale_inv = 1.0f / scale;
      } else if (run.grid.e8m0) {
        const uint8_t e = kernels::e8m0_scale_inv_from_amax(amax, max);
        q.scale_inv_raw[s] = e;
        scale_inv = e8m0_to_f32(e);
        scale = std::ldexp(1.0f, 127 - e);
      } else {
        scale = kernels::scale_from_amax(amax, max, 0, run.power_of_two_scales);
        scale_inv = 1.0f / scale;
      }
      q.scale_inv[s] = scale_inv;
      if (!run.grid.e8m0) std::memcpy(q.scale_inv_raw.data() + 4 * s, &scale_inv, 4);
      for (int64_t r = i * br; r < r1; ++r) {
        for (int64_t c = j * bc; c < c1; ++c) {
          const float xv = x[r * cols + c], v = xv * scale;
          const uint8_t code = f32_to_fp8(v, run.fp8, run.overflow);
          q.data[r * cols + c] = code;
          const bool finite = std::isfinite(xv);
          if (finite &&
              !std::isfinite(fp8_to_f32(f32_to_fp8(v, run.fp8, Overflow::nonfinite), run.fp8)))
            ++q.saturated;
          if (finite && xv != 0.0f && (code & 0x7F) == 0) ++q.flushed;
        }
      }
    }
  }
  if (any_nan) q.amax = std::nanf("");
  return q;
}

// y = value(code) * scale_inv of its block, one f32 product, then y's dtype.
inline std::vector<float> dequantize_reference(const Quantized& q, int64_t rows, int64_t cols,
                                               kernels::ScaleGrid grid, DType fp8, DType y) {
  const int64_t br = grid.block_rows == 0 ? rows : grid.block_rows;
  const int64_t bc = grid.block_cols == 0 ? cols : grid.block_cols;
  const int64_t nbc = (cols + bc - 1) / bc;
  std::vector<float> out(q.data.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = fp8_to_f32(q.data[r * cols + c], fp8) * q.scale_inv[r / br * nbc + c / bc];
      out[r * cols + c] = y == DType::f32 ? v : bf16_to_f32(f32_to_bf16(v));
    }
  }
  return out;
}

// Sets an environment variable for the life of the object (restores or unsets it after).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// The settings of OCTET_CUDA_FP8_CVT a device runs quantize under: the CUDA kernels
// encode with the hardware conversion or the scalar routine (both must match the CPU).
inline std::vector<const char*> fp8_cvt_modes(Device device) {
  if (device.is_cuda()) return {"hardware", "software"};
  return {"hardware"};
}

}  // namespace octet::testing
