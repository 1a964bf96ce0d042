// CommBase: the part of every Communicator that is independent of the transport.
// It runs the collective algorithms (algorithms/) over the backend's point-to-point
// calls, dispatches Algorithm::native to the backend's hooks, owns the per-
// communicator progress thread on which *_async collectives run in FIFO order, and
// records every operation in the flight recorder its monitor watches (watchdog.h).
//
// Ordering: a blocking collective waits until the async queue has drained and then
// runs on the caller's thread, holding the "busy" slot so no queued collective can
// interleave with it. Collective traffic uses the reserved tag kCollectiveTag, so user
// point-to-point messages (tags 0 .. kCollectiveTag-1) never match it. The point-to-
// point calls a collective makes count as part of that collective, not as ops of
// their own.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/shared_memory.h"
#include "braid/comm/communicator.h"
#include "braid/comm/watchdog.h"
#include "braid/comm/work.h"

namespace braid::comm {

class CommBase : public Communicator {
 public:
  /// monitor and state null: an unmonitored communicator (a monitor's own control
  /// channel). Otherwise the state is attached to the monitor.
  CommBase(std::shared_ptr<Monitor> monitor, std::shared_ptr<CommState> state);
  ~CommBase() override;

  void send(const void* buf, size_t bytes, int peer, int tag) final;
  void recv(void* buf, size_t bytes, int peer, int tag) final;
  WorkPtr isend(const void* buf, size_t bytes, int peer, int tag) final;
  WorkPtr irecv(void* buf, size_t bytes, int peer, int tag) final;
  void sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src,
                int tag) final;

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                  Algorithm algo = Algorithm::ring) override;
  void all_gather(const void* send, void* recv, size_t count, DType dtype,
                  Algorithm algo = Algorithm::ring) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                      Algorithm algo = Algorithm::ring) override;
  void all_to_all(const void* send, void* recv, size_t count, DType dtype,
                  Algorithm algo = Algorithm::ring) override;
  void broadcast(void* buf, size_t count, DType dtype, int root,
                 Algorithm algo = Algorithm::ring) override;
  void barrier() override;

  WorkPtr all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                           Algorithm algo = Algorithm::ring) override;
  WorkPtr all_gather_async(const void* send, void* recv, size_t count, DType dtype,
                           Algorithm algo = Algorithm::ring) override;
  WorkPtr reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                               ReduceOp op, Algorithm algo = Algorithm::ring) override;

  SharedBuffer alloc_shared(size_t bytes) final;

  void set_name(std::string name) final;
  std::string name() const final;
  void set_span_sink(std::shared_ptr<SpanSink> sink) final;
  std::shared_ptr<SpanSink> span_sink() const final;
  void set_next_label(std::string label) final;

  uint64_t bytes_sent() const override { return bytes_sent_.load(); }
  uint64_t bytes_received() const override { return bytes_received_.load(); }

  /// Tuning of the ring algorithms (chunk size in bytes, receives in flight). Defaults
  /// come from the BRAID_COMM_* variables when set (algo::apply_env).
  algo::RingOptions& ring_options() { return ring_opts_; }
  /// Where this group's ranks live, for the selector; a backend sets it when it makes
  /// the communicator (one node unless it knows better).
  void set_node_map(NodeMap m);
  const NodeMap& node_map() const final { return node_map_; }

  /// This communicator's identity and flight record (null when unmonitored).
  const std::shared_ptr<CommState>& state() const { return state_; }
  const std::shared_ptr<Monitor>& monitor() const { return monitor_; }

 protected:
  // The transport's point-to-point calls. Blocking ones must poll poll_signals()
  // while they wait.
  virtual void do_send(const void* buf, size_t bytes, int peer, int tag) = 0;
  virtual void do_recv(void* buf, size_t bytes, int peer, int tag) = 0;
  virtual WorkPtr do_isend(const void* buf, size_t bytes, int peer, int tag) = 0;
  virtual WorkPtr do_irecv(void* buf, size_t bytes, int peer, int tag) = 0;
  // Default: post the receive, send, wait (a transport may fuse the two).
  virtual void do_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes,
                           int src, int tag) {
    auto w = do_irecv(rbuf, rbytes, src, tag);
    do_send(sbuf, sbytes, dst, tag);
    w->wait();
  }

  // Native hooks; the defaults run our algorithms (what the local backend wants).
  virtual void native_all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op);
  virtual void native_all_gather(const void* send, void* recv, size_t count, DType dtype);
  virtual void native_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op);
  virtual void native_all_to_all(const void* send, void* recv, size_t count, DType dtype);
  virtual void native_broadcast(void* buf, size_t count, DType dtype, int root);
  virtual void native_barrier();
  /// Runs `op` with the algorithm algo::select_algorithm picks for its size, this
  /// group's size and node map (comm_base.cpp's one path to our algorithms).
  void run_ours(algo::Collective op, const algo::CollectiveArgs& a);

  /// Runs fn as the collective `op` (its name, count, dtype, reduce, root filled in):
  /// recorded with the next sequence number, checked against the group's call when
  /// --debug-collectives is on, and run on the caller's thread once no queued
  /// collective is pending or running.
  void run_collective(OpRecord op, const std::function<void()>& fn);
  /// The record of split(color, key): a collective over two int32 per rank.
  static OpRecord split_record();
  /// The state of a group split from this one: `suffix` makes its uid (it must be
  /// the same on every member), members are the group ranks of this communicator.
  std::shared_ptr<CommState> child_state(const std::string& suffix, const std::vector<int>& members,
                                         int new_rank) const;
  /// Drains the queue and joins the progress thread. Derived destructors must call it
  /// (the queued work calls their virtual functions). With detach=true the thread is
  /// left running (used when a failing process is about to be aborted).
  void stop_progress(bool detach = false);
  bool progress_busy();

  /// Maps one block of `block_bytes` per rank so that every rank addresses every
  /// block (collective, called inside alloc_shared); null when the group cannot
  /// share memory, which is the default.
  virtual std::unique_ptr<SharedMapping> map_shared(size_t block_bytes);
  /// map_shared for backends whose ranks share one address space: each rank
  /// allocates its block and the ranks exchange addresses.
  std::unique_ptr<SharedMapping> map_in_process(size_t block_bytes);
  /// Throws when the group is known to be going down (polled by zero-copy waits,
  /// which no transport call wakes).
  virtual void check_peers() {}

  void count_sent(size_t b) { bytes_sent_ += b; }
  void count_received(size_t b) { bytes_received_ += b; }

  algo::Workspace workspace_;  // scratch of the ring algorithms (one collective at a time)

 private:
  struct Async;
  struct ProgressQueue;
  class AsyncWork;
  class TrackedWork;

  /// The progress thread: runs pq's items in order until stopped and drained, or
  /// orphaned. Reads nothing of this communicator outside a running item.
  void progress_loop(const std::shared_ptr<ProgressQueue>& pq, const std::shared_ptr<CommState>& st);
  /// Takes the pending label into `op` and wraps fn so that it reports its span
  /// when a sink is set (lane "main" when blocking, else "comm <name>").
  std::function<void()> traced(OpRecord& op, std::function<void()> fn, bool async);
  void run_exclusive(const std::function<void()>& fn);
  WorkPtr enqueue(OpRecord op, std::function<void()> fn);
  uint64_t record_collective(OpRecord& op);
  /// Records a point-to-point op unless it is part of a running collective of this
  /// communicator (or nothing is monitored); returns false then.
  bool record_p2p(const char* name, size_t bytes, int peer, int tag, uint64_t& id);
  /// Runs fn as recorded op `id` of `st` (this communicator's state; the progress
  /// thread passes its own reference to it).
  void run_recorded(CommState& st, uint64_t id, const std::function<void()>& fn,
                    std::shared_ptr<OpSignal> sig);
  void check_same_call(uint64_t id);
  void do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                     Algorithm algo);
  void do_all_gather(const void* send, void* recv, size_t count, DType dtype, Algorithm algo);
  void do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         Algorithm algo);
  void do_all_to_all(const void* send, void* recv, size_t count, DType dtype, Algorithm algo);
  /// The zero-copy shared buffer holding [p, p + bytes) on this rank, and p's byte
  /// offset in it; null when there is none (or algo is not ours).
  SharedAllocation* find_shared(const void* p, size_t bytes, Algorithm algo, size_t& off) const;
  void count_zero_copy(size_t bytes_each_way);

  std::shared_ptr<Monitor> monitor_;
  std::shared_ptr<CommState> state_;
  algo::RingOptions ring_opts_;
  NodeMap node_map_;
  algo::NodeShape node_shape_;  // what the selector reads of node_map_
  mutable std::mutex meta_mu_;  // name_, sink_, next_label_
  std::string name_ = "world";
  std::shared_ptr<SpanSink> sink_;
  std::string next_label_;
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0};

  // This communicator's zero-copy buffers; shared with them, since a buffer may
  // outlive its communicator.
  struct SharedRegistry {
    std::mutex mu;
    std::vector<SharedAllocation*> live;
    uint64_t made = 0;  // buffers allocated so far (their ids)
  };
  std::shared_ptr<SharedRegistry> shared_ = std::make_shared<SharedRegistry>();

  // The progress thread's queue. The thread holds it (and the CommState) itself, so
  // that a thread left running by stop_progress(detach=true) finishes its op without
  // reaching into the destroyed communicator; `orphaned` tells it to stop there.
  struct ProgressQueue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<std::function<void()>, std::shared_ptr<Async>>> items;
    bool busy = false, stop = false, orphaned = false;
    std::string broken;  // set once a collective failed midway: the rest fail unrun
  };
  std::shared_ptr<ProgressQueue> pq_ = std::make_shared<ProgressQueue>();
  std::thread progress_;
};

}  // namespace braid::comm
