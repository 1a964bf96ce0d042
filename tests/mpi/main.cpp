// Entry point of test_mpi (run by ctest as mpi_np2/3/4 under mpirun). Every rank runs
// every test on a Communicator over MPI_COMM_WORLD; only rank 0 prints gtest's output.
// The exit code is non-zero on every rank when any rank failed. A fatal failure (an
// exception or ASSERT that may leave peers waiting in a collective) aborts the job
// instead of hanging it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "braid/comm/backends/mpi.h"
#include "mpi/mpi_world.h"

namespace braid::test_mpi {
Communicator* g_world = nullptr;
}

namespace {

// Prints this rank's failures (other ranks have no result printer) and aborts on a
// fatal one.
class RankFailureListener : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailureListener(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    if (rank_ != 0)
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    if (r.fatally_failed()) {
      std::fprintf(stderr, "[rank %d] fatal failure: aborting the job so peers do not hang\n",
                   rank_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int failed = 0;
  {
    braid::comm::MpiRuntime mpi(&argc, &argv);
    // Every test also runs the desync check, so a correct program is shown to pass it.
    braid::comm::CommOptions options;
    options.debug_collectives = true;
    options.timeout_s = 300;
    auto world = mpi.world(options);
    braid::test_mpi::g_world = world.get();
    ::testing::InitGoogleTest(&argc, argv);
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (world->rank() != 0) delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailureListener(world->rank()));
    int mine = RUN_ALL_TESTS() != 0 ? 1 : 0;
    MPI_Allreduce(&mine, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (world->rank() == 0 && failed && !mine)
      std::fprintf(stderr, "test_mpi: failures on other ranks (see [rank R] lines)\n");
    braid::test_mpi::g_world = nullptr;
  }
  return failed;
}
