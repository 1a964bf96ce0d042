#include "braid/comm/backends/local.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "braid/comm/comm_base.h"
#include "braid/core/error.h"

namespace braid::comm {
namespace {

// Abort state shared by a world and every group split from it.
struct Job {
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string reason;                   // message peers throw
  int first_rank = -1;                  // first rank whose fn threw
  std::string first_what;

  void abort(int rank, const std::string& what) {
    std::lock_guard<std::mutex> lk(mu);
    if (!aborted.load()) {
      reason = "aborted: rank " + std::to_string(rank) + " failed: " + what;
      aborted = true;
    }
  }
  // Records a rank's failure. A failure caused by the abort itself ("aborted: ...")
  // never replaces the original one.
  void fail(int rank, const std::string& what, ExitCode code = ExitCode::error) {
    std::lock_guard<std::mutex> lk(mu);
    const bool secondary = what.rfind("aborted: rank ", 0) == 0;
    if (!aborted.load()) {
      reason = "aborted: rank " + std::to_string(rank) + " failed: " + what;
      aborted = true;
    }
    if (first_rank < 0 || (first_secondary && !secondary)) {
      first_rank = rank;
      first_what = what;
      first_code = code;
      first_secondary = secondary;
    }
  }
  bool first_secondary = false;
  ExitCode first_code = ExitCode::error;
  [[noreturn]] void throw_aborted() {
    std::lock_guard<std::mutex> lk(mu);
    throw RankFailure(reason);
  }
};

// A receive waiting in its owner's mailbox. A sender that matches it marks it
// claimed under the mailbox lock, copies outside the lock, then marks it done; the
// receive's handle withdraws an unclaimed receive and waits out a claimed one before
// its buffer may go (no pending receive outlives its buffer).
struct PostedRecv {
  void* buf;
  size_t bytes;
  bool claimed = false;
  bool done = false;
  std::string error;
};

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> unexpected;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<PostedRecv>>> posted;
};

struct World {
  int size;
  std::shared_ptr<Job> job;
  std::vector<std::unique_ptr<Mailbox>> boxes;
  // Groups being created by split(): (split sequence number, color) -> world.
  std::mutex split_mu;
  std::map<std::pair<uint64_t, int>, std::pair<std::shared_ptr<World>, int>> splits;

  World(int n, std::shared_ptr<Job> j) : size(n), job(std::move(j)) {
    for (int i = 0; i < n; ++i) boxes.push_back(std::make_unique<Mailbox>());
  }
};

// Polling interval of blocked waits, so an abort is noticed even by waiters nobody
// notifies (e.g. ranks of a sub-group).
constexpr auto kAbortPoll = std::chrono::milliseconds(10);

std::string size_mismatch(size_t sent, size_t expected, int src, int dst, int tag) {
  return detail::concat("message size mismatch: rank ", src, " sent ", sent, " bytes to rank ",
                        dst, " (tag ", tag, ") which expected ", expected);
}

class LocalRecvWork final : public Work {
 public:
  LocalRecvWork(std::shared_ptr<World> w, int me, int peer, int tag, std::shared_ptr<PostedRecv> pr)
      : w_(std::move(w)), me_(me), peer_(peer), tag_(tag), pr_(std::move(pr)) {}
  // Dropped before completion (an error unwinding, or a handle never waited): withdraw
  // the receive so no later send writes into a buffer that may be freed next.
  ~LocalRecvWork() override { withdraw(); }
  void withdraw() {
    Mailbox& mb = *w_->boxes[me_];
    std::unique_lock<std::mutex> lk(mb.mu);
    if (pr_->done || withdrawn_) return;
    if (!pr_->claimed) {
      withdrawn_ = true;
      auto it = mb.posted.find({peer_, tag_});
      if (it != mb.posted.end()) {
        auto& q = it->second;
        q.erase(std::remove(q.begin(), q.end(), pr_), q.end());
        if (q.empty()) mb.posted.erase(it);
      }
      return;
    }
    // A sender is copying into the buffer right now: a bounded memcpy, wait it out.
    mb.cv.wait(lk, [&] { return pr_->done; });
  }
  void wait() override {
    Mailbox& mb = *w_->boxes[me_];
    std::unique_lock<std::mutex> lk(mb.mu);
    while (!pr_->done) {
      if (w_->job->aborted.load()) {
        lk.unlock();
        w_->job->throw_aborted();
      }
      if (withdrawn_) throw Error("receive was cancelled");
      lk.unlock();
      poll_signals();  // a deadline passed or the op was cancelled: throw
      lk.lock();
      if (!pr_->done) mb.cv.wait_for(lk, kAbortPoll);
    }
    if (!pr_->error.empty()) throw Error(pr_->error);
  }
  void cancel() override { withdraw(); }
  bool test() override {
    Mailbox& mb = *w_->boxes[me_];
    std::lock_guard<std::mutex> lk(mb.mu);
    if (pr_->done && !pr_->error.empty()) throw Error(pr_->error);
    if (!pr_->done && withdrawn_) throw Error("receive was cancelled");
    if (!pr_->done && w_->job->aborted.load()) w_->job->throw_aborted();
    return pr_->done;
  }

