// tests/core/test_arena.cpp: Arena lays regions out once, aligned, in one buffer, binds
// tensors to them and refuses what does not fit.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/arena.h"
#include "core/error.h"
#include "testing.h"

namespace octet {
namespace {

using testing::error_of;

TEST(Arena, RegionsAre64ByteAlignedDisjointAndBoundAtAllocate) {
  Arena arena(Device::cpu());
  Tensor a, b, alias;
  const Arena::Region ra = arena.add("a", DType::bf16, {3, 5}, &a);  // 30 bytes
  const Arena::Region rb = arena.add("b", DType::f32, {7}, &b);      // 28 bytes
  const Arena::Region rc = arena.add_bytes("c", 65);
  arena.bind(ra, &alias);
  EXPECT_TRUE(a.empty());  // nothing is bound before allocate()
  arena.allocate();
  EXPECT_EQ(a.dtype, DType::bf16);
  EXPECT_EQ(a.shape, (Shape{3, 5}));
  EXPECT_EQ(b.shape, Shape{7});
  EXPECT_EQ(alias.data, a.data);
  const auto base = reinterpret_cast<uintptr_t>(a.data);
  EXPECT_EQ(base % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) - base, 64u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.tensor(rc).data) - base, 128u);
  EXPECT_EQ(arena.bytes(), 128u + 65u);
  // A view within a region, at an offset.
  const Tensor last = arena.view(rb, DType::f32, {1}, 24);
  EXPECT_EQ(static_cast<char*>(last.data) - static_cast<char*>(b.data), 24);
}

TEST(Arena, RefusesViewsThatDoNotFitAndChangesAfterAllocate) {
  Arena arena(Device::cpu());
  const Arena::Region r = arena.add("scale", DType::f32, {4});
  EXPECT_NE(
      error_of([&] { arena.tensor(r); }).find("[arena] region 'scale' used before allocate()"),
      std::string::npos);
  arena.allocate();
  EXPECT_NE(error_of([&] {
              arena.view(r, DType::f32, {2}, 12);
            }).find("[arena] a view of 8 bytes at 12 does not fit region 'scale' of 16 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              arena.add("late", DType::f32, {1});
            }).find("[arena] region 'late' added after allocate()"),
            std::string::npos);
  EXPECT_NE(error_of([&] { arena.tensor(3); }).find("[arena] region 3 out of 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { arena.allocate(); }).find("allocate() called twice"), std::string::npos);
}

TEST(Arena, AnEmptyArenaAllocatesNothing) {
  Arena arena(Device::cpu());
  arena.allocate();
  EXPECT_EQ(arena.bytes(), 0u);
}

}  // namespace
}  // namespace octet
