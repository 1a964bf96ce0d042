// The watchdog: every blocking wait of a communicator has a deadline, and when one
// passes the job ends with a message naming the rank or ranks that never reached the
// operation (the model is PyTorch's NCCL watchdog with its flight recorder, and
// torch.distributed's desync report).
//
// Each rank has one Monitor, shared by its world communicator and every group split
// from it. The monitor's thread (1) watches the operations its communicators have
// started and (2) answers the other ranks' questions about its own state. Questions
// and answers travel over a control communicator used for nothing else, with
// non-blocking calls and a deadline of their own, so a rank that is stopped (SIGSTOP)
// or hung outside braid is named as not answering rather than waited for.
//
// A waiting thread never sleeps uninterruptibly: backends poll `poll_signals()` while
// they wait, and the monitor raises the op's signal to make the waiter throw. Waits the
// backend cannot interrupt (MPI's own blocking collectives) end by the hard abort the
// backend provides (MPI_Abort), after a grace period.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/comm/flight_recorder.h"

namespace braid::comm {

/// What the monitor tells the thread waiting on one operation.
struct OpSignal {
  std::atomic<bool> raised{false};    // the waiter must throw Error(error)
  std::string error;                  // written once, before raised is set
  std::atomic<bool> handled{false};   // the monitor has taken this op's timeout

  /// Makes the waiter throw Error(message); the first raise wins. Thread-safe.
  bool raise(const std::string& message);

 private:
  std::mutex mu_;
};

/// Identity and flight record of one communicator, shared by its handles and the
/// monitor (which holds it weakly).
struct CommState {
  std::string uid;               // equal on every member: "world", "world/3:1", ...
  uint64_t uid_hash = 0;         // FNV-1a of uid, what questions carry
  std::vector<int> world_ranks;  // group rank -> world rank
  int rank = 0;                  // this rank's group rank
  FlightRecorder recorder;
  std::atomic<int64_t> next_seq{0};  // collectives called so far
  std::atomic<int64_t> next_p2p{0};  // point-to-point operations recorded so far

  /// t0: the monitor's start, the origin of every time in the record.
  CommState(std::string id, std::vector<int> ranks, int my_rank,
            std::chrono::steady_clock::time_point t0);
  /// Seconds since t0.
  double now() const;
  /// "world ranks [0 1 2 3]".
  std::string group_text() const;
  int world_rank_of(int group_rank) const;

  /// The signal of a started operation (registered while it runs).
  std::shared_ptr<OpSignal> signal(uint64_t id);
  void add_signal(uint64_t id, std::shared_ptr<OpSignal> s);
  void remove_signal(uint64_t id);

 private:
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<OpSignal>> signals_;
};

/// Throws Error(signal's message) when the operation this thread is running on any
/// communicator has been signalled (timed out, cancelled). Cheap: one atomic load.
/// Backends call it from every wait loop.
void poll_signals();

/// The operation the calling thread is running, if any (set by RunningOp).
struct OpContext {
  CommState* state = nullptr;
  uint64_t id = 0;
  OpSignal* signal = nullptr;
  OpContext* prev = nullptr;
};
OpContext* current_op();

/// Marks an operation started on the calling thread for its lifetime: records it,
/// registers its signal for the monitor and makes it the thread's current op, so
/// the point-to-point calls a collective makes count as that collective. Completed
/// on destruction (failed when destroyed by an exception).
class RunningOp {
 public:
  RunningOp(CommState& st, uint64_t id, std::shared_ptr<OpSignal> sig = nullptr);
  ~RunningOp();
  RunningOp(const RunningOp&) = delete;
  RunningOp& operator=(const RunningOp&) = delete;
  /// Records the op completed (call before destruction on success).
  void done();

