// Local backend behaviour beyond collective results: failure propagation (no rank may
// hang when another throws), message size checks, config errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using comm::Communicator;

// One rank throws while the others wait in all_reduce: run_local must return by
// rethrowing the original failure, and the peers see "aborted: rank R failed".
TEST(CollectiveLocalFailure, ThrowingRankAbortsPeersInAllReduce) {
  for (int n : {2, 3, 8}) {
    const int bad = n - 1;
    std::mutex mu;
    std::vector<std::string> peer_errors;
    try {
      comm::run_local(n, [&](Communicator& c) {
        std::vector<float> v(1 << 16, 1.f);
        if (c.rank() == bad) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          throw Error("boom on purpose");
        }
        try {
          for (;;) c.all_reduce(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::sum);
        } catch (const Error& e) {
          std::lock_guard<std::mutex> lk(mu);
          peer_errors.push_back(e.what());
          throw;
        }
      });
      FAIL() << "run_local returned normally";
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("rank " + std::to_string(bad)), std::string::npos) << w;
      EXPECT_NE(w.find("boom on purpose"), std::string::npos) << w;
      EXPECT_EQ(w.find("aborted"), std::string::npos) << "secondary failure reported: " << w;
    }
    ASSERT_EQ(peer_errors.size(), static_cast<size_t>(n - 1));
    for (const auto& pe : peer_errors)
      EXPECT_EQ(pe.rfind("aborted: rank " + std::to_string(bad) + " failed: boom on purpose", 0), 0u)
          << pe;
  }
}

// Peers blocked in wait() on async collectives, and inside a sub-group, are released.
TEST(CollectiveLocalFailure, AbortReleasesAsyncWaitersAndSubGroups) {
  EXPECT_THROW(comm::run_local(4,
                               [](Communicator& c) {
                                 auto sub = c.split(c.rank() % 2, c.rank());
                                 std::vector<float> v(1000, 1.f);
                                 if (c.rank() == 2) throw Error("rank two gives up");
                                 auto w = c.all_reduce_async(v.data(), v.data(), v.size(),
                                                             DType::f32, comm::ReduceOp::sum);
                                 auto w2 = sub->all_reduce_async(v.data(), v.data(), v.size(),
                                                                 DType::f32, comm::ReduceOp::sum);
                                 w2->wait();
                                 w->wait();
                               }),
               Error);
}

TEST(CollectiveLocalFailure, ReceiveSizeMismatchThrows) {
  try {
    comm::run_local(2, [](Communicator& c) {
      int buf[4] = {};
      if (c.rank() == 0)
        c.send(buf, 8, 1, 0);
      else
        c.recv(buf, 16, 0, 0);
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("size mismatch"), std::string::npos) << e.what();
  }
}

TEST(CollectiveLocalFailure, BadWorldSize) {
  EXPECT_THROW(comm::run_local(0, [](Communicator&) {}), ConfigError);
}

TEST(CollectiveLocal, ParseNames) {
  EXPECT_EQ(comm::parse_algorithm("ring"), comm::Algorithm::ring);
  EXPECT_EQ(comm::parse_algorithm("native"), comm::Algorithm::native);
  EXPECT_THROW(comm::parse_algorithm("tree"), ConfigError);
  EXPECT_EQ(comm::parse_reduce_op("avg"), comm::ReduceOp::avg);
  EXPECT_STREQ(comm::reduce_op_name(comm::ReduceOp::max), "max");
  EXPECT_THROW(comm::parse_reduce_op("prod"), ConfigError);
}

}  // namespace
}  // namespace braid