 private:
  std::shared_ptr<World> w_;
  int me_, peer_, tag_;
  std::shared_ptr<PostedRecv> pr_;
  bool withdrawn_ = false;  // guarded by the mailbox lock
};

class LocalComm final : public CommBase {
 public:
  LocalComm(std::shared_ptr<World> w, int rank, std::shared_ptr<Monitor> monitor = nullptr,
            std::shared_ptr<CommState> state = nullptr)
      : CommBase(std::move(monitor), std::move(state)), w_(std::move(w)), rank_(rank) {
    set_node_map(NodeMap::one_node(w_->size));
  }
  ~LocalComm() override {
    // A sub-group destroyed while its creator unwinds an exception: abort the job so a
    // queued collective blocked on peers returns and the progress thread can be joined.
    if (std::uncaught_exceptions() > 0 && progress_busy())
      w_->job->abort(rank_, "exception raised while collectives were in flight");
    stop_progress();
  }

  int rank() const override { return rank_; }
  int size() const override { return w_->size; }
  std::string backend() const override { return "local"; }

 protected:
  // As on hosts: a group that spans nodes of its map gets private memory.
  std::unique_ptr<SharedMapping> map_shared(size_t block_bytes) override {
    return node_map().nodes() > 1 ? nullptr : map_in_process(block_bytes);
  }
  void check_peers() override {
    if (w_->job->aborted.load()) w_->job->throw_aborted();
  }

 public:

  void do_send(const void* buf, size_t bytes, int peer, int tag) override {
    check_peer(peer);
    if (w_->job->aborted.load()) w_->job->throw_aborted();
    Mailbox& mb = *w_->boxes[peer];
    std::shared_ptr<PostedRecv> pr;
    {
      std::lock_guard<std::mutex> lk(mb.mu);
      auto it = mb.posted.find({rank_, tag});
      if (it != mb.posted.end() && !it->second.empty()) {
        pr = it->second.front();
        it->second.pop_front();
        if (it->second.empty()) mb.posted.erase(it);
        pr->claimed = true;
      } else {
        auto& q = mb.unexpected[{rank_, tag}];
        q.emplace_back(bytes);
        if (bytes) std::memcpy(q.back().data(), buf, bytes);
      }
    }
    if (pr) {
      // Copy into the waiting receive outside the lock (large copies must not block
      // other senders to this rank).
      if (pr->bytes == bytes) {
        if (bytes) std::memcpy(pr->buf, buf, bytes);
      }
      std::lock_guard<std::mutex> lk(mb.mu);
      if (pr->bytes != bytes) pr->error = size_mismatch(bytes, pr->bytes, rank_, peer, tag);
      pr->done = true;
    }
    mb.cv.notify_all();
    count_sent(bytes);
  }

  WorkPtr do_irecv(void* buf, size_t bytes, int peer, int tag) override {
    check_peer(peer);
    Mailbox& mb = *w_->boxes[rank_];
    std::vector<std::byte> msg;
    {
      std::lock_guard<std::mutex> lk(mb.mu);
      auto it = mb.unexpected.find({peer, tag});
      if (it != mb.unexpected.end() && !it->second.empty()) {
        msg = std::move(it->second.front());
        it->second.pop_front();
      } else {
        auto pr = std::make_shared<PostedRecv>();
        pr->buf = buf;
        pr->bytes = bytes;
        mb.posted[{peer, tag}].push_back(pr);
        count_received(bytes);
        return std::make_shared<LocalRecvWork>(w_, rank_, peer, tag, pr);
      }
    }
    if (msg.size() != bytes) throw Error(size_mismatch(msg.size(), bytes, peer, rank_, tag));
    if (bytes) std::memcpy(buf, msg.data(), bytes);
    count_received(bytes);
    return std::make_shared<DoneWork>();
  }

