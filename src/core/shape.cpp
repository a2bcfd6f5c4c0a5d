// core/shape.cpp
#include "core/shape.h"

#include "core/error.h"

namespace octet {

Shape::Shape(std::initializer_list<int64_t> dims) {
  OCTET_CHECK(dims.size() <= kMaxRank, "shape", "rank ", dims.size(), " exceeds the maximum of ",
              kMaxRank);
  for (int64_t d : dims) {
    OCTET_CHECK(d >= 0, "shape", "dimension ", d, " is negative");
    dims_[rank_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

int64_t Shape::rows() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a.dims_[i] != b.dims_[i]) return false;
  }
  return true;
}

}  // namespace octet
