// dist/comm_mpi.cpp: dist::Comm over MPI's world communicator, for CPU tensors.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"

namespace octet::dist {
namespace {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  OCTET_FAIL("mpi", call, " failed: ", std::string(text, static_cast<size_t>(length)));
}

void check_cpu(const Tensor& t, const char* op) {
  OCTET_CHECK(t.device.is_cpu(), op, t.str(),
              ": the MPI communicator moves CPU tensors; CUDA tensors need the NCCL one");
}

int as_count(int64_t n, const char* op) {
  OCTET_CHECK(n <= INT_MAX, op, n, " elements exceed MPI's int counts; split the buffer");
  return static_cast<int>(n);
}

class MpiComm final : public Comm {
 public:
  explicit MpiComm(bool finalize) : finalize_(finalize) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // Errors come back as codes (check_mpi throws), not as MPI's own abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalize_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check_cpu(t, "all_reduce");
    OCTET_CHECK(t.dtype == DType::f32, "all_reduce", "f32 only, got ", t.str());
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.data, as_count(t.numel(), "all_reduce"), MPI_FLOAT,
                            op == ReduceOp::sum ? MPI_SUM : MPI_MAX, MPI_COMM_WORLD),
              "MPI_Allreduce");
  }

  void reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p) override {
    check_cpu(full, "reduce_scatter");
    check_cpu(shard, "reduce_scatter");
    OCTET_CHECK(p.ranks() == size_ && full.dtype == DType::f32 && shard.dtype == DType::f32 &&
                    full.numel() == p.total() && shard.numel() == p.count(rank_),
                "reduce_scatter", "expected f32 [", p.total(), "] and f32 [", p.count(rank_),
                "] over ", size_, " ranks, got ", full.str(), " and ", shard.str());
    counts_.assign(static_cast<size_t>(size_), 0);
    for (int r = 0; r < size_; ++r)
      counts_[static_cast<size_t>(r)] = as_count(p.count(r), "reduce_scatter");
    check_mpi(MPI_Reduce_scatter(full.data, shard.data, counts_.data(), MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD),
              "MPI_Reduce_scatter");
  }

  void all_gather(const Tensor& full, const Partition& p) override {
    check_cpu(full, "all_gather");
    OCTET_CHECK(p.ranks() == size_ && full.numel() == p.total(), "all_gather", "expected [",
                p.total(), "] over ", size_, " ranks, got ", full.str());
    // Bytes, so every dtype (f32 weights, FP8 codes) goes the same way.
    const int64_t width = static_cast<int64_t>(dtype_size(full.dtype));
    counts_.assign(static_cast<size_t>(size_), 0);
    displs_.assign(static_cast<size_t>(size_), 0);
    for (int r = 0; r < size_; ++r) {
      counts_[static_cast<size_t>(r)] = as_count(p.count(r) * width, "all_gather");
      displs_[static_cast<size_t>(r)] = as_count(p.begin(r) * width, "all_gather");
    }
    check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, full.data, counts_.data(),
                             displs_.data(), MPI_BYTE, MPI_COMM_WORLD),
              "MPI_Allgatherv");
  }

  void gather(const Tensor& t, const Partition& p, int root) override {
    check_cpu(t, "gather");
    const int64_t mine = rank_ == root ? p.total() : p.count(rank_);
    OCTET_CHECK(p.ranks() == size_ && t.numel() == mine, "gather", "expected [", mine, "] over ",
                size_, " ranks on rank ", rank_, " (root ", root, "), got ", t.str());
    const int64_t width = static_cast<int64_t>(dtype_size(t.dtype));
    if (rank_ != root) {
      check_mpi(MPI_Gatherv(t.data, as_count(mine * width, "gather"), MPI_BYTE, nullptr, nullptr,
                            nullptr, MPI_BYTE, root, MPI_COMM_WORLD),
                "MPI_Gatherv");
      return;
    }
    counts_.assign(static_cast<size_t>(size_), 0);
    displs_.assign(static_cast<size_t>(size_), 0);
    for (int r = 0; r < size_; ++r) {
      counts_[static_cast<size_t>(r)] = as_count(p.count(r) * width, "gather");
      displs_[static_cast<size_t>(r)] = as_count(p.begin(r) * width, "gather");
    }
    check_mpi(MPI_Gatherv(MPI_IN_PLACE, 0, MPI_BYTE, t.data, counts_.data(), displs_.data(),
                          MPI_BYTE, root, MPI_COMM_WORLD),
              "MPI_Gatherv");
  }

  // MPI_Alltoallv over bytes: the chunks are FP8 codes or f32, summed by the caller in
  // fp32 (an MPI_Op over FP8 bytes would have to round every partial sum to FP8).
  void all_to_all(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                  const std::vector<int64_t>& recv_at) override {
    Args& a = alltoall_args(send, send_at, recv, recv_at, blocking_);
    check_mpi(MPI_Alltoallv(send.data, a.counts.data(), a.displs.data(), MPI_BYTE, recv.data,
                            a.recv_counts.data(), a.recv_displs.data(), MPI_BYTE, MPI_COMM_WORLD),
              "MPI_Alltoallv");
  }

  void start_all_to_all(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                        const std::vector<int64_t>& recv_at) override {
    Args& a = alltoall_args(send, send_at, recv, recv_at, next_args());
    check_mpi(MPI_Ialltoallv(send.data, a.counts.data(), a.displs.data(), MPI_BYTE, recv.data,
                             a.recv_counts.data(), a.recv_displs.data(), MPI_BYTE, MPI_COMM_WORLD,
                             &requests_[pending_]),
              "MPI_Ialltoallv");
    started();
  }

  void start_reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p, int64_t lo,
                            int64_t hi) override {
    check_cpu(full, "reduce_scatter");
    check_cpu(shard, "reduce_scatter");
    OCTET_CHECK(p.ranks() == size_ && full.dtype == DType::f32 && shard.dtype == DType::f32 &&
                    (full.numel() == p.total() || full.numel() == hi - lo) &&
                    shard.numel() == p.count(rank_) && 0 <= lo && lo <= hi && hi <= p.total(),
                "reduce_scatter", "expected f32 [", p.total(), "] and f32 [", p.count(rank_),
                "] over ", size_, " ranks and a range within them, got ", full.str(), ", ",
                shard.str(), " and [", lo, ", ", hi, ")");
    std::vector<int>& counts = next_args().counts;
    counts.assign(static_cast<size_t>(size_), 0);
    for (int r = 0; r < size_; ++r) {
      const int64_t a = std::clamp(p.begin(r), lo, hi), b = std::clamp(p.end(r), lo, hi);
      counts[static_cast<size_t>(r)] = as_count(b - a, "reduce_scatter");
    }
    const int64_t mine = std::clamp(p.begin(rank_), lo, hi) - p.begin(rank_);
    const int64_t from = full.numel() == p.total() ? lo : 0;  // the whole buffer or a bucket
    check_mpi(MPI_Ireduce_scatter(static_cast<const float*>(full.data) + from,
                                  static_cast<float*>(shard.data) + mine, counts.data(), MPI_FLOAT,
                                  MPI_SUM, MPI_COMM_WORLD, &requests_[pending_]),
              "MPI_Ireduce_scatter");
    started();
  }

  void wait_started() override {
    check_mpi(MPI_Waitall(static_cast<int>(pending_), requests_.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall");
    pending_ = 0;
  }

  void wait_started_but(int keep) override {
    const size_t k = static_cast<size_t>(std::max(0, keep));
    if (pending_ <= k) return;
    const size_t done = pending_ - k;
    check_mpi(MPI_Waitall(static_cast<int>(done), requests_.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall");
    // The ones in flight move to the front with their arguments (swapped vectors: the arrays
    // MPI reads stay where they are).
    for (size_t i = done; i < pending_; ++i) {
      std::swap(requests_[i - done], requests_[i]);
      std::swap(pending_args_[i - done], pending_args_[i]);
    }
    pending_ = k;
  }

  void broadcast(const Tensor& t, int root) override {
    check_cpu(t, "broadcast");
    check_mpi(MPI_Bcast(t.data, as_count(static_cast<int64_t>(t.nbytes()), "broadcast"), MPI_BYTE,
                        root, MPI_COMM_WORLD),
              "MPI_Bcast");
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for the compiler
  }

 private:
  bool finalize_;
  int rank_ = 0, size_ = 1;
  std::vector<int> counts_, displs_;  // per call, kept so that a step allocates nothing
  // A call's counts and displacements (in bytes for all_to_all); a started call's live
  // until the wait, one per request (the pool keeps its capacity: after the first step
  // nothing is allocated).
  struct Args {
    std::vector<int> counts, displs, recv_counts, recv_displs;
  };
  Args blocking_;
  std::vector<Args> pending_args_;
  std::vector<MPI_Request> requests_;
  size_t pending_ = 0;

  Args& next_args() {
    if (pending_ == pending_args_.size()) {
      pending_args_.emplace_back();
      requests_.push_back(MPI_REQUEST_NULL);
    }
    return pending_args_[pending_];
  }
  // After a start: Open MPI moves a non-blocking collective on only inside MPI calls;
  // testing the started ones lets the earlier buckets progress while the backward goes on.
  void started() {
    ++pending_;
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(pending_), requests_.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall");
  }
  Args& alltoall_args(const Tensor& send, const std::vector<int64_t>& send_at, const Tensor& recv,
                      const std::vector<int64_t>& recv_at, Args& a) {
    check_cpu(send, "all_to_all");
    check_cpu(recv, "all_to_all");
    const auto n = static_cast<size_t>(size_) + 1;
    OCTET_CHECK(send.dtype == recv.dtype && send_at.size() == n && recv_at.size() == n &&
                    send_at.back() <= send.numel() && recv_at.back() <= recv.numel(),
                "all_to_all", "send ", send.str(), " and recv ", recv.str(), " with ", n,
                " offsets each over ", size_, " ranks");
    const int64_t width = static_cast<int64_t>(dtype_size(send.dtype));
    for (auto* v : {&a.counts, &a.displs, &a.recv_counts, &a.recv_displs})
      v->assign(static_cast<size_t>(size_), 0);
    for (size_t r = 0; r + 1 < n; ++r) {
      a.counts[r] = as_count((send_at[r + 1] - send_at[r]) * width, "all_to_all");
      a.displs[r] = as_count(send_at[r] * width, "all_to_all");
      a.recv_counts[r] = as_count((recv_at[r + 1] - recv_at[r]) * width, "all_to_all");
      a.recv_displs[r] = as_count(recv_at[r] * width, "all_to_all");
    }
    return a;
  }
};

}  // namespace

bool mpi_compiled() {
  return true;
}

std::shared_ptr<Comm> mpi_world() {
  static std::mutex mutex;
  static std::weak_ptr<Comm> world;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto existing = world.lock()) return existing;
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool finalize = false;
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    finalize = true;
  }
  auto comm = std::make_shared<MpiComm>(finalize);
  world = comm;
  return comm;
}

}  // namespace octet::dist
