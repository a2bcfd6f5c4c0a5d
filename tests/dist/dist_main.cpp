// tests/dist/dist_main.cpp: the main of octet_dist_tests, run by ctest as
// `mpiexec -np 2 octet_dist_tests`: MPI initialised before the tests, finalised after; a
// test body that throws on a rank aborts every rank (a failure, not a hang).
#include <gtest/gtest.h>

#include <cstdio>
#include <string_view>

#include "dist/comm.h"
#include "dist_testing.h"

namespace octet::dist::testing {

std::shared_ptr<Comm>& world() {
  static std::shared_ptr<Comm> comm;
  return comm;
}

namespace {

// A test body one rank leaves by an exception cannot end together: the other ranks wait in
// a collective it will not join. gtest has printed the exception by now; abort every rank
// so that ctest reports it at once rather than a timeout with no message.
class AbortOnException : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.fatally_failed() ||
        std::string_view(result.message()).find("thrown in the test body") ==
            std::string_view::npos) {
      return;
    }
    std::fprintf(stderr, "rank %d: an exception left the test; aborting every rank\n",
                 world()->rank());
    std::fflush(stdout);
    std::fflush(stderr);
    world()->abort(1);
  }
};

}  // namespace

}  // namespace octet::dist::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  octet::dist::testing::world() = octet::dist::mpi_world();
  // Appended after the default printer, which has printed the failure when this runs.
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new octet::dist::testing::AbortOnException);
  const int rc = RUN_ALL_TESTS();
  // Every rank's verdict: a test that failed on one rank fails the run on all.
  float failed = rc != 0 ? 1.0f : 0.0f;
  octet::dist::testing::world()->all_reduce(octet::Tensor(&failed, octet::DType::f32, {1}),
                                            octet::dist::ReduceOp::max);
  octet::dist::testing::world().reset();  // finalises MPI
  return failed != 0.0f ? 1 : 0;
}
