// dist/comm_nonccl.cpp: a build without NCCL (no CUDA, no nccl.h or no MPI to bootstrap it).
#include "core/error.h"
#include "dist/comm.h"

namespace octet::dist {

bool nccl_compiled() {
  return false;
}

std::shared_ptr<Comm> nccl_world(std::shared_ptr<Comm>) {
  OCTET_FAIL("dist",
             "octet was built without NCCL: data parallelism on CUDA tensors needs a "
             "CUDA build with nccl.h and MPI");
}

}  // namespace octet::dist
