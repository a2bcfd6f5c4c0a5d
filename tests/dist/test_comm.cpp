// tests/dist/test_comm.cpp: dist::Comm's collectives over MPI (2 ranks in CI, any count
// works) and the single-process one, with values whose sums are exact in fp32.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "dist_testing.h"

namespace octet::dist {
namespace {

using testing::world;

Tensor f32(std::vector<float>& v) {
  return Tensor(v.data(), DType::f32, {static_cast<int64_t>(v.size())});
}

TEST(Partition, CutsIntoContiguousShardsOfCeilNOverRanks) {
  const Partition p(10, 4);
  EXPECT_EQ(p.ranks(), 4);
  EXPECT_EQ(p.total(), 10);
  const int64_t begins[] = {0, 3, 6, 9}, counts[] = {3, 3, 3, 1};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p.begin(r), begins[r]);
    EXPECT_EQ(p.count(r), counts[r]);
  }
  const Partition small(1, 3);  // more ranks than elements: empty shards at the end
  EXPECT_EQ(small.count(0), 1);
  EXPECT_EQ(small.count(1), 0);
  EXPECT_EQ(small.count(2), 0);
  EXPECT_THROW(Partition(5, 0), Error);
}

TEST(Comm, LaunchedUnderMpirunWithMoreThanOneRank) {
  Comm& c = *world();
  EXPECT_TRUE(launched_under_mpi());
  EXPECT_TRUE(mpi_compiled());
  EXPECT_EQ(c.backend(), "mpi");
  EXPECT_GE(c.size(), 2) << "run under mpiexec -np 2";
  EXPECT_EQ(launch().get(), world().get()) << "launch() returns the world already made";
}

TEST(Comm, AllReduceSumsAndMaxesEveryElement) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  std::vector<float> sum = {1.0f + r, -2.0f * r, 0.5f}, max = {static_cast<float>(r), -1.0f * r};
  c.all_reduce(f32(sum), ReduceOp::sum);
  c.all_reduce(f32(max), ReduceOp::max);
  // Small integers and halves: every partial sum is exact in fp32, so equality is exact.
  EXPECT_EQ(sum[0], n + n * (n - 1) / 2.0f);
  EXPECT_EQ(sum[1], -1.0f * n * (n - 1));
  EXPECT_EQ(sum[2], 0.5f * n);
  EXPECT_EQ(max[0], n - 1.0f);
  EXPECT_EQ(max[1], 0.0f);
}

TEST(Comm, ReduceScatterGivesEachRankTheSumOfItsShard) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  const Partition p(7, n);  // uneven: the last shard is shorter
  std::vector<float> full(7);
  for (int i = 0; i < 7; ++i) full[static_cast<size_t>(i)] = static_cast<float>(i * (r + 1));
  std::vector<float> shard(static_cast<size_t>(std::max<int64_t>(1, p.count(r))));
  c.reduce_scatter(f32(full), Tensor(shard.data(), DType::f32, {p.count(r)}), p);
  const float ranks_sum = n * (n + 1) / 2.0f;  // sum of (r + 1)
  for (int64_t i = 0; i < p.count(r); ++i)
    EXPECT_EQ(shard[static_cast<size_t>(i)], static_cast<float>(p.begin(r) + i) * ranks_sum);
  std::vector<float> wrong(3);
  EXPECT_THROW(c.reduce_scatter(f32(full), f32(wrong), Partition(8, n)), Error);
}

// Root (the last rank, not only 0) receives every part in its whole buffer; the others pass
// only their part and receive nothing.
TEST(Comm, GatherGivesRootEveryPart) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank(), root = n - 1;
  const Partition p(11, n);
  std::vector<uint16_t> t(static_cast<size_t>(r == root ? p.total() : p.count(r)), 0);
  const int64_t at = r == root ? p.begin(r) : 0;
  for (int64_t i = 0; i < p.count(r); ++i)
    t[static_cast<size_t>(at + i)] = static_cast<uint16_t>(1000 * r + p.begin(r) + i);
  const std::vector<uint16_t> before = t;
  c.gather(Tensor(t.data(), DType::bf16, {static_cast<int64_t>(t.size())}), p, root);
  if (r == root) {
    for (int q = 0; q < n; ++q)
      for (int64_t i = p.begin(q); i < p.end(q); ++i)
        EXPECT_EQ(t[static_cast<size_t>(i)], 1000 * q + i);
  } else {
    EXPECT_EQ(t, before);
  }
  std::vector<uint16_t> wrong(static_cast<size_t>(p.total() + 1));
  EXPECT_THROW(c.gather(Tensor(wrong.data(), DType::bf16, {p.total() + 1}), p, root), Error);
}

TEST(Comm, AllGatherCopiesEveryShardEverywhereInAnyDtype) {
  Comm& c = *world();
  const int n = c.size(), r = c.rank();
  const Partition p(9, n);
  std::vector<float> full(9, -1.0f);
  for (int64_t i = p.begin(r); i < p.end(r); ++i) full[static_cast<size_t>(i)] = 100.0f * r + i;
  c.all_gather(f32(full), p);
  for (int q = 0; q < n; ++q)
    for (int64_t i = p.begin(q); i < p.end(q); ++i)
      EXPECT_EQ(full[static_cast<size_t>(i)], 100.0f * q + i);
  // FP8 codes (one byte each): the partition counts elements, not bytes.
  std::vector<uint8_t> codes(5, 0);
  const Partition pc(5, n);
  for (int64_t i = pc.begin(r); i < pc.end(r); ++i)
    codes[static_cast<size_t>(i)] = static_cast<uint8_t>(0x40 + r);
  c.all_gather(Tensor(codes.data(), DType::e4m3, {5}), pc);
  for (int q = 0; q < n; ++q)
    for (int64_t i = pc.begin(q); i < pc.end(q); ++i)
      EXPECT_EQ(codes[static_cast<size_t>(i)], 0x40 + q);
}

TEST(Comm, BroadcastAndBarrier) {
  Comm& c = *world();
  std::vector<float> v = {static_cast<float>(c.rank()), 7.0f};
  c.broadcast(f32(v), c.size() - 1);
  EXPECT_EQ(v[0], c.size() - 1.0f);
  c.barrier();
}

TEST(Comm, MpiRefusesCudaTensors) {
  float x = 0;
  Tensor t(&x, DType::f32, {1}, Device::cuda(0));
  EXPECT_THROW(world()->all_reduce(t, ReduceOp::sum), Error);
}

TEST(Comm, SingleProcessIsTheIdentity) {
  const auto c = single_process();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> v = {3.0f, 4.0f}, shard(2);
  c->all_reduce(f32(v), ReduceOp::sum);
  EXPECT_EQ(v[0], 3.0f);
  c->reduce_scatter(f32(v), f32(shard), Partition(2, 1));
  EXPECT_EQ(shard, v);
}

}  // namespace
}  // namespace octet::dist
