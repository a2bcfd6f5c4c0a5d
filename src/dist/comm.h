// dist/comm.h: the collectives data parallelism needs, behind one interface: a single
// process (no communication), MPI for CPU tensors (comm_mpi.cpp), and the partition of a
// flat buffer into one contiguous shard per rank. NCCL for CUDA tensors: comm_nccl.cpp.
// defines: ReduceOp, Partition, Comm, single_process, mpi_compiled, launched_under_mpi,
//          launch, mpi_world, nccl_compiled, nccl_world
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace octet::dist {

enum class ReduceOp { sum, max };

// A flat buffer of n elements cut into size() contiguous shards, rank r owning
// [begin(r), end(r)): ceil(n / ranks) elements each, the last ones shorter (or empty).
class Partition {
 public:
  Partition() = default;
  Partition(int64_t n, int ranks);
  // Shard r is [offsets[r], offsets[r + 1]): ranks + 1 non-decreasing offsets from 0.
  explicit Partition(std::vector<int64_t> offsets);
  int ranks() const { return static_cast<int>(offsets_.size()) - 1; }
  int64_t total() const { return offsets_.back(); }
  int64_t begin(int r) const { return offsets_[static_cast<size_t>(r)]; }
  int64_t end(int r) const { return offsets_[static_cast<size_t>(r) + 1]; }
  int64_t count(int r) const { return end(r) - begin(r); }
  friend bool operator==(const Partition&, const Partition&) = default;

 private:
  std::vector<int64_t> offsets_{0};
};

// One process's view of a group of ranks. Every collective is called by every rank in
// the same order with tensors of the same shape and dtype; tensors are contiguous.
// f32 and (reduction-free collectives only) any dtype, as bytes.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single", "mpi"

  // t (f32) becomes the element-wise sum or max of every rank's t.
  virtual void all_reduce(const Tensor& t, ReduceOp op) = 0;
  // full: f32 [p.total()] on every rank; shard: f32 [p.count(rank)], receives the sum over
  // ranks of full's elements [p.begin(rank), p.end(rank)).
  virtual void reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p) = 0;
  // In place: every rank's elements [p.begin(r), p.end(r)) of full (any dtype, p counting
  // elements) are copied into full on every other rank.
  virtual void all_gather(const Tensor& full, const Partition& p) = 0;
  // In place on root: every other rank's t (any dtype) is its part [p.count(rank)], and root's
  // t [p.total()] receives each rank r's part at [p.begin(r), p.end(r)) (its own is in place):
  // what only root needs whole (a checkpoint's model.safetensors), without the others
  // holding it whole.
  virtual void gather(const Tensor& t, const Partition& p, int root) = 0;
  // Every rank sends to every rank q (itself included) send's elements [send_at[q],
  // send_at[q + 1]) and receives into recv's elements [recv_at[q], recv_at[q + 1]) what
  // rank q sent it. Any dtype, moved as bytes; send_at and recv_at hold size() + 1
  // offsets, in elements. The exchange under a reduce-scatter that sums locally in fp32
  // what travelled in FP8 (dist/fp8_reduce.h).
  virtual void all_to_all(const Tensor& send, const std::vector<int64_t>& send_at,
                          const Tensor& recv, const std::vector<int64_t>& recv_at) = 0;
  // Non-blocking reduce-scatter of the elements [lo, hi) of full (f32 [p.total()], or f32
  // [hi - lo] holding just those elements: a bucket): rank r's
  // shard (f32 [p.count(r)]) receives, at its offsets of [lo, hi) ∩ [p.begin(r), p.end(r)),
  // the sum over ranks; neither tensor may be touched until wait_started(). Started
  // as the backward produces each bucket of gradients (ZeRO 2), so that the exchange
  // overlaps the rest of the backward: MPI_Ireduce_scatter, or NCCL on a second stream.
  virtual void start_reduce_scatter(const Tensor& full, const Tensor& shard, const Partition& p,
                                    int64_t lo, int64_t hi) = 0;
  // Non-blocking all_to_all: the tensors (and send_at, recv_at) stay untouched until
  // wait_started() (ZeRO 2's FP8 buckets).
  virtual void start_all_to_all(const Tensor& send, const std::vector<int64_t>& send_at,
                                const Tensor& recv, const std::vector<int64_t>& recv_at) = 0;
  // Waits for every started collective (NCCL: octet's stream waits for them).
  virtual void wait_started() = 0;
  // Waits for every started collective but the `keep` (0 to 3) started last: ZeRO 2 writes
  // a bucket buffer again once the reduce-scatter before the last one has read it.
  virtual void wait_started_but(int keep) = 0;
  // t (any dtype) on every rank becomes root's t.
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the group with `code` (MPI_Abort): what an error on one rank does.
  [[noreturn]] virtual void abort(int code) = 0;
};

// One rank, no communication: every collective is the identity.
std::shared_ptr<Comm> single_process();

// Whether this build has MPI (CMake found it).
bool mpi_compiled();
// Whether a launcher (mpirun, srun with PMI/PMIx) started this process.
bool launched_under_mpi();
// The world of ranks this process was launched into: MPI's world communicator (MPI
// initialised on first use, finalised when the last reference goes) when launched under
// mpirun, else single_process(). Throws when launched under mpirun without an MPI build.
std::shared_ptr<Comm> launch();
// MPI's world communicator; initialises MPI when nothing has (tests call it directly).
std::shared_ptr<Comm> mpi_world();
// Whether this build has NCCL (CUDA, nccl.h and MPI found).
bool nccl_compiled();
// An NCCL communicator over bootstrap's ranks (its ncclUniqueId broadcast over bootstrap),
// for CUDA tensors on the current device, queued on octet's CUDA stream.
std::shared_ptr<Comm> nccl_world(std::shared_ptr<Comm> bootstrap);
// launch(), and on a CUDA device with more than one rank the NCCL communicator over it.
std::shared_ptr<Comm> launch(Device device);

}  // namespace octet::dist
