// core/shape.h: the dimensions of a dense row-major tensor (rank 0..4).
// defines: Shape
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace octet {

class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t numel() const;
  // Product of all dimensions but the last, and the last one: the matrix a
  // row-major tensor is when its leading dimensions are flattened.
  int64_t rows() const;
  int64_t cols() const { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  std::string str() const;  // "[3, 4]"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace octet
