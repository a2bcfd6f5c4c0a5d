// dist/comm_nompi.cpp: a build without MPI: one process only.
#include "core/error.h"
#include "dist/comm.h"

namespace octet::dist {

bool mpi_compiled() {
  return false;
}

std::shared_ptr<Comm> mpi_world() {
  OCTET_FAIL("dist",
             "octet was built without MPI: install libopenmpi-dev (scripts/setup.sh) and "
             "rebuild to run on more than one rank");
}

}  // namespace octet::dist
