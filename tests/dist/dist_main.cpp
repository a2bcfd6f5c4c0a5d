// tests/dist/dist_main.cpp: the main of octet_dist_tests, run by ctest as
// `mpiexec -np 2 octet_dist_tests`: MPI initialised before the tests, finalised after.
#include <gtest/gtest.h>

#include "dist/comm.h"
#include "dist_testing.h"

namespace octet::dist::testing {

std::shared_ptr<Comm>& world() {
  static std::shared_ptr<Comm> comm;
  return comm;
}

}  // namespace octet::dist::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  octet::dist::testing::world() = octet::dist::mpi_world();
  const int rc = RUN_ALL_TESTS();
  // Every rank's verdict: a test that failed on one rank fails the run on all.
  float failed = rc != 0 ? 1.0f : 0.0f;
  octet::dist::testing::world()->all_reduce(octet::Tensor(&failed, octet::DType::f32, {1}),
                                            octet::dist::ReduceOp::max);
  octet::dist::testing::world().reset();  // finalises MPI
  return failed != 0.0f ? 1 : 0;
}
