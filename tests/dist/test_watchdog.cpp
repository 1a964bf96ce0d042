// The watchdog, flight recorder and desync check with ranks as threads: a rank that
// never reaches an operation is named within the deadline, the record says what each
// rank did, mismatched collectives fail naming both calls, and a dropped receive never
// takes a message into a freed buffer.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/comm/backends/local.h"
#include "braid/comm/comm_base.h"
#include "braid/comm/work.h"
#include "braid/comm/flight_recorder.h"
#include "braid/core/error.h"
#include "common/fault_cases.h"

namespace braid {
namespace {

using comm::Communicator;
using Clock = std::chrono::steady_clock;

comm::CommOptions short_timeout(double s = 1.0) {
  comm::CommOptions o;
  o.timeout_s = s;
  return o;
}

// Runs fn on n ranks, expects the job to fail, returns the message and the seconds it took.
std::pair<std::string, double> failing_run(int n, const std::function<void(Communicator&)>& fn,
                                           const comm::CommOptions& o) {
  const auto t0 = Clock::now();
  try {
    comm::run_local(n, fn, o);
  } catch (const Error& e) {
    return {e.what(), std::chrono::duration<double>(Clock::now() - t0).count()};
  }
  ADD_FAILURE() << "the job did not fail";
  return {"", 0};
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Watchdog, DroppedReceiveIsWithdrawn) {
  for (int n : {2, 3}) comm::run_local(n, test_cases::dropped_receive_is_withdrawn, short_timeout(20));
}

// A rank that sleeps outside any communication call while the others wait in a
// collective is named as never having reached it, with what it last did.
TEST(Watchdog, RankThatNeverArrivesIsNamed) {
  const int n = 4, late = 2;
  auto [msg, secs] = failing_run(n, [&](Communicator& c) {
    float x = 1;
    c.all_reduce(&x, &x, 1, DType::f32, comm::ReduceOp::sum);  // #0, everyone
    if (c.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    std::vector<float> v(1000, 1.f);
    c.all_reduce(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::sum);  // #1
  }, short_timeout(1.0));
  EXPECT_TRUE(has(msg, "comm timeout: all_reduce #1 (1000 x f32, sum) on world ranks [0 1 2 3]")) << msg;
  EXPECT_TRUE(has(msg, "Never reached it: rank 2 (rank 2: called 1 collectives on it, not in a "
                       "communication call (last: all_reduce #0")) << msg;
  EXPECT_TRUE(has(msg, "Waited in it: rank 0")) << msg;
  EXPECT_TRUE(has(msg, "rank 0: comm timeout")) << "the lowest waiting rank reports: " << msg;
  EXPECT_LT(secs, 2.5 + 1.0) << "reported after the late rank woke up, not at the deadline";
}

// A receive whose sender never sends names the sender and what it is doing.
TEST(Watchdog, PointToPointTimeoutNamesThePeer) {
  auto [msg, secs] = failing_run(3, [&](Communicator& c) {
    std::vector<char> buf(256);
    if (c.rank() == 1) c.recv(buf.data(), buf.size(), 0, 5);
    if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  }, short_timeout(0.5));
  EXPECT_TRUE(has(msg, "rank 1: comm timeout: recv #0 (256 bytes from rank 0, tag 5)")) << msg;
  EXPECT_TRUE(has(msg, "Rank 0 is not in a communication call")) << msg;
}

// Work::wait on a non-blocking receive has the same deadline; a rank blocked in a
// collective of a sub-group is described as such.
TEST(Watchdog, WaitOnIrecvTimesOutAndPeerActivityIsReported) {
  auto [msg, secs] = failing_run(4, [&](Communicator& c) {
    auto pair = c.split(c.rank() / 2, c.rank());  // {0,1}, {2,3}
    std::vector<char> buf(64);
    if (c.rank() == 0) c.irecv(buf.data(), buf.size(), 2, 9)->wait();
    if (c.rank() == 2) {
      float x = 0;
      pair->all_reduce(&x, &x, 1, DType::f32, comm::ReduceOp::sum);  // rank 3 never joins
    }
    if (c.rank() == 1 || c.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  }, short_timeout(1.0));
  // Rank 2 (waiting on rank 3, which is not in a call) reports; rank 0 sees its peer
  // blocked and leaves the report to it.
  EXPECT_TRUE(has(msg, "rank 2: comm timeout: all_reduce #0 (1 x f32, sum) on world ranks [2 3]")) << msg;
  EXPECT_TRUE(has(msg, "Never reached it: rank 3")) << msg;
}

// A loop polling test() (how the asynchronous parameter server waits for pushes) is
// a wait too: its deadline counts from the first poll and the poll throws.
TEST(Watchdog, PollingLoopTimesOut) {
  auto [msg, secs] = failing_run(3, [&](Communicator& c) {
    char b = 0;
    if (c.rank() == 0) {
      auto w = c.irecv(&b, 1, 2, 3);
      while (!w->test()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (c.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  }, short_timeout(1.0));
  EXPECT_TRUE(has(msg, "rank 0: comm timeout: irecv #0 (1 bytes from rank 2, tag 3)")) << msg;
  EXPECT_TRUE(has(msg, "Rank 2 is not in a communication call")) << msg;
}

TEST(Watchdog, AsyncCollectiveTimesOut) {
  auto [msg, secs] = failing_run(3, [&](Communicator& c) {
    std::vector<float> v(4096, 1.f);
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    c.all_reduce_async(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::sum)->wait();
  }, short_timeout(1.0));
  EXPECT_TRUE(has(msg, "comm timeout: all_reduce #0 (4096 x f32, sum)")) << msg;
  EXPECT_TRUE(has(msg, "Never reached it: rank 1")) << msg;
}

// Zero-copy collectives wait on shared memory, not on the transport: the deadline
// still ends the wait and names the rank that never came; the others were in it.
TEST(Watchdog, ZeroCopyRankThatNeverArrivesIsNamed) {
  const int late = 1;
  auto [msg, secs] = failing_run(3, [&](Communicator& c) {
    comm::SharedBuffer b = c.alloc_shared(4096 * 4);
    c.all_reduce(b.data(), b.data(), 4096, DType::f32, comm::ReduceOp::sum);  // #1, everyone
    if (c.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    c.all_reduce(b.data(), b.data(), 4096, DType::f32, comm::ReduceOp::sum);  // #2
  }, short_timeout(1.0));
  EXPECT_TRUE(has(msg, "comm timeout: all_reduce #2 (4096 x f32, sum)")) << msg;
  EXPECT_TRUE(has(msg, "Never reached it: rank 1")) << msg;
  EXPECT_TRUE(has(msg, "Waited in it: rank 0")) << msg;
  EXPECT_LT(secs, 2.5 + 1.0) << "reported after the late rank woke up, not at the deadline";
}

// A rank that fails outside communication ends its peers' zero-copy wait at once
// (the job's abort), long before the deadline.
TEST(Watchdog, ZeroCopyWaitEndsWhenAPeerFails) {
  auto [msg, secs] = failing_run(3, [&](Communicator& c) {
    comm::SharedBuffer b = c.alloc_shared(4096);
    if (c.rank() == 2) throw Error("rank 2 gave up");
    c.all_gather(b.as<float>() + c.rank() * 8, b.data(), 8, DType::f32);
  }, short_timeout(60.0));
  EXPECT_TRUE(has(msg, "rank 2 gave up")) << msg;
  EXPECT_LT(secs, 10.0) << "the peers waited for the deadline";
}

// A label set by the caller (a gradient engine's bucket) names the operation in the
// report, and only the next collective carries it.
TEST(Watchdog, TimeoutReportCarriesTheCallersLabel) {
  auto [msg, secs] = failing_run(2, [&](Communicator& c) {
    std::vector<float> v(256, 1.f);
    c.all_reduce(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::sum);
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    c.set_next_label("bucket 7");
    c.all_reduce_async(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::sum)->wait();
  }, short_timeout(1.0));
  EXPECT_TRUE(has(msg, "all_reduce #1 (256 x f32, sum) [bucket 7]")) << msg;
  EXPECT_FALSE(has(msg, "#0 (256 x f32, sum) [")) << msg;
}

// The record written at a timeout lists the last operations of every group with
// their sequence numbers and states.
TEST(Watchdog, FlightRecordFileDescribesTheOps) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("braid_flight_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  auto o = short_timeout(1.0);
  o.record_dir = dir.string();
  auto [msg, secs] = failing_run(2, [&](Communicator& c) {
    std::vector<float> v(8, 1.f);
    for (int i = 0; i < 3; ++i) c.all_reduce(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::max);
    c.broadcast(v.data(), 8, DType::f32, 1);
    if (c.rank() == 0) c.barrier();  // rank 1 never comes
    else std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  }, o);
  EXPECT_TRUE(has(msg, "barrier #4 on world ranks [0 1]")) << msg;
  std::ifstream f(dir / "flight_record_rank0.json");
  ASSERT_TRUE(f) << "no record in " << dir;
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["rank"], 0);
  ASSERT_EQ(j["communicators"].size(), 1u);
  const auto& ops = j["communicators"][0]["ops"];
  ASSERT_EQ(ops.size(), 5u) << j.dump(1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ops[i]["op"], "all_reduce");
    EXPECT_EQ(ops[i]["seq"], i);
    EXPECT_EQ(ops[i]["state"], "completed");
    EXPECT_EQ(ops[i]["reduce"], "max");
    EXPECT_EQ(ops[i]["count"], 8);
  }
  EXPECT_EQ(ops[3]["root"], 1);
  EXPECT_EQ(ops[4]["op"], "barrier");
  EXPECT_EQ(ops[4]["state"], "started");
  // The rank that was asked wrote its side too.
  EXPECT_TRUE(std::filesystem::exists(dir / "flight_record_rank1.json"));
  std::filesystem::remove_all(dir);
}

// What a GatedComm's receives wait for, and what the test reads of them; shared,
// so that it outlives the communicator.
struct Gate {
  std::shared_future<void> open;
  std::atomic<bool> reached{false};  // a receive waits at the gate
  std::atomic<int> calls{0};         // receives and native collectives called
};

// A two-rank communicator whose receives wait for a gate and then fail, as a receive
// from a dead peer does; it leaves its progress thread running when destroyed, as
// the MPI backend does while a failing process unwinds.
class GatedComm final : public comm::CommBase {
 public:
  GatedComm(std::shared_ptr<comm::CommState> st, std::shared_ptr<Gate> gate)
      : CommBase(nullptr, std::move(st)), gate_(std::move(gate)) {
    set_node_map(comm::NodeMap::one_node(2));
  }
  ~GatedComm() override { stop_progress(/*detach=*/true); }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "gated"; }
  std::unique_ptr<Communicator> split(int, int) override { throw Error("GatedComm cannot split"); }

 protected:
  void do_send(const void*, size_t, int, int) override {}
  void do_recv(void*, size_t, int, int) override { fail_at_gate(); }
  comm::WorkPtr do_isend(const void*, size_t, int, int) override { return std::make_shared<comm::DoneWork>(); }
  comm::WorkPtr do_irecv(void*, size_t, int, int) override { fail_at_gate(); }
  void native_all_reduce(const void*, void*, size_t, DType, comm::ReduceOp) override { fail_at_gate(); }

 private:
  [[noreturn]] void fail_at_gate() {
    const std::shared_ptr<Gate> gate = gate_;  // read before `reached` lets the test destroy this
    ++gate->calls;
    gate->reached = true;
    gate->open.wait();
    throw Error("peer gone");
  }
  std::shared_ptr<Gate> gate_;
};

// An all-reduce that blocks in one call, as MPI_Allreduce does.
comm::WorkPtr native_all_reduce_async(Communicator& c, std::vector<float>& v) {
  return c.all_reduce_async(v.data(), v.data(), v.size(), DType::f32, comm::ReduceOp::sum, comm::Algorithm::native);
}

// A gated communicator's state and gate, closed until a test opens it.
class ProgressThread : public ::testing::Test {
 protected:
  ProgressThread() { gate->open = open.get_future().share(); }
  // w's op failed with an error that says `text`.
  static void expect_fails_with(const comm::WorkPtr& w, const std::string& text) {
    try {
      w->wait();
      ADD_FAILURE() << "the op ran";
    } catch (const Error& e) {
      EXPECT_TRUE(has(e.what(), text)) << e.what();
    }
  }
  std::shared_ptr<comm::CommState> st =
      std::make_shared<comm::CommState>("world", std::vector<int>{0, 1}, 0, Clock::now());
  std::promise<void> open;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
};

// The op a detached progress thread is running (blocked on a peer) ends after its
// communicator is gone: its handle fails, the record (kept by the thread) says so,
// ops queued behind it fail without running, and nothing of the freed communicator
// is touched (the sanitizer passes run this test).
TEST_F(ProgressThread, DetachedThreadFinishesItsOpWithoutItsCommunicator) {
  std::vector<float> a(64, 1.f), b(64, 1.f);
  auto c = std::make_unique<GatedComm>(st, gate);
  auto running = native_all_reduce_async(*c, a);
  auto queued = native_all_reduce_async(*c, b);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!gate->reached && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(gate->reached) << "the first op never reached its receive";
  c.reset();  // while the op waits on a peer, as a failing rank unwinds
  open.set_value();
  EXPECT_THROW(running->wait(), Error);
  expect_fails_with(queued, "communicator destroyed before the collective ran");
  EXPECT_EQ(gate->calls.load(), 1);
  const auto ops = st->recorder.recent();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].state, comm::OpState::failed);
  EXPECT_EQ(ops[1].state, comm::OpState::failed);
  EXPECT_TRUE(has(ops[1].error, "destroyed before the collective ran")) << ops[1].error;
}

// A queued collective that fails midway (its peer gone, its deadline passed) leaves
// the group's messages out of order: the ones queued behind it, and any queued
// later, fail without running instead of taking its peers' messages as theirs.
TEST_F(ProgressThread, CollectivesBehindAFailedOneFailWithoutRunning) {
  std::vector<float> a(64, 1.f), b(64, 1.f), c2(64, 1.f);
  GatedComm c(st, gate);
  auto first = native_all_reduce_async(c, a);
  auto behind = native_all_reduce_async(c, b);
  open.set_value();
  EXPECT_THROW(first->wait(), Error);
  for (const comm::WorkPtr& w : {behind, native_all_reduce_async(c, c2)})
    expect_fails_with(w, "not run: an earlier collective on this group failed (peer gone");
  EXPECT_EQ(gate->calls.load(), 1);
  const auto ops = st->recorder.recent();
  ASSERT_EQ(ops.size(), 3u);
  for (const auto& op : ops) EXPECT_EQ(op.state, comm::OpState::failed);
}

TEST(FlightRecorder, KeepsTheLastOpsAndEveryUnfinishedOne) {
  comm::FlightRecorder rec(64);
  comm::OpRecord first;
  first.op = "recv";
  first.p2p_seq = 0;
  const uint64_t open_id = rec.add(first);
  rec.set_state(open_id, comm::OpState::started, 1.0);
  for (int i = 0; i < 99; ++i) {
    comm::OpRecord r;
    r.op = "all_reduce";
    r.seq = i;
    r.dtype = "f32";
    const uint64_t id = rec.add(r);
    rec.set_state(id, comm::OpState::completed, 2.0);
  }
  const auto recent = rec.recent();
  ASSERT_EQ(recent.size(), 64u);
  EXPECT_EQ(recent.front().id, 36u);
  EXPECT_EQ(recent.back().id, 99u);
  const auto open = rec.unfinished();
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].op, "recv");
  EXPECT_EQ(open[0].state, comm::OpState::started);
  rec.set_state(open_id, comm::OpState::completed, 3.0);
  EXPECT_TRUE(rec.unfinished().empty());
}

TEST(DesyncCheck, MismatchedCollectivesFailNamingBothCalls) {
  comm::CommOptions o = short_timeout(20);
  o.debug_collectives = true;
  for (int n : {2, 3, 5}) comm::run_local(n, test_cases::mismatch_suite, o);
}

TEST(DesyncCheck, MessageListsEachCallWithItsRanks) {
  comm::CommOptions o = short_timeout(20);
  o.debug_collectives = true;
  comm::run_local(3, [](Communicator& c) {
    std::vector<float> v(32, 1.f);
    try {
      c.all_reduce(v.data(), v.data(), c.rank() == 1 ? 31 : 32, DType::f32, comm::ReduceOp::sum);
      ADD_FAILURE() << "no mismatch";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "collective mismatch on world ranks [0 1 2]: ranks 0 2 called all_reduce #0 (32 x "
                "f32, sum); rank 1 called all_reduce #0 (31 x f32, sum). Every rank of a group must "
                "call the same collectives in the same order (a rank that skipped one shows the "
                "call after it).");
    }
  }, o);
}

TEST(Watchdog, BadTimeoutIsAConfigError) {
  EXPECT_THROW(comm::run_local(2, [](Communicator&) {}, short_timeout(0)), ConfigError);
}

}  // namespace
}  // namespace braid
