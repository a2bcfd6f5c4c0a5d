// dist/comm_nccl.cpp: dist::Comm over NCCL for CUDA tensors, its ncclUniqueId broadcast
// over the MPI communicator that launched the ranks. Collectives are queued on octet's
// CUDA stream (nothing waits for them but barrier()); uneven shards are a group of
// per-rank reduces or broadcasts, as NCCL's reduce-scatter and all-gather take equal counts.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

#include "core/device.h"
#include "core/error.h"
#include "dist/comm.h"

namespace octet::dist {
namespace {

void check_nccl(ncclResult_t rc, const char* call) {
  OCTET_CHECK(rc == ncclSuccess, "nccl", call, " failed: ", ncclGetErrorString(rc));
}

void check_cuda(cudaError_t rc, const char* call) {
  OCTET_CHECK(rc == cudaSuccess, "nccl", call, ": ", cudaGetErrorString(rc));
}

void check_cuda_tensor(const Tensor& t, const char* op) {
  OCTET_CHECK(t.device.is_cuda(), op, t.str(),
              ": the NCCL communicator moves CUDA tensors; CPU tensors go over MPI");
}

class NcclComm final : public Comm {
 public:
  explicit NcclComm(std::shared_ptr<Comm> bootstrap) : bootstrap_(std::move(bootstrap)) {
    ncclUniqueId id{};
    if (bootstrap_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bootstrap_->broadcast(Tensor(&id, DType::u8, {static_cast<int64_t>(sizeof id)}), 0);
    check_nccl(ncclCommInitRank(&comm_, bootstrap_->size(), id, bootstrap_->rank()),
               "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    for (cudaEvent_t& e : marks_)
      check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclComm() override {
    if (comm_) ncclCommDestroy(comm_);
    if (side_) {
      cudaEventDestroy(ready_);
      cudaEventDestroy(done_);
      for (cudaEvent_t e : marks_) cudaEventDestroy(e);
      cudaStreamDestroy(side_);
    }
  }
  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  std::string backend() const override { return "nccl"; }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check_cuda_tensor(t, "all_reduce");
    OCTET_CHECK(t.dtype == DType::f32, "all_reduce", "f32 only, got ", t.str());
    check_nccl(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), ncclFloat32,
                             op == ReduceOp::sum ? ncclSum : ncclMax, comm_, stream()),
               "ncclAllReduce");
  }

