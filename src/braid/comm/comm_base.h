// CommBase: the part of every Communicator that is independent of the transport.
// It runs the collective algorithms (algorithms/) over the backend's point-to-point
// calls, dispatches Algorithm::native to the backend's hooks, and owns the per-
// communicator progress thread on which *_async collectives run in FIFO order.
//
// Ordering: a blocking collective waits until the async queue has drained and then
// runs on the caller's thread, holding the "busy" slot so no queued collective can
// interleave with it. Collective traffic uses the reserved tag kCollectiveTag, so user
// point-to-point messages (tags 0 .. kCollectiveTag-1) never match it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/communicator.h"
#include "braid/comm/work.h"

namespace braid::comm {

class CommBase : public Communicator {
 public:
  CommBase();
  ~CommBase() override;

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

  uint64_t bytes_sent() const override { return bytes_sent_.load(); }
  uint64_t bytes_received() const override { return bytes_received_.load(); }

  /// Tuning of the ring algorithms (chunk size in bytes, receives in flight). Defaults
  /// come from BRAID_COMM_CHUNK_BYTES / BRAID_COMM_DEPTH when set.
  algo::RingOptions& ring_options() { return ring_opts_; }

 protected:
  // Native hooks; the defaults run our algorithms (what the local backend wants).
  virtual void native_all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op);
  virtual void native_all_gather(const void* send, void* recv, size_t count, DType dtype);
  virtual void native_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op);
  virtual void native_all_to_all(const void* send, void* recv, size_t count, DType dtype);
  virtual void native_broadcast(void* buf, size_t count, DType dtype, int root);
  virtual void native_barrier();

  /// Runs fn on the caller's thread once no queued collective is pending or running.
  void run_exclusive(const std::function<void()>& fn);
  /// Queues fn on the progress thread (started on first use).
  WorkPtr enqueue(std::function<void()> fn);
  /// Drains the queue and joins the progress thread. Derived destructors must call it
  /// (the queued work calls their virtual functions). With detach=true the thread is
  /// left running (used when a failing process is about to be aborted).
  void stop_progress(bool detach = false);
  bool progress_busy();

  void count_sent(size_t b) { bytes_sent_ += b; }
  void count_received(size_t b) { bytes_received_ += b; }

  algo::Workspace workspace_;  // scratch of the ring algorithms (one collective at a time)

 private:
  void progress_loop();
  void do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                     Algorithm algo);
  void do_all_gather(const void* send, void* recv, size_t count, DType dtype, Algorithm algo);
  void do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         Algorithm algo);

  algo::RingOptions ring_opts_;
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0};

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<PromiseWork>>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread progress_;
};

}  // namespace braid::comm
