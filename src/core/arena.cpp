// core/arena.cpp
#include "core/arena.h"

#include "core/error.h"

namespace octet {
namespace {
constexpr size_t kAlign = 64;
size_t aligned(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

Arena::Region Arena::add(std::string name, DType dtype, const Shape& shape, Tensor* bind_to) {
  OCTET_CHECK(!allocated_, "arena", "region '", name, "' added after allocate()");
  const size_t offset = aligned(bytes_);
  const size_t n = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  regions_.push_back({std::move(name), dtype, shape, offset, n});
  bytes_ = offset + n;
  const Region region = static_cast<Region>(regions_.size()) - 1;
  if (bind_to) bind(region, bind_to);
  return region;
}

Arena::Region Arena::add_bytes(std::string name, size_t bytes) {
  return add(std::move(name), DType::u8, Shape{static_cast<int64_t>(bytes)});
}

void Arena::bind(Region region, Tensor* target) {
  OCTET_CHECK(!allocated_, "arena", "bind after allocate()");
  entry(region);
  bindings_.emplace_back(region, target);
}

void Arena::allocate() {
  OCTET_CHECK(!allocated_, "arena", "allocate() called twice");
  allocated_ = true;
  if (bytes_ > 0) buffer_ = Buffer(device_, aligned(bytes_));
  for (const auto& [region, target] : bindings_) *target = tensor(region);
  bindings_.clear();
}

const Arena::Entry& Arena::entry(Region region) const {
  OCTET_CHECK(region >= 0 && region < static_cast<Region>(regions_.size()), "arena", "region ",
              region, " out of ", regions_.size());
  return regions_[static_cast<size_t>(region)];
}

Tensor Arena::tensor(Region region) const {
  const Entry& e = entry(region);
  return view(region, e.dtype, e.shape);
}

Tensor Arena::view(Region region, DType dtype, const Shape& shape, size_t offset) const {
  const Entry& e = entry(region);
  OCTET_CHECK(allocated_, "arena", "region '", e.name, "' used before allocate()");
  const size_t n = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  OCTET_CHECK(offset + n <= e.bytes, "arena", "a view of ", n, " bytes at ", offset,
              " does not fit region '", e.name, "' of ", e.bytes, " bytes");
  if (n == 0 && buffer_.data() == nullptr) return Tensor(nullptr, dtype, shape, device_);
  return buffer_.view(dtype, shape, e.offset + offset);
}

}  // namespace octet