 private:
  CommState& st_;
  uint64_t id_;
  std::shared_ptr<OpSignal> sig_;
  OpContext ctx_;
  bool finished_ = false;
};

class Monitor {
 public:
  /// control: a communicator over the same ranks as the world, used only by the
  /// monitor (no monitor of its own). hard_abort ends the whole job with a message
  /// (MPI_Abort; for ranks as threads, the job's abort). separate_processes: ranks are
  /// processes, so a rank that timed out as well leaves the report to the lowest one.
  Monitor(CommOptions opt, int world_rank, int world_size, std::unique_ptr<Communicator> control,
          std::function<void(const std::string&)> hard_abort, bool separate_processes);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  void attach(const std::shared_ptr<CommState>& s);
  std::chrono::steady_clock::time_point origin() const { return t0_; }
  const CommOptions& options() const { return opt_; }
  /// Seconds on the steady clock since this monitor started.
  double now() const;

  /// This rank's flight record as JSON (every communicator), with `reason`.
  std::string record_json(const std::string& reason) const;

  /// Held by the monitor's thread while it calls MPI to serve queries. MPI's
  /// progress engine is global: that MPI_Test may complete another thread's
  /// receive and write its buffer, and OpenMPI tells the owner through atomics
  /// that ThreadSanitizer cannot see. An owner passes this fence (lock, unlock)
  /// after a request completes, making that order visible: the write happened
  /// before the fence's last release, or the owner waits until it has.
  std::mutex& progress_fence() { return fence_; }
  /// Each world rank's host name, so a timeout names the hosts of the ranks
  /// it blames when the job spans several. Call before the first collective.
  void set_hosts(std::vector<std::string> hosts) { hosts_ = std::move(hosts); }

 private:
  struct Pending;  // a timeout delivered to its waiter, awaiting the waiter's exit
  void loop();
  void serve();
  void check_deadlines();
  /// Asks the group (or the peer) where they are, composes the job's message
  /// naming the ranks that never reached the operation, and delivers it.
  void handle_timeout(const std::shared_ptr<CommState>& st, const OpRecord& op,
                      const std::shared_ptr<OpSignal>& sig);
  /// Raises the timeout in its waiter now (the reporter) or after a grace
  /// period (the others: the reporter's failure normally ends them first).
  void deliver_timeout(const std::shared_ptr<CommState>& st, const OpRecord& op,
                       const std::shared_ptr<OpSignal>& sig, const std::string& msg, bool reporter);
  std::vector<std::shared_ptr<CommState>> states() const;
  /// What this rank is doing, in a phrase; *waiting set when it is in an operation.
  std::string activity(bool* waiting = nullptr, double* waited = nullptr) const;
  /// Says once, on stderr, where this rank waits when a stop signal finds it
  /// blocked in communication for over a second (CommOptions::stop_signal).
  void report_interrupted_wait();
  /// Says once per operation, on stderr, when this rank's oldest operation has
  /// waited half the deadline (deadlines of 4 s and more): a stall is named
  /// before a launcher that notices a lost host first ends the job.
  void warn_long_wait(double t);
  void dump_record(const std::string& reason, bool to_stderr) const;

  CommOptions opt_;
  int world_rank_, world_size_;
  std::vector<std::string> hosts_;  // world rank -> host name (set_hosts)
  std::unique_ptr<Communicator> control_;
  std::function<void(const std::string&)> hard_abort_;
  bool separate_processes_;
  std::chrono::steady_clock::time_point t0_;
  mutable std::mutex mu_;
  std::mutex fence_;
  std::vector<std::weak_ptr<CommState>> states_;
  std::atomic<bool> stop_{false};
  bool interrupt_reported_ = false;  // report_interrupted_wait has spoken
  std::pair<uint64_t, uint64_t> warned_{0, 0};  // (communicator, op id) warn_long_wait last named
  std::atomic<int32_t> next_query_{0};
  bool dumped_ = false;
  std::vector<std::unique_ptr<Pending>> pending_;
  struct Server;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

}  // namespace braid::comm