  void do_recv(void* buf, size_t bytes, int peer, int tag) override {
    do_irecv(buf, bytes, peer, tag)->wait();
  }
  WorkPtr do_isend(const void* buf, size_t bytes, int peer, int tag) override {
    do_send(buf, bytes, peer, tag);  // buffered: complete on return
    return std::make_shared<DoneWork>();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> result;
    run_collective(split_record(), [&] {
      const int n = w_->size;
      int mine[2] = {color, key};
      std::vector<int> all(2 * static_cast<size_t>(n));
      // Bytes only: f32 is used as a 4-byte carrier, no arithmetic happens.
      algo::ring_all_gather(*this, ring_options(), mine, all.data(), 2, DType::f32);
      const uint64_t seq = split_seq_++;
      if (color < 0) return;  // like MPI_UNDEFINED: not a member of any group
      std::vector<std::pair<int, int>> members;  // (key, rank)
      for (int r = 0; r < n; ++r)
        if (all[2 * r] == color) members.push_back({all[2 * r + 1], r});
      std::sort(members.begin(), members.end());
      int new_rank = 0;
      std::vector<int> ranks;
      for (size_t i = 0; i < members.size(); ++i) {
        if (members[i].second == rank_) new_rank = static_cast<int>(i);
        ranks.push_back(members[i].second);
      }
      std::shared_ptr<World> sub;
      {
        std::lock_guard<std::mutex> lk(w_->split_mu);
        auto& entry = w_->splits[{seq, color}];
        if (!entry.first) entry.first = std::make_shared<World>(static_cast<int>(members.size()), w_->job);
        sub = entry.first;
        if (++entry.second == static_cast<int>(members.size())) w_->splits.erase({seq, color});
      }
      auto child = std::make_unique<LocalComm>(sub, new_rank, monitor(),
                                               child_state(detail::concat(seq, ":", color), ranks, new_rank));
      child->set_node_map(node_map().restrict(ranks));
      result = std::move(child);
    });
    return result;
  }

 private:
  void check_peer(int peer) const {
    BRAID_CHECK(peer >= 0 && peer < w_->size, "peer ", peer, " outside group of ", w_->size);
  }

  std::shared_ptr<World> w_;
  int rank_;
  uint64_t split_seq_ = 0;
};

}  // namespace

void run_local(int world_size, const std::function<void(Communicator&)>& fn,
               const CommOptions& options) {
  run_local(NodeMap::one_node(world_size), fn, options);
}

void run_local(const NodeMap& nodes, const std::function<void(Communicator&)>& fn,
               const CommOptions& options) {
  const int world_size = nodes.world();
  BRAID_CONFIG_CHECK(world_size >= 1, "run_local: world size ", world_size, " must be >= 1");
  options.validate();
  auto job = std::make_shared<Job>();
  auto world = std::make_shared<World>(world_size, job);
  auto control = std::make_shared<World>(world_size, job);  // the monitors' own channel
  std::vector<int> ranks(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) ranks[static_cast<size_t>(r)] = r;
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      // The communicator outlives the try block, so the job is aborted before its
      // destructor waits for its progress thread.
      std::unique_ptr<LocalComm> comm;
      try {
        auto monitor = std::make_shared<Monitor>(
            options, r, world_size, std::make_unique<LocalComm>(control, r),
            [job, r](const std::string& why) { job->abort(r, why); }, /*separate_processes=*/false);
        comm = std::make_unique<LocalComm>(
            world, r, monitor, std::make_shared<CommState>("world", ranks, r, monitor->origin()));
        comm->set_node_map(nodes);
        fn(*comm);
      } catch (const std::exception& e) {
        job->fail(r, e.what(), exit_code_of(e));
      } catch (...) {
        job->fail(r, "unknown exception");
      }
    });
  }
  for (auto& t : threads) t.join();
  if (job->first_rank < 0) return;
  // A configuration or data error is the user's to fix, whichever rank saw it;
  // anything else is a failed rank.
  if (job->first_code == ExitCode::data) throw DataError(job->first_what);
  if (job->first_code == ExitCode::config) throw ConfigError(job->first_what);
  throw RankFailure("rank " + std::to_string(job->first_rank) + ": " + job->first_what);
}

}  // namespace braid::comm
