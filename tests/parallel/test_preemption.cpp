// Graceful stop: a stop signal (recorded here by request_stop, as the handler
// does) ends the run after the step in progress on every rank of every layout,
// and the checkpoint it leaves resumes into the uninterrupted run exactly.
// With the local backend all ranks share the process's flag; one flagged rank
// among several is covered under mpirun (tests/e2e/sigterm.sh).
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <mutex>

#include "braid/comm/backends/local.h"
#include "braid/train/preemption.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

using testing_harness::synthetic_tokens;

// Records a stop for the scope of a test and forgets it after, whatever happens.
struct StopRequested {
  explicit StopRequested(int sig) { train::request_stop(sig); }
  ~StopRequested() { train::clear_stop(); }
};

// Every rank's stopped_at() and record count after run().
struct Ending {
  std::vector<int64_t> stopped_at;
  std::vector<size_t> records;
};

Ending run_ending(const train::TrainOptions& o, int ranks, const std::vector<uint16_t>& data) {
  Ending e;
  e.stopped_at.resize(static_cast<size_t>(ranks));
  e.records.resize(static_cast<size_t>(ranks));
  std::mutex mu;
  comm::run_local(ranks, [&](comm::Communicator& w) {
    train::Trainer t(o, w, data, nullptr);
    const auto recs = t.run();
    std::lock_guard<std::mutex> lk(mu);
    e.stopped_at[static_cast<size_t>(w.rank())] = t.stopped_at();
    e.records[static_cast<size_t>(w.rank())] = recs.size();
  });
  return e;
}

}  // namespace

TEST(Preemption, FirstSignalIsKeptUntilCleared) {
  EXPECT_EQ(train::stop_signal(), 0);
  {
    StopRequested stop(SIGTERM);
    train::request_stop(SIGINT);
    EXPECT_EQ(train::stop_signal(), SIGTERM);
    EXPECT_STREQ(train::stop_signal_name(train::stop_signal()), "SIGTERM");
  }
  EXPECT_EQ(train::stop_signal(), 0);
  EXPECT_STREQ(train::stop_signal_name(SIGUSR1), "SIGUSR1");
}

TEST(Preemption, EveryLayoutStopsAfterTheStepInProgress) {
  const auto data = synthetic_tokens(20000, 21);
  struct Layout {
    const char* name;
    int ranks;
    std::function<void(train::TrainOptions&)> set;
  };
  const std::vector<Layout> layouts = {
      {"ddp", 2, [](train::TrainOptions&) {}},
      {"zero-1", 2, [](train::TrainOptions& o) { o.zero = 1; }},
      {"zero-3", 2, [](train::TrainOptions& o) { o.zero = 3; }},
      {"tp", 2, [](train::TrainOptions& o) { o.tp = 2; }},
      {"pp", 2, [](train::TrainOptions& o) { o.pp = 2; }},
      {"ps", 3, [](train::TrainOptions& o) { o.dp_mode = "ps"; }},
      // The server sees the stop before any push and ends the run after one
      // update from each worker: one whole round.
      {"ps-async", 3, [](train::TrainOptions& o) { o.dp_mode = "ps"; o.ps_async = true; }},
  };
  StopRequested stop(SIGTERM);
  for (const auto& l : layouts) {
    auto o = testing_harness::tiny_options(7);
    o.steps = 6;
    l.set(o);
    const Ending e = run_ending(o, l.ranks, data);
    for (int r = 0; r < l.ranks; ++r) {
      EXPECT_EQ(e.stopped_at[static_cast<size_t>(r)], 1) << l.name << " rank " << r;
      // The async server and workers keep a record per round and per iteration.
      EXPECT_EQ(e.records[static_cast<size_t>(r)], 1u) << l.name << " rank " << r;
    }
  }
}

TEST(Preemption, StoppedRunResumesIntoTheUninterruptedOne) {
  const auto data = synthetic_tokens(20000, 23);
  auto o = testing_harness::tiny_options(9);
  o.steps = 5;
  const auto full = testing_harness::run_rank0(o, 2, data);
  const std::string path = testing_harness::tmp_path("braid_preempt_");
  auto first = o;
  first.save_dir = path;
  {
    StopRequested stop(SIGTERM);
    const Ending e = run_ending(first, 2, data);
    EXPECT_EQ(e.stopped_at[0], 1);
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  auto second = o;
  second.resume = path;
  const auto rest = testing_harness::run_rank0(second, 2, data);
  ASSERT_EQ(rest.steps.size(), 4u);
  for (size_t i = 0; i < rest.steps.size(); ++i) {
    EXPECT_EQ(rest.steps[i].step, full.steps[1 + i].step);
    EXPECT_EQ(rest.steps[i].loss, full.steps[1 + i].loss) << "step " << 1 + i;
  }
  EXPECT_EQ(rest.hash, full.hash);
  std::filesystem::remove_all(path);
}
