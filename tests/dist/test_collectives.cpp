// Collectives on the local backend (ranks as threads), world sizes 1..8. The bodies
// live in tests/common/collective_cases.h and also run under mpirun (tests/mpi).
#include <gtest/gtest.h>

#include "braid/comm/backends/local.h"
#include "common/collective_cases.h"

namespace braid {
namespace {

using comm::Communicator;
namespace tc = test_cases;

class CollectiveLocal : public ::testing::TestWithParam<int> {
 protected:
  void run(void (*body)(Communicator&)) { comm::run_local(GetParam(), body); }
};

TEST_P(CollectiveLocal, AllReduce) { run(tc::all_reduce_suite); }
TEST_P(CollectiveLocal, AllReduceLarge) { run(tc::all_reduce_large); }
TEST_P(CollectiveLocal, AllGather) { run(tc::all_gather_suite); }
TEST_P(CollectiveLocal, ReduceScatter) { run(tc::reduce_scatter_suite); }
TEST_P(CollectiveLocal, AllToAll) { run(tc::all_to_all_suite); }
TEST_P(CollectiveLocal, Broadcast) { run(tc::broadcast_suite); }
TEST_P(CollectiveLocal, Barrier) { run(tc::barrier_suite); }
TEST_P(CollectiveLocal, PointToPoint) { run(tc::p2p_suite); }
TEST_P(CollectiveLocal, Async) { run(tc::async_suite); }
TEST_P(CollectiveLocal, Split) { run(tc::split_suite); }
TEST_P(CollectiveLocal, BytesAccounting) { run(tc::bytes_suite); }
TEST_P(CollectiveLocal, SharedBuffers) { run(tc::shared_buffer_suite); }
TEST_P(CollectiveLocal, SharedBufferMismatch) { run(tc::shared_mismatch_suite); }
TEST_P(CollectiveLocal, SharedAllocTraced) { run(tc::shared_alloc_traced); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectiveLocal, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "np" + std::to_string(i.param);
                         });

TEST(CollectiveLocalExamples, WorkedExamples) { comm::run_local(2, tc::worked_examples); }

}  // namespace
}  // namespace braid
