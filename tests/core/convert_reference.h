// tests/core/convert_reference.h: a slow float64 model of small float formats,
// written independently of core/convert.h: codes are decoded from their fields
// with std::ldexp, and a value is rounded by looking it up among all finite
// values of the format (ties to the code with an even last mantissa bit).
// defines: RefFormat, kRefE4M3, kRefE5M2, kRefF16, kRefBF16, log_uniform_f32
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace octet::testing {

class RefFormat {
 public:
  // ieee: the top exponent holds only Inf (mantissa 0) and NaN (E5M2, f16, bf16).
  // fn ("finite"): only the all-ones code is NaN, there is no Inf (E4M3).
  enum class Specials { ieee, fn };

  // nan_code: the magnitude code a NaN input becomes (ml_dtypes' choice for FP8).
  RefFormat(int exponent_bits, int mantissa_bits, Specials specials, uint32_t nan_code)
      : exponent_bits_(exponent_bits),
        mantissa_bits_(mantissa_bits),
        bias_((1 << (exponent_bits - 1)) - 1),
        specials_(specials),
        nan_code_(nan_code) {
    const uint32_t all_ones = (1u << (exponent_bits + mantissa_bits)) - 1;
    max_code_ = specials == Specials::ieee ? (all_ones >> mantissa_bits << mantissa_bits) - 1
                                           : all_ones - 1;
    // Codes 0..max_code are the finite magnitudes in increasing order; code
    // max_code + 1, read with the finite formula, is the next value the format
    // would have if its range went on: rounding to it means overflow.
    for (uint32_t code = 0; code <= max_code_ + 1; ++code) magnitudes_.push_back(field_value(code));
  }

  uint32_t sign_bit() const { return 1u << (exponent_bits_ + mantissa_bits_); }
  uint32_t max_code() const { return max_code_; }
  double max_finite() const { return magnitudes_[max_code_]; }
  // The value past max_finite that bounds the rounding range (480 for E4M3).
  double next_after_max() const { return magnitudes_[max_code_ + 1]; }
  // Magnitude code of infinity (ieee formats only).
  uint32_t inf_code() const { return max_code_ + 1; }
  uint32_t nan_code() const { return nan_code_; }

  bool is_nan(uint32_t code) const {
    const uint32_t mag = code & (sign_bit() - 1);
    return specials_ == Specials::ieee ? mag > inf_code() : mag == max_code_ + 1;
  }

  // The exact value of a code: ±0, subnormals, normals, ±Inf, NaN.
  double decode(uint32_t code) const {
    if (is_nan(code)) return std::nan("");
    const uint32_t mag = code & (sign_bit() - 1);
    const double value =
        specials_ == Specials::ieee && mag == inf_code() ? HUGE_VAL : field_value(mag);
    return (code & sign_bit()) ? -value : value;
  }

  // Round to nearest, ties to even. Beyond the range: ±max when saturating,
  // else ±Inf (ieee) or NaN (fn). NaN becomes nan_code with the sign kept.
  uint32_t encode(double x, bool saturate) const {
    const uint32_t sign = std::signbit(x) ? sign_bit() : 0u;
    if (std::isnan(x)) return sign | nan_code_;
    const double a = std::fabs(x);
    const auto it = std::lower_bound(magnitudes_.begin(), magnitudes_.end(), a);
    uint32_t mag;
    if (it == magnitudes_.end()) {
      mag = max_code_ + 1;  // at or beyond the next value past max, Inf included
    } else {
      const auto hi = static_cast<uint32_t>(it - magnitudes_.begin());
      if (*it == a || hi == 0) {
        mag = hi;
      } else {
        // Midpoints of neighbouring values of these formats are exact in double.
        const double mid = (magnitudes_[hi - 1] + magnitudes_[hi]) / 2;
        mag = a < mid ? hi - 1 : a > mid ? hi : ((hi - 1) % 2 == 0 ? hi - 1 : hi);
      }
    }
    if (mag > max_code_) {
      if (saturate) return sign | max_code_;
      return sign | (specials_ == Specials::ieee ? inf_code() : nan_code_);
    }
    return sign | mag;
  }

 private:
  // Value of a magnitude code by the finite formula, ignoring specials.
  double field_value(uint32_t mag) const {
    const int exponent = static_cast<int>(mag >> mantissa_bits_);
    const int mantissa = static_cast<int>(mag & ((1u << mantissa_bits_) - 1));
    if (exponent == 0) return std::ldexp(mantissa, 1 - bias_ - mantissa_bits_);
    return std::ldexp((1 << mantissa_bits_) + mantissa, exponent - bias_ - mantissa_bits_);
  }

  int exponent_bits_, mantissa_bits_, bias_;
  Specials specials_;
  uint32_t nan_code_;
  uint32_t max_code_;
  std::vector<double> magnitudes_;
};

// OCP OFP8 E4M3 ("fn": no Inf, NaN = S.1111.111) and E5M2 (IEEE-like), with the
// NaN codes ml_dtypes 0.6 writes; IEEE binary16 and bfloat16 (quiet NaN codes).
inline const RefFormat kRefE4M3(4, 3, RefFormat::Specials::fn, 0x7F);
inline const RefFormat kRefE5M2(5, 2, RefFormat::Specials::ieee, 0x7E);
inline const RefFormat kRefF16(5, 10, RefFormat::Specials::ieee, 0x7E00);
inline const RefFormat kRefBF16(8, 7, RefFormat::Specials::ieee, 0x7FC0);

// ±2^u with u uniform in [min_log2, max_log2): values spread evenly over binades.
inline float log_uniform_f32(std::mt19937_64& rng, double min_log2, double max_log2) {
  const double u = std::uniform_real_distribution<double>(min_log2, max_log2)(rng);
  const float magnitude = static_cast<float>(std::exp2(u));
  return (rng() & 1) ? -magnitude : magnitude;
}

}  // namespace octet::testing
