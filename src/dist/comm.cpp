// dist/comm.cpp: the partition, the single-process Comm and the launch detection (the MPI
// implementation is in comm_mpi.cpp, or comm_nompi.cpp for a build without MPI).
#include "dist/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/buffer.h"
#include "core/error.h"

namespace octet::dist {
namespace {

class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_reduce(const Tensor&, ReduceOp) override {}
  void reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p) override {
    OCTET_CHECK(full.dtype == DType::f32 && shard.dtype == DType::f32 &&
                    full.numel() == p.total() && shard.numel() == p.count(0),
                "reduce_scatter", "expected f32 [", p.total(), "] and f32 [", p.count(0), "], got ",
                full.str(), " and ", shard.str());
    copy_bytes(shard.data, shard.device, full.data, full.device, shard.nbytes());
  }
  void all_gather(const Tensor&, const Partition&) override {}
  void start_reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p, int64_t lo,
                            int64_t hi) override {
    OCTET_CHECK(full.dtype == DType::f32 && shard.dtype == DType::f32 &&
                    (full.numel() == p.total() || full.numel() == hi - lo) &&
                    shard.numel() == p.count(0) && 0 <= lo && lo <= hi && hi <= p.total(),
                "reduce_scatter", "expected f32 [", p.total(), "] and f32 [", p.count(0),
                "] and a range within them, got ", full.str(), ", ", shard.str(), " and [", lo,
                ", ", hi, ")");
    copy_bytes(static_cast<float*>(shard.data) + lo, shard.device,
               static_cast<const float*>(full.data) + (full.numel() == p.total() ? lo : 0),
               full.device, static_cast<size_t>(hi - lo) * 4);
  }
  void start_all_to_all(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                        const std::vector<int64_t>& recv_at) override {
    all_to_all(send, send_at, recv, recv_at);
  }
  void gather(const Tensor& t, const Partition& p, int) override {
    OCTET_CHECK(t.numel() == p.total(), "gather", "one rank: expected [", p.total(), "], got ",
                t.str());
  }
  void wait_started() override {}
  void wait_started_but(int) override {}
  void all_to_all(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                  const std::vector<int64_t>& recv_at) override {
    OCTET_CHECK(send.dtype == recv.dtype && send_at.size() == 2 && recv_at.size() == 2 &&
                    send_at[1] - send_at[0] == recv_at[1] - recv_at[0] &&
                    send_at[1] <= send.numel() && recv_at[1] <= recv.numel(),
                "all_to_all", "one rank: send ", send.str(), " and recv ", recv.str(),
                " need one chunk of equal length");
    const size_t width = dtype_size(send.dtype);
    copy_bytes(static_cast<char*>(recv.data) + recv_at[0] * width, recv.device,
               static_cast<const char*>(send.data) + send_at[0] * width, send.device,
               static_cast<size_t>(send_at[1] - send_at[0]) * width);
  }
  void broadcast(const Tensor&, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

}  // namespace

Partition::Partition(int64_t n, int ranks) {
  OCTET_CHECK(n >= 0 && ranks >= 1, "partition", n, " elements over ", ranks, " ranks");
  const int64_t chunk = (n + ranks - 1) / ranks;
  offsets_.assign(static_cast<size_t>(ranks) + 1, 0);
  for (int r = 1; r <= ranks; ++r) offsets_[static_cast<size_t>(r)] = std::min(n, r * chunk);
}

Partition::Partition(std::vector<int64_t> offsets) {
  bool ok = offsets.size() >= 2 && offsets.front() == 0;
  for (size_t i = 1; ok && i < offsets.size(); ++i) ok = offsets[i - 1] <= offsets[i];
  OCTET_CHECK(ok, "partition", "the offsets of a partition start at 0 and never decrease (",
              offsets.size(), " given)");
  offsets_ = std::move(offsets);
}

std::shared_ptr<Comm> single_process() {
  return std::make_shared<SingleComm>();
}

bool launched_under_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

std::shared_ptr<Comm> launch() {
  if (!launched_under_mpi()) return single_process();
  OCTET_CHECK(mpi_compiled(), "dist",
              "this process was started by an MPI launcher, but octet was built without MPI: "
              "install libopenmpi-dev (scripts/setup.sh) and rebuild");
  return mpi_world();
}

std::shared_ptr<Comm> launch(Device device) {
  std::shared_ptr<Comm> world = launch();
  if (world->size() == 1 || device.is_cpu()) return world;
  return nccl_world(std::move(world));
}

}  // namespace octet::dist