  void reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p) override {
    check_cuda_tensor(full, "reduce_scatter");
    check_cuda_tensor(shard, "reduce_scatter");
    OCTET_CHECK(p.ranks() == size() && full.dtype == DType::f32 && shard.dtype == DType::f32 &&
                    full.numel() == p.total() && shard.numel() == p.count(rank()),
                "reduce_scatter", "expected f32 [", p.total(), "] and f32 [", p.count(rank()),
                "] over ", size(), " ranks, got ", full.str(), " and ", shard.str());
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      if (p.count(r) == 0) continue;
      check_nccl(ncclReduce(static_cast<const float*>(full.data) + p.begin(r),
                            r == rank() ? shard.data : nullptr, static_cast<size_t>(p.count(r)),
                            ncclFloat32, ncclSum, r, comm_, stream()),
                 "ncclReduce");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  void all_gather(const Tensor& full, const Partition& p) override {
    check_cuda_tensor(full, "all_gather");
    OCTET_CHECK(p.ranks() == size() && full.numel() == p.total(), "all_gather", "expected [",
                p.total(), "] over ", size(), " ranks, got ", full.str());
    const size_t width = dtype_size(full.dtype);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      if (p.count(r) == 0) continue;
      auto* at = static_cast<char*>(full.data) + static_cast<size_t>(p.begin(r)) * width;
      check_nccl(ncclBroadcast(at, at, static_cast<size_t>(p.count(r)) * width, ncclUint8, r, comm_,
                               stream()),
                 "ncclBroadcast");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  // A group of ncclSend to root and, on root, one ncclRecv per other rank.
  void gather(const Tensor& t, const Partition& p, int root) override {
    check_cuda_tensor(t, "gather");
    const int me = rank();
    const int64_t mine = me == root ? p.total() : p.count(me);
    OCTET_CHECK(p.ranks() == size() && t.numel() == mine, "gather", "expected [", mine, "] over ",
                size(), " ranks on rank ", me, " (root ", root, "), got ", t.str());
    const size_t width = dtype_size(t.dtype);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    if (me != root && mine > 0) {
      check_nccl(
          ncclSend(t.data, static_cast<size_t>(mine) * width, ncclUint8, root, comm_, stream()),
          "ncclSend");
    }
    for (int r = 0; me == root && r < size(); ++r) {
      if (r == root || p.count(r) == 0) continue;
      check_nccl(ncclRecv(static_cast<char*>(t.data) + static_cast<size_t>(p.begin(r)) * width,
                          static_cast<size_t>(p.count(r)) * width, ncclUint8, r, comm_, stream()),
                 "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  // One group of ncclSend/ncclRecv per peer (itself included), bytes: NCCL's own FP8 sum
  // would round every partial sum to FP8; the caller sums the chunks in fp32.
  void all_to_all(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                  const std::vector<int64_t>& recv_at) override {
    exchange(send, send_at, recv, recv_at, stream());
  }

  // The same on the second stream, after octet's stream has produced send (an event).
  void start_all_to_all(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                        const std::vector<int64_t>& recv_at) override {
    check_cuda(cudaEventRecord(ready_, stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(side_, ready_, 0), "cudaStreamWaitEvent");
    exchange(send, send_at, recv, recv_at, side_);
    started();
  }

  // The bucket's per-rank reduces on a second stream, once octet's stream has produced
  // the gradients (an event); wait_started() makes octet's stream wait for them.
  void start_reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p, int64_t lo,
                            int64_t hi) override {
    check_cuda_tensor(full, "reduce_scatter");
    check_cuda_tensor(shard, "reduce_scatter");
    OCTET_CHECK(p.ranks() == size() && full.dtype == DType::f32 && shard.dtype == DType::f32 &&
                    (full.numel() == p.total() || full.numel() == hi - lo) &&
                    shard.numel() == p.count(rank()) && 0 <= lo && lo <= hi && hi <= p.total(),
                "reduce_scatter", "expected f32 [", p.total(), "] and f32 [", p.count(rank()),
                "] over ", size(), " ranks and a range within them, got ", full.str(), ", ",
                shard.str(), " and [", lo, ", ", hi, ")");
    check_cuda(cudaEventRecord(ready_, stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(side_, ready_, 0), "cudaStreamWaitEvent");
    const int64_t from = full.numel() == p.total() ? 0 : lo;  // the whole buffer or a bucket
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      const int64_t a = std::clamp(p.begin(r), lo, hi), b = std::clamp(p.end(r), lo, hi);
      if (b == a) continue;
      check_nccl(
          ncclReduce(static_cast<const float*>(full.data) + (a - from),
                     r == rank() ? static_cast<float*>(shard.data) + (a - p.begin(r)) : nullptr,
                     static_cast<size_t>(b - a), ncclFloat32, ncclSum, r, comm_, side_),
          "ncclReduce");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    started();
  }

  void wait_started() override {
    if (!pending_) return;
    check_cuda(cudaEventRecord(done_, side_), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream(), done_, 0), "cudaStreamWaitEvent");
    pending_ = false;
  }

  // The side stream runs the started collectives in order: octet's stream waits for the
  // mark recorded after the one `keep` before the last.
  void wait_started_but(int keep) override {
    OCTET_CHECK(0 <= keep && keep < kMarks, "wait_started_but", "keeps 0 to ", kMarks - 1,
                " collectives in flight, not ", keep);
    if (started_count_ <= keep) return;
    const int64_t last_done = started_count_ - keep - 1;
    check_cuda(cudaStreamWaitEvent(stream(), marks_[static_cast<size_t>(last_done % kMarks)], 0),
               "cudaStreamWaitEvent");
  }

  void broadcast(const Tensor& t, int root) override {
    if (t.device.is_cpu()) return bootstrap_->broadcast(t, root);
    check_nccl(ncclBroadcast(t.data, t.data, t.nbytes(), ncclUint8, root, comm_, stream()),
               "ncclBroadcast");
  }

  void barrier() override {
    const cudaError_t rc = cudaStreamSynchronize(stream());
    OCTET_CHECK(rc == cudaSuccess, "nccl", "cudaStreamSynchronize: ", cudaGetErrorString(rc));
    bootstrap_->barrier();
  }

  [[noreturn]] void abort(int code) override {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    bootstrap_->abort(code);
    std::_Exit(code);  // not reached: the bootstrap's abort ends the process
  }

 private:
  static cudaStream_t stream() { return static_cast<cudaStream_t>(cuda_stream()); }
  void started() {
    pending_ = true;
    check_cuda(cudaEventRecord(marks_[static_cast<size_t>(started_count_ % kMarks)], side_),
               "cudaEventRecord");
    ++started_count_;
  }
  void exchange(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                const std::vector<int64_t>& recv_at, cudaStream_t on) {
    check_cuda_tensor(send, "all_to_all");
    check_cuda_tensor(recv, "all_to_all");
    const auto n = static_cast<size_t>(size()) + 1;
    OCTET_CHECK(send.dtype == recv.dtype && send_at.size() == n && recv_at.size() == n &&
                    send_at.back() <= send.numel() && recv_at.back() <= recv.numel(),
                "all_to_all", "send ", send.str(), " and recv ", recv.str(), " with ", n,
                " offsets each over ", size(), " ranks");
    const size_t width = dtype_size(send.dtype);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      const auto q = static_cast<size_t>(r);
      if (send_at[q + 1] > send_at[q]) {
        check_nccl(ncclSend(static_cast<const char*>(send.data) + send_at[q] * width,
                            static_cast<size_t>(send_at[q + 1] - send_at[q]) * width, ncclUint8, r,
                            comm_, on),
                   "ncclSend");
      }
      if (recv_at[q + 1] > recv_at[q]) {
        check_nccl(ncclRecv(static_cast<char*>(recv.data) + recv_at[q] * width,
                            static_cast<size_t>(recv_at[q + 1] - recv_at[q]) * width, ncclUint8, r,
                            comm_, on),
                   "ncclRecv");
      }
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }
  std::shared_ptr<Comm> bootstrap_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t side_ = nullptr;  // start_reduce_scatter's stream
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool pending_ = false;
  // A mark after each started collective, the last kMarks kept (wait_started_but()).
  static constexpr int kMarks = 4;
  std::array<cudaEvent_t, kMarks> marks_{};
  int64_t started_count_ = 0;
};

}  // namespace

bool nccl_compiled() {
  return true;
}

std::shared_ptr<Comm> nccl_world(std::shared_ptr<Comm> bootstrap) {
  return std::make_shared<NcclComm>(std::move(bootstrap));
}

}  // namespace octet::dist
