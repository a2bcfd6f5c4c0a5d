// tests/train/test_shard_checkpoint.cpp: optimizer state saved per shard: any range of
// parameters reads back from the overlapping shard files of a layout of any rank count,
// and the layout record round-trips and is refused when damaged.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "io/json.h"
#include "temp_dir.h"
#include "train/shard_checkpoint.h"

namespace octet::train {
namespace {

TEST(ShardCheckpoint, AnyRangeReadsBackAcrossShardFiles) {
  octet::testing::TempDir dir;
  // 3 ranks with uneven shards (one empty) over 23 parameters; v = 1000 + i etc.
  const ShardLayout layout{{0, 9, 9, 23}, 23};
  std::vector<float> master(23), m(23), v(23);
  for (int i = 0; i < 23; ++i) {
    master[i] = 0.5f * i;
    m[i] = -1.0f * i;
    v[i] = 1000.0f + i;
  }
  for (int r = 0; r < layout.ranks(); ++r) {
    const int64_t b = layout.offsets[r], n = layout.offsets[r + 1] - b;
    auto view = [&](std::vector<float>& x) { return Tensor(x.data() + b, DType::f32, {n}); };
    write_optimizer_shard(dir.path().string() + "/" + optimizer_shard_file(r, 3), b, view(master),
                          view(m), view(v));
  }
  // Ranges as 1, 2 and 4 ranks would take them, and one across all three files.
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 23}, {0, 12}, {12, 23}, {6, 12}, {3, 21}}) {
    std::vector<float> gm(static_cast<size_t>(e - b)), gv(gm.size()), gmaster(gm.size());
    read_optimizer_range(
        dir.path().string(), layout, b, e, Tensor(gmaster.data(), DType::f32, {e - b}),
        Tensor(gm.data(), DType::f32, {e - b}), Tensor(gv.data(), DType::f32, {e - b}));
    for (int64_t i = b; i < e; ++i) {
      ASSERT_EQ(gmaster[i - b], master[i]) << "[" << b << ", " << e << ") at " << i;
      ASSERT_EQ(gm[i - b], m[i]) << "[" << b << ", " << e << ") at " << i;
      ASSERT_EQ(gv[i - b], v[i]) << "[" << b << ", " << e << ") at " << i;
    }
  }
  // An empty tensor is skipped.
  std::vector<float> only(5);
  read_optimizer_range(dir.path().string(), layout, 7, 12, Tensor(),
                       Tensor(only.data(), DType::f32, {5}), Tensor());
  EXPECT_EQ(only, (std::vector<float>{-7, -8, -9, -10, -11}));
  EXPECT_THROW(
      read_optimizer_range(dir.path().string(), layout, 20, 24, Tensor(), Tensor(), Tensor()),
      Error);
}

TEST(ShardCheckpoint, LayoutRoundTripsAndDamageIsRefused) {
  const ShardLayout layout{{0, 5, 11}, 11};
  EXPECT_EQ(shard_layout_from_json(shard_layout_to_json(layout), "ts.json"), layout);
  for (const char* bad : {R"({"ranks": 2, "offsets": [0, 5, 11], "parameters": 12})",
                          R"({"ranks": 3, "offsets": [0, 5, 11], "parameters": 11})",
                          R"({"ranks": 2, "offsets": [0, 12, 11], "parameters": 11})",
                          R"({"ranks": 2, "offsets": [1, 5, 11], "parameters": 11})"}) {
    try {
      shard_layout_from_json(parse_json(bad), "ts.json");
      FAIL() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ts.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace octet::train
