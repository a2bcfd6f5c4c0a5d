// core/arena.h: named, aligned regions of one device buffer, laid out once, allocated
// once, then handed out as views: how octet carves activations, quantized operands,
// scaling state and step statistics out of single allocations.
// defines: Arena
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/buffer.h"

namespace octet {

// Regions are added first (each 64-byte aligned), then allocate() makes the one buffer
// and points every bound Tensor at its region. Nothing is allocated after that.
class Arena {
 public:
  using Region = int;
  Arena() = default;
  explicit Arena(Device device) : device_(device) {}

  // A region for a tensor of `dtype` and `shape`, named for error messages. With
  // `bind_to`, allocate() sets *bind_to to the region's tensor (the pointee must then
  // stay where it is until allocate()).
  Region add(std::string name, DType dtype, const Shape& shape, Tensor* bind_to = nullptr);
  // A region of `bytes` raw bytes (viewed later with view()).
  Region add_bytes(std::string name, size_t bytes);
  // Points *target at `region` too, at allocate() (a second name for the same memory).
  void bind(Region region, Tensor* target);
  // One buffer for every region (none when the arena is empty); fills the bindings.
  void allocate();
  bool allocated() const { return allocated_; }

  // The region as it was added.
  Tensor tensor(Region region) const;
  // `dtype` [shape] at byte `offset` within the region; it must fit there.
  Tensor view(Region region, DType dtype, const Shape& shape, size_t offset = 0) const;
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    size_t offset, bytes;
  };
  const Entry& entry(Region region) const;
  Device device_;
  std::vector<Entry> regions_;
  std::vector<std::pair<Region, Tensor*>> bindings_;
  size_t bytes_ = 0;
  bool allocated_ = false;
  Buffer buffer_;
};

}  // namespace octet
